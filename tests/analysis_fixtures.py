"""Tiny untrained run directories for the analysis tests (unk replacement, ensembles, alignment)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from attnmt.config import Config, apply_overrides, save_config
from attnmt.data.vocab import WordTokenizer
from attnmt.models import build_model
from attnmt.runs.checkpoint import save_checkpoint
from attnmt.runs.loader import Run

SRC = ["the old dog saw a cat", "a cat saw the dog", "the dog runs", "Anna saw the old cat"]
TGT = ["el perro viejo vio un gato", "un gato vio el perro", "el perro corre", "Anna vio el gato viejo"]


def make_run(
    root: Path,
    name: str = "run",
    overrides: list[str] | None = None,
    src_lines: list[str] | None = None,
    tgt_lines: list[str] | None = None,
    seed: int = 0,
    steps: tuple[int, ...] = (1,),
) -> Path:
    """A run directory (config, word vocabularies, checkpoints at ``steps``) of a small random model."""
    run = root / name
    run.mkdir(parents=True, exist_ok=True)
    transformer = "model.type=transformer" in (overrides or [])  # it has no model.embed
    cfg = apply_overrides(Config(), [
        "model.layers=1", "model.hidden=16", *([] if transformer else ["model.embed=16"]),
        "model.dropout=0.0", "data.src=en", "data.tgt=es", *(overrides or []),
    ])
    src_tok = WordTokenizer.build(src_lines or SRC, lang="en")
    tgt_tok = WordTokenizer.build(tgt_lines or TGT, lang="es")
    src_tok.save(run, "src")
    tgt_tok.save(run, "tgt")
    save_config(cfg, run / "config.yaml")
    torch.manual_seed(seed)
    model = build_model(cfg, len(src_tok), len(tgt_tok))
    for k, step in enumerate(steps):
        if k:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.01 * torch.randn_like(p))
        save_checkpoint(run, step, model, None, best=True)
    return run


class OneHotAttention(nn.Module):
    """A stub seq2seq: at target step r it attends (in the order it reads the source) to
    position (r + shift) mod (source length), so the rows of force decoding are known exactly."""

    has_attention = True

    def __init__(self, vocab: int, shift: int = 0):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(1))
        self.vocab, self.shift = vocab, shift

    def forward(self, src, src_lengths, tgt_in, need_weights=False):
        B, T = tgt_in.shape
        S = src.size(1)
        w = torch.zeros(B, T, S)
        for b in range(B):
            n = int(src_lengths[b])
            for r in range(T):
                w[b, r, (r + self.shift) % n] = 1.0
        return torch.zeros(B, T, self.vocab), w


def stub_member(reverse: bool, score: str, src_lines: list[str]) -> Run:
    cfg = apply_overrides(Config(), [f"data.reverse_source={reverse}", "model.attention=global",
                                     f"model.score={score}"])
    src_tok = WordTokenizer.build(src_lines, lang="en")
    tgt_tok = WordTokenizer.build(["x y z"], lang="es")
    return Run(OneHotAttention(len(tgt_tok)), cfg, src_tok, tgt_tok)
