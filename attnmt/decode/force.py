"""Force decoding: the attention a model pays while it is fed a given target (teacher forcing).

Luong et al. (2015, section 5.4) extract alignments by "force decoding" the reference: the decoder
reads ``tgt_in = [<s>, y_1 .. y_T]`` and, for each step, we keep the attention vector a_t:

    logits, weights = model(src, src_lengths, tgt_in, need_weights=True)   # weights (B, T+1, S)

Row r of ``weights`` is computed from h_r at the step whose *input* is y_r (y_0 = <s>) and which
*predicts* y_{r+1} (y_{T+1} = </s>); see attnmt/models/decoders.py. Which row "belongs" to output
word y_j is a convention:

    timing "predicted"  y_j ↔ the row that predicts it, r = j − 1   (the default)
    timing "input"      y_j ↔ the row that reads it,   r = j
    timing "paper"      the paper's footnote (section 3.1): "predicted" for the location score,
                        "input" for content-based scores (dot, general, concat, local attention)

The default is "predicted" for every score because that is what this decoder learns: on the
synthetic gold-alignment benchmark (docs/results/analysis.md) the row that predicts y_j is its
alignment for location, global-general, local-m and local-p models alike (AER 0.05-0.49), while
the row that reads y_j is off by one word almost everywhere (AER 0.70-0.83). h_t attends to find
the source of the word it is about to predict; the paper's "input" rule is available for models
that behave otherwise (Transformer cross-attention is reported to, e.g. Chen et al. 2020).

Force decoding gives the T+1 rows, so both conventions have a row for every output word, the last
one included (its "input" row is the step that predicts </s>).
"""

from __future__ import annotations

import torch

from attnmt.config import Config
from attnmt.data.batching import collate
from attnmt.errors import UserError
from attnmt.runs.loader import Run

TIMINGS = ("predicted", "input", "paper")


def resolve_timing(cfg: Config, timing: str = "predicted") -> str:
    """The concrete timing ("input" or "predicted") of a model under ``timing``."""
    if timing not in TIMINGS:
        raise UserError(f"timing must be one of {', '.join(TIMINGS)}, not {timing!r}")
    if timing == "paper":
        return "predicted" if cfg.model.location else "input"
    return timing


@torch.no_grad()
def force_attention(
    member: Run,
    src_lines: list[str],
    tgt_ids: list[list[int]],
    batch_size: int = 32,
) -> list[torch.Tensor]:
    """For each pair, the (T+1, S) attention rows of force decoding ``tgt_ids`` (T target pieces,
    no <s>/</s>), source pieces in input order (reversal undone). Empty sources get one <unk>."""
    model, cfg = member.model, member.cfg
    if not getattr(model, "has_attention", True):
        raise UserError("this model has no attention to align with", member.name or None)
    device = member.device
    src_ids = member.source_ids([member.source(line) for line in src_lines])
    out: list[torch.Tensor] = [torch.empty(0)] * len(src_lines)
    order = sorted(range(len(src_lines)), key=lambda i: len(src_ids[i]), reverse=True)
    was_training = model.training
    model.eval()
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = collate([src_ids[i] for i in chunk], [tgt_ids[i] for i in chunk], chunk).to(device)
        _, weights = model(batch.src, batch.src_lengths, batch.tgt_in, need_weights=True)
        if weights is None:
            raise UserError("this model returns no attention weights", member.name or None)
        weights = weights.float().cpu()  # (B, T+1, S)
        for b, i in enumerate(chunk):
            rows = weights[b, : len(tgt_ids[i]) + 1, : len(src_ids[i])]
            out[i] = rows.flip(-1) if cfg.data.reverse_source else rows
    model.train(was_training)
    return out


def output_rows(rows: torch.Tensor, n_out: int, timing: str) -> torch.Tensor:
    """(n_out, S): the attention row of each of the n_out output pieces under a concrete timing."""
    if timing == "input":
        return rows[1 : n_out + 1]
    if timing == "predicted":
        return rows[:n_out]
    raise ValueError(f"concrete timing expected, got {timing!r}")


def word_attention(attention: torch.Tensor, src_words: list[int], tgt_words: list[int]) -> torch.Tensor:
    """Piece attention (T pieces, S pieces) -> word attention (target words, source words): summed
    over the pieces of a source word, averaged over the pieces of a target word."""
    n_src = max(src_words) + 1 if src_words else 0
    n_tgt = max(tgt_words) + 1 if tgt_words else 0
    src_map = torch.zeros(len(src_words), n_src)
    src_map[torch.arange(len(src_words)), torch.tensor(src_words, dtype=torch.long)] = 1.0
    tgt_map = torch.zeros(n_tgt, len(tgt_words))
    tgt_map[torch.tensor(tgt_words, dtype=torch.long), torch.arange(len(tgt_words))] = 1.0
    tgt_map = tgt_map / tgt_map.sum(1, keepdim=True).clamp_min(1.0)
    return tgt_map @ attention[: len(tgt_words), : len(src_words)] @ src_map
