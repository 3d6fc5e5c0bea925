"""Unknown-word replacement (Luong et al. 2015, section 4.1; after Luong et al. 2015b, Jean et al. 2015).

A word-level model writes ``<unk>`` for every word outside its vocabulary. After decoding, each
output ``<unk>`` y_j is replaced by the source word it is aligned to,

    ŝ = argmax_s  a(y_j)(s)          (attention summed over the pieces of each source word)

or, with a bilingual dictionary, by that word's translation when the dictionary has one.

Which attention row is a(y_j)? Row r of the decoder's weights is computed from h_r at the step
that reads y_{r-1} and *predicts* y_r (attnmt/models/decoders.py). The paper (section 3.1,
footnote) uses a_t for the predicted word y_t only with the *location* score, and for the *input*
word y_{t-1} with content-based scores. Measured on gold alignments (attnmt.decode.force,
docs/results/analysis.md), this decoder's a_t aligns the predicted word for every score, so:

    default ("predicted"):  a(y_j) = the row of the step that predicts the <unk> y_j
    --unk-timing paper:      location as above; content-based scores (dot, general, concat, local
                             attention) use the row of the next step, the one that reads y_j

The rows come from force decoding the finished hypothesis (one teacher-forced pass per model),
which also yields the row after the last word. With an ensemble, each model uses its own timing
and the word-level attention is averaged over models.

The copied source word has punctuation stripped from both ends ("Jehoshaphat," -> "Jehoshaphat").
Dictionary lookup tries the word, then its lower-case form (re-capitalising the translation of a
capitalised word). A word with several entries gets the one the target vocabulary knows best
(``target_rank``): a word the vocabulary has over an unknown one, fewer target tokens over more
(single words over phrases), and among word-level entries the more frequent word (lower id);
ties, and dictionaries read without a vocabulary, keep the file's first entry.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnmt.data.vocab import Tokenizer
from attnmt.decode.force import force_attention, output_rows, resolve_timing
from attnmt.decode.translate import Translation, Translator
from attnmt.errors import UserError
from attnmt.runs.loader import Run

UNK_PIECE = "<unk>"
_PUNCT = string.punctuation + "“”‘’«»¿¡…"


def target_rank(tgt_tok: Tokenizer) -> Callable[[str], tuple]:
    """Sort key of a candidate translation under the model's target vocabulary (lower = better):
    (contains <unk>, number of tokens, largest token id). Word-level vocabularies are sorted by
    training frequency, so the id ranks known words by frequency; for subwords, fewer pieces
    mean a more frequent word."""
    unk = tgt_tok.encode_pieces([UNK_PIECE])[0]

    def rank(phrase: str) -> tuple:
        ids = tgt_tok.encode(phrase)
        return (unk in ids, len(ids), max(ids, default=0))

    return rank


def load_dictionary(path: str, rank: Callable[[str], tuple] | None = None) -> dict[str, str]:
    """A bilingual word list, one ``source<TAB>target`` pair per line. A source word with several
    entries maps to the best under ``rank`` (e.g. ``target_rank(tgt_tok)``), else the first."""
    from attnmt.data.corpus import read_lines

    candidates: dict[str, list[str]] = {}
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 2 or not cols[0].strip() or not cols[1].strip():
            raise UserError("expected 'source<TAB>target'", path, number)
        candidates.setdefault(cols[0].strip(), []).append(cols[1].strip())
    if not candidates:  # replacing with an empty dictionary would silently copy every word
        raise UserError("no 'source<TAB>target' entries in the dictionary", path)
    if rank is None:
        return {word: options[0] for word, options in candidates.items()}
    # min() keeps the first of equally ranked entries
    return {word: min(options, key=rank) if len(options) > 1 else options[0] for word, options in candidates.items()}


def translate_word(word: str, dictionary: dict[str, str] | None) -> tuple[str, bool]:
    """(replacement, found in dictionary) for a source word."""
    core = word.strip(_PUNCT) or word
    if dictionary:
        if core in dictionary:
            return dictionary[core], True
        lower = core.lower()
        if lower in dictionary:
            found = dictionary[lower]
            return (found[:1].upper() + found[1:] if core[:1].isupper() else found), True
    return core, False


def replace_pieces(
    tgt_pieces: list[str], src_words: list[str], attention: torch.Tensor, dictionary: dict[str, str] | None = None
) -> tuple[list[str], int, int]:
    """Replace each ``<unk>`` piece j by the (translated) source word argmax_s attention[j, s].

    attention: (len(tgt_pieces), len(src_words)) word-level attention of each output piece.
    Returns (new pieces, replaced, found in dictionary)."""
    out, replaced, found = list(tgt_pieces), 0, 0
    if not src_words:
        return out, 0, 0
    for j, piece in enumerate(tgt_pieces):
        if piece != UNK_PIECE:
            continue
        s = int(attention[j, : len(src_words)].argmax())
        out[j], hit = translate_word(src_words[s], dictionary)
        replaced += 1
        found += int(hit)
    return out, replaced, found


def detokenize(tok: Tokenizer, pieces: list[str]) -> str:
    if tok.kind == "word":
        return tok.decode_pieces(pieces)
    # sentencepiece cannot decode pieces outside its vocabulary; "▁" marks a word start
    return "".join(pieces).replace("\u2581", " ").strip()


@dataclass
class UnkStats:
    unks: int = 0
    from_dictionary: int = 0
    sentences: int = 0

    def summary(self) -> str:
        copied = self.unks - self.from_dictionary
        return (f"replaced {self.unks} <unk> in {self.sentences} outputs "
                f"({copied} copied, {self.from_dictionary} from the dictionary)")


def _unk_attention(members: list[Run], line: str, ids: list[int], timing: str,
                   rows_of: dict[int, list[torch.Tensor]], k: int) -> torch.Tensor:
    """(len(ids), source words) attention of each output piece, averaged over the members."""
    n_words = len(line.split())
    total = torch.zeros(len(ids), n_words)
    for m, member in enumerate(members):
        words = member.source(line).words
        rows = output_rows(rows_of[m][k], len(ids), resolve_timing(member.cfg, timing))
        src_map = torch.zeros(rows.size(1), n_words)
        for piece, w in enumerate(words[: rows.size(1)]):
            if w < n_words:
                src_map[piece, w] = 1.0
        total += rows @ src_map
    return total / len(members)


def replace_unks(
    members: list[Run],
    lines: list[str],
    results: list[list[Translation]],
    dictionary: dict[str, str] | None = None,
    timing: str = "predicted",
    batch_size: int = 32,
) -> tuple[list[list[Translation]], UnkStats]:
    """Replace the ``<unk>`` of every hypothesis in ``results`` (as returned by a Translator for
    ``lines``); returns new results and counts."""
    tgt_tok = members[0].tgt_tok
    todo = [(i, h) for i, hyps in enumerate(results) for h, t in enumerate(hyps)
            if UNK_PIECE in t.tgt_pieces and lines[i].split()]
    stats = UnkStats()
    if not todo:
        return results, stats
    src = [lines[i] for i, _ in todo]
    ids = [tgt_tok.encode_pieces(results[i][h].tgt_pieces) for i, h in todo]
    rows_of = {m: force_attention(member, src, ids, batch_size) for m, member in enumerate(members)}
    new = [list(hyps) for hyps in results]
    for k, (i, h) in enumerate(todo):
        old = results[i][h]
        attn = _unk_attention(members, lines[i], ids[k], timing, rows_of, k)
        pieces, n, hits = replace_pieces(old.tgt_pieces, lines[i].split(), attn, dictionary)
        new[i][h] = dataclasses.replace(old, text=detokenize(tgt_tok, pieces), tgt_pieces=pieces)
        stats.unks += n
        stats.from_dictionary += hits
        stats.sentences += 1
    return new, stats


def replace_unks_cli(translator: Translator, lines: list[str], results: list[list[Translation]],
                     dict_path: str | None = None, timing: str = "predicted") -> list[list[Translation]]:
    """``translate --replace-unk``: replace, then report the counts on stderr."""
    import sys

    members = translator.runs
    dictionary = load_dictionary(dict_path, target_rank(members[0].tgt_tok)) if dict_path else None
    results, stats = replace_unks(members, lines, results, dictionary, timing)
    print(f"attnmt: {stats.summary()}", file=sys.stderr)
    return results
