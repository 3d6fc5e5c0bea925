"""benchmarks/window_attention.py: its trainer-like step trains (the loss falls) and its report
gives every variant a time and memory ratio to standard attention."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def test_the_trainer_like_step_lowers_the_models_own_loss():
    import argparse

    import window_attention

    args = argparse.Namespace(layers=1, hidden=16, heads=2, ff=32, vocab=20, placement="reference")
    model = window_attention.make_model(args, "window-add-seg", torch.device("cpu"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    g = torch.Generator().manual_seed(0)
    tgt = torch.randint(4, 20, (4, 6), generator=g)
    batch = (torch.randint(4, 20, (4, 6), generator=g), torch.full((4,), 6), tgt, tgt)

    def loss() -> float:
        with torch.no_grad():
            return float(type(model).token_loss(model, batch[0], batch[1], batch[2], batch[3], 0.1))

    before = loss()
    for _ in range(10):
        window_attention.step(model, opt, batch, as_trainer=True)
    assert loss() < 0.8 * before


def test_report_has_a_ratio_per_variant(capsys, monkeypatch):
    import window_attention

    monkeypatch.setattr(sys, "argv", ["window_attention.py", "--layers", "1", "--hidden", "16", "--heads", "2",
                                      "--ff", "32", "--vocab", "20", "--batch", "2", "--len", "5", "--repeats", "1",
                                      "--variants", "standard,window-mul", "--as-trainer"])
    window_attention.main()
    lines = capsys.readouterr().out.splitlines()
    result = json.loads(lines[0])
    assert result["as_trainer"] is True
    assert result["variants"]["standard"]["time_ratio"] == 1.0
    assert result["variants"]["window-mul"]["time_ratio"] > 0 and result["variants"]["window-mul"]["memory_ratio"] > 0
    assert lines[1].startswith("summary: standard 1.00x")


def test_a_plus_paper_variant_is_the_authors_preset():
    import argparse

    import window_attention
    from attnmt.attention.window import InputPointers

    args = argparse.Namespace(layers=1, hidden=16, heads=2, ff=32, vocab=20, placement="reference")
    model = window_attention.make_model(args, "window-add-seg+paper", torch.device("cpu"))
    attn = model.encoder.layers[0].self_attn
    assert attn.variant == "window-add-seg" and isinstance(attn.pointers, InputPointers)
    assert attn.unit.options.mask == "sum" and attn.unit.options.segment == 5
    plain = window_attention.make_model(args, "window-add-seg", torch.device("cpu")).encoder.layers[0].self_attn
    assert not isinstance(plain.pointers, InputPointers) and plain.unit.options.segment == 3
