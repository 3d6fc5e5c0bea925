"""A new attention is one file: tests/toy_attention.py (a scaled cosine score) and its
``attention.register`` call. With nothing else changed it trains, translates, force-aligns and
serves; no kernel declares it, so it takes the reference path, which the run records (log.jsonl's
``paths``) and says once on stderr."""

from __future__ import annotations

import json
import signal

import pytest
import torch
import toy_attention  # noqa: F401  (registers model.attention: cosine)
from fastapi.testclient import TestClient

from attnmt.cli.main import main
from attnmt.config import apply_overrides, load_config, validate
from attnmt.errors import UserError

FALLBACK = "attnmt: attention ToyCosine: reference path (no fused kernel declares it)"


@pytest.fixture(scope="module")
def cosine_run(tiny_corpus, tmp_path_factory):
    """``attnmt train`` of the tiny corpus with model.attention=cosine, 12 updates; (run, stderr)."""
    import contextlib
    import io

    run = tmp_path_factory.mktemp("cosine") / "run"
    err = io.StringIO()
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.redirect_stderr(err):
            code = main(["train", str(tiny_corpus.config), "--out", str(run), "--max-steps", "12",
                         "--set", "model.attention=cosine", "--set", "train.valid_every=6"])
    finally:  # the trainer installs its own handlers and thread count
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
    assert code == 0, err.getvalue()
    return run, err.getvalue()


def test_config_validation_accepts_the_registered_name_only(tiny_corpus):
    cfg = load_config(str(tiny_corpus.config))
    assert validate(apply_overrides(cfg, ["model.attention=cosine"])).model.attention == "cosine"
    with pytest.raises(UserError, match="model.attention must be one of .*cosine.*not 'cosin'"):
        validate(apply_overrides(cfg, ["model.attention=cosin"]))


def test_it_trains_on_the_reference_path_and_says_so_once(cosine_run):
    from toy_attention import ToyCosine

    from attnmt.runs.loader import load_run

    run, err = cosine_run
    assert err.count(FALLBACK) == 1
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    paths = next(r["paths"] for r in records if r["event"] == "paths")
    assert paths["attention ToyCosine: attention steps"] == "reference (no fused kernel declares it)"
    assert paths["attention ToyCosine: attention search"] == "reference (no fused kernel declares it)"
    assert paths["LuongDecoder: decoder loop"] == "fused_rnn.StepLoop"  # the LSTM stack still fused
    assert any(r["event"] == "valid" for r in records)
    loaded = load_run(str(run), device="cpu")
    assert isinstance(loaded.network.decoder.attention, ToyCosine)
    assert loaded.network.decoder.attention.scale.item() != 5.0  # trained


def test_it_translates_and_aligns(cosine_run, tmp_path, capsys):
    run, _ = cosine_run
    src = tmp_path / "src.en"
    src.write_text("the big dog sees a small flower\na cat\n", encoding="utf-8")
    out, links = tmp_path / "out.es", tmp_path / "out.align"
    assert main(["translate", "--model", str(run), "--input", str(src), "-o", str(out),
                 "--alignments", str(links), "--beam", "3", "--device", "cpu"]) == 0
    assert capsys.readouterr().err.count(FALLBACK) == 1
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    assert len(links.read_text(encoding="utf-8").splitlines()) == 2
    tgt = tmp_path / "tgt.es"
    tgt.write_text("el perro grande ve una flor pequeña\nun gato\n", encoding="utf-8")
    forced = tmp_path / "forced.align"
    assert main(["align", "--model", str(run), "--src", str(src), "--tgt", str(tgt), "-o", str(forced),
                 "--device", "cpu"]) == 0
    rows = forced.read_text(encoding="utf-8").splitlines()
    assert sorted({int(j) for i, j in (x.split("-") for x in rows[1].split())}) == [0, 1]


def test_it_serves_with_attention_weights(cosine_run):
    from attnmt.serve.app import create_app, load_models

    run, _ = cosine_run
    with TestClient(create_app(load_models([str(run)], device="cpu", float32=True)),
                    base_url="http://127.0.0.1") as client:
        r = client.post("/translate", json={"sentences": ["a cat"], "beam": 2, "attention": True})
    assert r.status_code == 200, r.text
    h = r.json()["translations"][0]["hypotheses"][0]
    assert len(h["attention"]) == len(h["tgt_pieces"])
    for row in h["attention"]:  # the cosine's softmax over the source pieces
        assert sum(row) == pytest.approx(1.0, abs=2e-3)
