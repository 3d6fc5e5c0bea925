"""Tokenizers: word-level with a top-K vocabulary (the paper's setting) and sentencepiece.

Both share one small interface and the same special ids, so every other part of the toolkit
(batching, n-gram models over token ids, decoding, alignments) works with either:

    tok.encode(line) -> list[int]            # no <s>/</s> added
    tok.decode(ids) -> str                   # detokenised text
    tok.split_with_words(line) -> (pieces, word_index)   # piece i came from whitespace word word_index[i]
    tok.piece(i) -> str, len(tok), tok.save(dir, side), load_tokenizer(dir, side, lowercase)

Special ids are fixed: <pad>=0, <unk>=1, <s>=2, </s>=3. A tokenizer made with ``lowercase=True``
(the run's ``data.lowercase``) lower-cases every text it reads, in building too, so no caller
checks the flag; it does not touch pieces given to ``encode_pieces``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from attnmt.errors import UserError
from attnmt.files import VOCAB_BYTES, check_regular, open_regular

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]


def _cased(line: str, lowercase: bool) -> str:
    return line.lower() if lowercase else line


def _moses(lang: str):
    from sacremoses import MosesDetokenizer, MosesTokenizer

    return MosesTokenizer(lang=lang), MosesDetokenizer(lang=lang)


class WordTokenizer:
    """Moses word tokenisation with a frequency-ranked vocabulary of at most ``max_size`` words.

    Each whitespace word is tokenised on its own, so every piece knows which input word it came
    from (needed for Pharaoh alignments and <unk> replacement).
    """

    kind = "word"

    def __init__(self, tokens: list[str], lang: str = "en", lowercase: bool = False):
        if tokens[: len(SPECIALS)] != SPECIALS:
            tokens = SPECIALS + [t for t in tokens if t not in SPECIALS]
        self.tokens = tokens
        self.index = {t: i for i, t in enumerate(tokens)}
        self.lang = lang
        self.lowercase = lowercase
        self._tok, self._detok = _moses(lang)

    @classmethod
    def build(
        cls, lines: Iterable[str], max_size: int = 50000, min_freq: int = 1, lang: str = "en",
        lowercase: bool = False,
    ) -> "WordTokenizer":
        probe = cls(SPECIALS, lang, lowercase)
        counts: Counter[str] = Counter()
        for line in lines:
            counts.update(probe.split(line))
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        words = [w for w, c in ranked if c >= min_freq and w not in SPECIALS]
        return cls(SPECIALS + words[: max(0, max_size - len(SPECIALS))], lang, lowercase)

    def split(self, line: str) -> list[str]:
        return self.split_with_words(line)[0]

    def split_with_words(self, line: str) -> tuple[list[str], list[int]]:
        pieces: list[str] = []
        word_index: list[int] = []
        for w, word in enumerate(_cased(line, self.lowercase).split()):
            for piece in self._tok.tokenize(word, escape=False):
                pieces.append(piece)
                word_index.append(w)
        return pieces, word_index

    def encode(self, line: str) -> list[int]:
        return [self.index.get(p, UNK) for p in self.split(line)]

    def encode_many(self, lines: list[str]) -> list[list[int]]:
        return [self.encode(line) for line in lines]

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        return [self.index.get(p, UNK) for p in pieces]

    def piece(self, i: int) -> str:
        return self.tokens[i]

    def decode_pieces(self, pieces: list[str]) -> str:
        return self._detok.detokenize(pieces)

    def decode(self, ids: Iterable[int]) -> str:
        return self.decode_pieces([self.tokens[i] for i in ids if i not in (PAD, BOS, EOS)])

    def __len__(self) -> int:
        return len(self.tokens)

    def save(self, run_dir: str | os.PathLike, side: str) -> None:
        path = Path(run_dir) / f"{side}.vocab"
        tmp = path.with_suffix(".vocab.tmp")
        tmp.write_text(f"#word {self.lang}\n" + "\n".join(self.tokens) + "\n", encoding="utf-8")
        os.replace(tmp, path)


class SentencePieceTokenizer:
    """A sentencepiece BPE or unigram model trained with our special ids."""

    kind = "spm"

    def __init__(self, model_file: str | os.PathLike, lowercase: bool = False):
        import sentencepiece as spm

        self.lowercase = lowercase
        self.model_file = str(model_file)
        self.sp = spm.SentencePieceProcessor(model_file=self.model_file)

    @classmethod
    def build(
        cls,
        lines: Iterable[str],
        model_prefix: str | os.PathLike,
        vocab_size: int = 8000,
        model_type: str = "bpe",
        lowercase: bool = False,
    ) -> "SentencePieceTokenizer":
        import sentencepiece as spm

        spm.SentencePieceTrainer.train(
            sentence_iterator=iter([_cased(line, lowercase) for line in lines]),
            model_prefix=str(model_prefix),
            vocab_size=vocab_size,
            model_type=model_type,
            pad_id=PAD,
            unk_id=UNK,
            bos_id=BOS,
            eos_id=EOS,
            character_coverage=1.0,
            hard_vocab_limit=False,
            minloglevel=2,
            num_threads=2,
        )
        return cls(f"{model_prefix}.model", lowercase)

    @classmethod
    def load_checked(cls, model_file: str | os.PathLike, lowercase: bool = False) -> "SentencePieceTokenizer":
        """A sentencepiece model trained elsewhere, if it uses attnmt's special ids."""
        check_regular(model_file, "sentencepiece model")
        try:
            tok = cls(model_file, lowercase)
        except Exception as err:  # sentencepiece raises RuntimeError/OSError on junk files
            raise UserError(f"not a sentencepiece model ({str(err).splitlines()[0][:80]})", str(model_file)) from None
        ids = (tok.sp.pad_id(), tok.sp.unk_id(), tok.sp.bos_id(), tok.sp.eos_id())
        if ids != (PAD, UNK, BOS, EOS):
            raise UserError(
                f"sentencepiece model has pad/unk/bos/eos ids {ids}; attnmt needs ({PAD}, {UNK}, {BOS}, {EOS}) "
                "(train it with pad_id=0 unk_id=1 bos_id=2 eos_id=3)", str(model_file))
        return tok

    def split(self, line: str) -> list[str]:
        return self.sp.encode(_cased(line, self.lowercase), out_type=str)

    def split_with_words(self, line: str) -> tuple[list[str], list[int]]:
        pieces = self.split(line)
        word_index, w = [], -1
        for p in pieces:
            if p.startswith("\u2581") or w < 0:
                w += 1
            word_index.append(w)
        return pieces, word_index

    def encode(self, line: str) -> list[int]:
        return self.sp.encode(_cased(line, self.lowercase))

    def encode_many(self, lines: list[str]) -> list[list[int]]:
        """``encode`` of every line in one call (one thread: preparation's parallelism is its
        worker processes)."""
        return self.sp.encode([_cased(x, self.lowercase) for x in lines], num_threads=1)

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        return [self.sp.piece_to_id(p) for p in pieces]

    def encode_sampled(self, lines: list[str], alpha: float, seed: int) -> list[list[int]]:
        """One sampled segmentation per line (subword regularisation, data.spm_alpha): unigram
        sampling over all segmentations (nbest_size -1, smoothing alpha) or, for BPE, BPE-dropout
        with probability alpha. One thread: sentencepiece seeds each thread's generator, so only a
        single-threaded pass is reproducible from ``seed``."""
        import sentencepiece as spm

        spm.set_random_generator_seed(seed)
        return self.sp.encode([_cased(x, self.lowercase) for x in lines], enable_sampling=True,
                              alpha=alpha, nbest_size=-1, num_threads=1)

    def piece(self, i: int) -> str:
        return self.sp.id_to_piece(i)

    def decode_pieces(self, pieces: list[str]) -> str:
        return self.sp.decode_pieces(pieces)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([i for i in ids if i not in (PAD, BOS, EOS)])

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def save(self, run_dir: str | os.PathLike, side: str) -> None:
        dest = Path(run_dir) / f"{side}.spm.model"
        if Path(self.model_file).resolve() != dest.resolve():
            tmp = dest.with_suffix(".tmp")
            tmp.write_bytes(Path(self.model_file).read_bytes())
            os.replace(tmp, dest)


