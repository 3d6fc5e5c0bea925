"""benchmarks/search_ceilings.py: its product kernels compute x Wᵀ + b, its int8 measurement
reports every kernel for every shape, and its plain search step reorders and extends its cache."""

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

pytestmark = pytest.mark.skipif(
    not hasattr(torch.ops.onednn, "qlinear_pointwise") or not torch.backends.mkldnn.is_available(),
    reason="oneDNN's int8 product is not in this torch build")


def test_each_product_kernel_computes_the_product():
    import search_ceilings

    torch.manual_seed(0)
    x, w, b = torch.randn(search_ceilings.ROWS, 32), torch.randn(48, 32) / 6, torch.randn(48)
    want = x @ w.t() + b
    with torch.no_grad():
        for name, fn in search_ceilings.product_kernels(x, w, b).items():
            got = fn()
            assert got.shape == want.shape and got.dtype == torch.float32, name
            assert (got - want).abs().mean() / want.abs().mean() < 0.03, name


def test_int8_measure_times_three_kernels_per_shape(capsys, monkeypatch):
    import search_ceilings

    monkeypatch.setattr(search_ceilings, "VOCAB", 64)
    monkeypatch.setattr(search_ceilings, "best_ms", lambda fn, calls=40, repeats=5: fn() is not None and 0.5)
    assert search_ceilings.main(["--measure", "int8", "--hidden", "32"]) == 0
    out = capsys.readouterr().out.splitlines()
    result = json.loads(out[0])
    assert set(result["products"]) == {"qkv", "ff1", "ff2", "output"}
    assert result["products"]["output"]["shape"] == [search_ceilings.ROWS, 32, 64]
    assert all(r[k] == 0.5 for r in result["products"].values() for k in ("bf16_ms", "dynamic_int8_ms", "onednn_int8_ms"))
    assert out[1].startswith("summary: qkv bf16")


def test_rows_measure_times_three_kernels_at_every_row_count(capsys, monkeypatch):
    import search_ceilings

    monkeypatch.setattr(search_ceilings, "VOCAB", 64)
    monkeypatch.setattr(search_ceilings, "ROW_COUNTS", (3, 7))
    monkeypatch.setattr(search_ceilings, "best_ms", lambda fn, calls=40, repeats=5: fn() is not None and 0.25)
    assert search_ceilings.main(["--measure", "rows", "--hidden", "32"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[0])
    table = result["us_per_call"]
    assert set(table) == {"qkv", "o", "ff1", "ff2", "output"} and all(set(rows) == {"3", "7"} for rows in table.values())
    assert table["output"]["7"] == {"bf16": 250.0, "dynamic_int8": 250.0, "float32_plain": 250.0}


def test_plain_step_reads_its_cache_and_returns_log_probabilities():
    import search_ceilings

    torch.manual_seed(0)
    rows, entries = search_ceilings.ROWS, search_ceilings.ENTRIES
    step = search_ceilings.PlainStep(32, 2, 64, 2, 50)
    cache = lambda n, t: [torch.randn(n, 2, t, 16).to(torch.bfloat16) for _ in range(2)]  # noqa: E731
    keys = cache(rows, 3)
    with torch.inference_mode():
        logp, new = step(torch.randn(rows, 1, 32), keys, cache(rows, 3), cache(entries, 5), cache(entries, 5),
                         torch.arange(rows).flip(0))
    assert logp.shape == (rows, 1, 50) and torch.allclose(logp.exp().sum(-1), torch.ones(rows, 1), atol=1e-4)
    assert len(new) == 4 and new[0].shape == (rows, 2, 4, 16)
    assert torch.equal(new[0][:, :, :3], keys[0].flip(0))  # the cache reordered by the index, then extended
