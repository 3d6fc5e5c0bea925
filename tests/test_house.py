"""House rules read from the source: derived weights are kept in one place (kernels/cache.py),
and keeping them changes no checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

import torch

import attnmt
from attnmt.config import ModelConfig
from attnmt.decode.search import beam_search
from attnmt.kernels import cache
from attnmt.models.seq2seq import Seq2Seq

ROOT = Path(attnmt.__file__).parent


def test_no_derived_weight_cache_outside_kernels_cache():
    """A cache keyed on a tensor's version or data pointer is written once, in kernels/cache.py
    (with its invalidation on train(): fused Adam bumps no version)."""
    found = [f"{p.relative_to(ROOT)}:{i}" for p in ROOT.rglob("*.py") if p != ROOT / "kernels" / "cache.py"
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\._version\b|\.data_ptr\(\)", line)]
    assert not found


def test_derived_weights_leave_the_state_dict_alone_and_go_on_train():
    torch.manual_seed(0)
    cfg = ModelConfig(layers=1, hidden=8, embed=8, attention="local-p", window=2)
    model = Seq2Seq(cfg, 20, 20).eval()
    keys = list(model.state_dict())
    src, lengths = torch.randint(4, 20, (2, 5)), torch.tensor([5, 4])
    beam_search(model, src, lengths, beam_size=2)
    assert cache.held(model.decoder, "inference_weights")
    assert cache.held(model.decoder.attention, "decoding_constants")
    assert list(model.state_dict()) == keys  # checkpoints keep their names
    model.train()
    assert not cache.held(model.decoder, "inference_weights")
    assert not cache.held(model.decoder.attention, "decoding_constants")


def _class_lengths(folder: str) -> dict[str, int]:
    import ast

    out = {}
    for path in (ROOT / folder).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                out[f"{folder}/{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return out


def test_definitions_are_classes_of_at_most_200_lines():
    """models/ and attention/ state the papers' math, a class one can read top to bottom; fast
    paths go to kernels/."""
    long = {name: n for folder in ("models", "attention", "train") for name, n in _class_lengths(folder).items()
            if n > 200}
    assert not long