Tokenizer = WordTokenizer | SentencePieceTokenizer


def load_tokenizer(run_dir: str | os.PathLike, side: str, lowercase: bool = False) -> Tokenizer:
    """Load the ``side`` ("src" or "tgt") tokenizer saved in a run directory; ``lowercase``: the
    run's ``data.lowercase`` (it is kept in the config, not in the tokenizer's file)."""
    run_dir = Path(run_dir)
    spm_file = run_dir / f"{side}.spm.model"
    vocab_file = run_dir / f"{side}.vocab"
    if not run_dir.is_dir():
        why = "is a file, expected a run directory" if run_dir.exists() else "no such run directory"
        raise UserError(why, str(run_dir))
    if spm_file.exists():
        check_regular(spm_file, "sentencepiece model")  # sentencepiece would wait on a FIFO
        try:
            return SentencePieceTokenizer(spm_file, lowercase)
        except (RuntimeError, OSError) as err:  # sentencepiece's message for a junk file
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UserError(f"not a sentencepiece model ({reason})", str(spm_file)) from None
    if vocab_file.exists() or vocab_file.is_symlink():
        tokens, lang = read_vocab(vocab_file)
        return WordTokenizer(tokens, lang, lowercase)
    raise UserError(f"no {side} tokenizer ({side}.vocab or {side}.spm.model)", str(run_dir))


