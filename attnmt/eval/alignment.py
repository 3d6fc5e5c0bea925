"""Attention as word alignment: force-decoded alignments, AER, precision/recall, entropy.

Alignment extraction (Luong et al. 2015, section 5.4): force decode the reference, take for each
target word the source word with the highest attention (pieces summed per source word), giving a
one-to-one (per target word) alignment in Pharaoh format ``i-j`` (0-based source word i, target
word j). Which attention row belongs to which target word follows attnmt.decode.force (timing).

Alignment error rate (Och & Ney 2003) against gold sure links S and possible links P (S ⊆ P):

    precision = |A ∩ P| / |A|        recall = |A ∩ S| / |S|
    AER       = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

counted over the whole corpus (sums of the per-sentence counts). Gold lines use ``i-j`` for sure
and ``i?j`` for possible links; a sure link is also possible.

``sentence_attention`` gives one sentence's attention rows (the heat map of ``attnmt analyse
heatmap``, the paper's Figure 7).

Entropy: H(a_t) = −Σ_s a_t(s) log a_t(s) in nats, per target piece, over source pieces (rows are
renormalised first: local attention's "paper" composition sums to less than 1); lower is sharper.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from attnmt.decode.force import force_attention, output_rows, resolve_timing, word_attention
from attnmt.decode.translate import Translator
from attnmt.errors import UserError
from attnmt.runs.loader import Run

_LINK = re.compile(r"^(\d+)([-?])(\d+)$")

Links = set[tuple[int, int]]


def parse_links(line: str, path: str | None = None, lineno: int | None = None) -> tuple[Links, Links]:
    """(sure, possible) links of one Pharaoh line; possible includes sure."""
    sure: Links = set()
    possible: Links = set()
    for item in line.split():
        m = _LINK.match(item)
        if not m:
            raise UserError(f"malformed alignment link {item!r} (expected i-j or i?j)", path, lineno)
        link = (int(m.group(1)), int(m.group(3)))
        possible.add(link)
        if m.group(2) == "-":
            sure.add(link)
    return sure, possible


def read_alignments(path: str) -> list[tuple[Links, Links]]:
    from attnmt.data.corpus import read_lines

    return [parse_links(line, path, n) for n, line in enumerate(read_lines(path), start=1)]


def check_links_fit(gold: list[tuple[Links, Links]], src: list[str], tgt: list[str], path: str) -> None:
    """Every gold link ``i-j`` names a word of its sentence pair (0-based whitespace words of the
    source and target lines), else a one-line error at ``path``:LINE: a gold file of another
    corpus, or one shifted by a line, would otherwise score as a plausible AER."""
    for n, ((sure, possible), s, t) in enumerate(zip(gold, src, tgt), start=1):
        S, T = len(s.split()), len(t.split())
        bad = next((link for link in sorted(sure | possible) if link[0] >= S or link[1] >= T), None)
        if bad is not None:
            raise UserError(f"link {bad[0]}-{bad[1]} is outside its sentence pair ({S} source, "
                            f"{T} target words)", path, n)


@dataclass
class AERResult:
    aer: float
    precision: float
    recall: float
    links: int  # |A|
    sure: int  # |S|
    possible: int  # |P|
    sentences: int

    def as_dict(self) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in self.__dict__.items()}


def aer(hyp: list[Links], gold: list[tuple[Links, Links]], names: tuple[str, str] = ("hypothesis", "gold")
        ) -> AERResult:
    """Corpus AER of hypothesis links against gold (sure, possible) links, sentence by sentence.
    ``names`` (the two files) only serve the error messages."""
    if len(hyp) != len(gold):
        raise UserError(f"alignment files differ in length: {names[0]} has {len(hyp)} lines, "
                        f"{names[1]} has {len(gold)}")
    if not any(s or p for s, p in gold):  # AER 0 of nothing is no result
        raise UserError("no gold links to score against (empty alignments)", names[1])
    a_total = s_total = p_total = a_s = a_p = 0
    for a, (s, p) in zip(hyp, gold):
        p = p | s
        a_total, s_total, p_total = a_total + len(a), s_total + len(s), p_total + len(p)
        a_s += len(a & s)
        a_p += len(a & p)
    denom = a_total + s_total
    return AERResult(
        aer=1.0 - (a_s + a_p) / denom if denom else 0.0,
        precision=a_p / a_total if a_total else 0.0,
        recall=a_s / s_total if s_total else 0.0,
        links=a_total, sure=s_total, possible=p_total, sentences=len(hyp),
    )


def entropy(rows: torch.Tensor) -> torch.Tensor:
    """(T, S) attention rows -> (T,) entropies in nats (rows renormalised)."""
    p = rows.clamp_min(0)
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)
    return -(p * p.clamp_min(1e-12).log()).sum(-1)


@dataclass
class ForcedAlignment:
    links: list[Links]  # per sentence: {(src word, tgt word)}
    word_attention: list[torch.Tensor]  # per sentence: (target words, source words)
    mean_entropy: float  # nats per target piece, averaged over models and pieces
    max_weight: float  # mean of the largest attention weight per target piece


def force_align(
    members: list[Run],
    src_lines: list[str],
    tgt_lines: list[str],
    timing: str = "predicted",
    batch_size: int = 32,
) -> ForcedAlignment:
    """Align each reference ``tgt_lines[k]`` to ``src_lines[k]`` by force decoding. With several
    members (an ensemble) their word-level attention matrices are averaged before the argmax."""
    if len(src_lines) != len(tgt_lines):
        raise UserError(f"line counts differ: {len(src_lines)} source lines, {len(tgt_lines)} target lines")
    if not any(s.strip() and t.strip() for s, t in zip(src_lines, tgt_lines)):
        raise UserError("no sentence pair to align (every pair has an empty side)")
    tgt_tok = members[0].tgt_tok
    tgt_split = [tgt_tok.split_with_words(t) for t in tgt_lines]
    tgt_ids = [tgt_tok.encode_pieces(pieces) for pieces, _ in tgt_split]
    sums = [None] * len(src_lines)
    ent_total, max_total, pieces_total = 0.0, 0.0, 0
    for member in members:
        concrete = resolve_timing(member.cfg, timing)
        rows = force_attention(member, src_lines, tgt_ids, batch_size)
        for k, line in enumerate(src_lines):
            src_words = member.source(line).words
            n_tgt = len(tgt_ids[k])
            if not src_words or not n_tgt:
                continue
            out = output_rows(rows[k], n_tgt, concrete)  # (T pieces, S pieces)
            ent_total += float(entropy(out).sum())
            max_total += float((out / out.sum(-1, keepdim=True).clamp_min(1e-12)).max(-1).values.sum())
            pieces_total += n_tgt
            w = word_attention(out, src_words, tgt_split[k][1])
            # words cut off (location's max_src_len) get no attention
            w = torch.nn.functional.pad(w, (0, max(0, len(line.split()) - w.size(1))))
            sums[k] = w if sums[k] is None else sums[k] + w
    links, matrices = [], []
    for k in range(len(src_lines)):
        if sums[k] is None:
            links.append(set())
            matrices.append(torch.zeros(0, 0))
            continue
        w = sums[k] / len(members)
        best = w.argmax(dim=1).tolist()
        links.append({(best[j], j) for j in sorted(set(tgt_split[k][1]))})
        matrices.append(w)
    n = max(pieces_total, 1)
    return ForcedAlignment(links, matrices, ent_total / n if pieces_total else math.nan, max_total / n)


def pharaoh(links: Links) -> str:
    return " ".join(f"{i}-{j}" for i, j in sorted(links, key=lambda x: (x[1], x[0])))


@dataclass
class SentenceAttention:
    rows: torch.Tensor  # (target pieces, source pieces): each output piece's attention row
    src_pieces: list[str]
    tgt_pieces: list[str]
    translation: str | None  # the model's translation when no target was given
    timing: str  # the concrete timing the rows follow ("predicted" or "input")


def sentence_attention(member: Run, sentence: str, target: str | None = None, beam: int = 5,
                       timing: str = "predicted") -> SentenceAttention:
    """The attention of one sentence (``attnmt analyse heatmap``, Luong et al. Figure 7): the
    model's beam-search translation, or ``target``, force decoded; one row per output piece."""
    translation = None
    if target is not None:
        if not target.strip():
            raise UserError("--target is empty: give the translation to force decode, or leave it out")
        ids = member.tgt_tok.encode(target)
    else:
        # precision=None: the member stays in float32 for the forced pass below (a Transformer's
        # bfloat16 search products would stay on for it)
        best = Translator.of(member).translate([sentence], beam=beam, at_cap="keep", precision=None)[0][0]
        ids, translation = member.tgt_tok.encode_pieces(best.tgt_pieces), best.text
        if not ids:  # no row to plot
            raise UserError("the model translates --input to nothing: no attention to show; give "
                            "a --target to force decode", member.name or None)
    concrete = resolve_timing(member.cfg, timing)
    rows = output_rows(force_attention(member, [sentence], [ids])[0], len(ids), concrete)
    return SentenceAttention(rows, member.source(sentence).pieces, [member.tgt_tok.piece(i) for i in ids],
                             translation, concrete)