def read_vocab(path: Path) -> tuple[list[str], str]:
    """The words of a vocabulary file (``#word LANG``, then one word per line, the special symbols
    first) and its language. An id is a line number, so anything that would shift or merge ids
    is a one-line error naming file and line: a missing or misplaced special symbol, a word
    given twice, an empty line inside the list. At most ``VOCAB_BYTES`` are read."""
    from attnmt.data.corpus import iter_stream

    name = str(path)
    with open_regular(path, "vocabulary file") as f:
        if os.fstat(f.fileno()).st_size > VOCAB_BYTES:
            raise UserError(f"is over the {VOCAB_BYTES}-byte limit for a vocabulary file", name)
        lines = list(iter_stream(f, name))
    header = lines[0][1].split() if lines else []
    if not header or header[0] != "#word":
        raise UserError("not a vocabulary file (missing '#word' header)", name, 1)
    tokens: list[str] = []
    seen: dict[str, int] = {}
    blank: int | None = None
    for number, word in lines[1:]:
        if not word:
            blank = blank or number
            continue
        if blank is not None:
            raise UserError("empty entry inside the word list (ids would shift)", name, blank)
        slot = len(tokens)
        if slot < len(SPECIALS) and word != SPECIALS[slot]:
            raise UserError(f"entry {slot} must be the special symbol {SPECIALS[slot]}, not {word!r}",
                            name, number)
        if slot >= len(SPECIALS) and word in SPECIALS:
            raise UserError(f"the special symbol {word} in an ordinary slot (id {slot})", name, number)
        if word in seen:
            raise UserError(f"duplicate entry {word!r} (also line {seen[word]})", name, number)
        seen[word] = number
        tokens.append(word)
    if len(tokens) < len(SPECIALS):
        raise UserError(f"lists {len(tokens)} entries, fewer than the {len(SPECIALS)} special symbols", name)
    return tokens, header[1] if len(header) > 1 else "en"


def map_pieces_to_words(pieces: list[str], line: str) -> list[int]:
    """For detokenised output ``line`` made from ``pieces``, the whitespace-word index of each piece.

    Works for any detokeniser that only changes spacing: the pieces' characters are matched, in
    order, against the line's non-space characters.
    """
    words = line.split()
    # char position (in the space-free stream) -> word index
    owner: list[int] = []
    for w, word in enumerate(words):
        owner.extend([w] * len(word))
    result, pos = [], 0
    for p in pieces:
        text = p.replace("\u2581", "")
        w = owner[min(pos, len(owner) - 1)] if owner else 0
        result.append(w)
        pos += len(text)
    return result
