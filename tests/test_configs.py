"""Every shipped config loads, names the data `attnmt data` writes, and trains two updates with its
own model and data settings on a tiny generated corpus (the paths are overridden, and the batch
size, to keep the updates small; the paper configs' 4x1000 LSTMs still take seconds each)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from attnmt.config import load_config

CONFIGS = sorted(str(p.relative_to(Path(__file__).parents[1]))
                 for p in (Path(__file__).parents[1] / "configs").rglob("*.yaml"))


def test_there_are_configs():
    assert "configs/demo.yaml" in CONFIGS and any(c.startswith("configs/paper/") for c in CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_config_names_the_corpus_attnmt_data_writes(name):
    root = Path(__file__).parents[1]
    cfg = load_config(root / name)
    for path in (cfg.data.train, cfg.data.dev, cfg.data.test):
        assert not path or path.startswith("data/bible/"), (name, path)
    assert cfg.data.train.startswith("data/bible/train")


@pytest.mark.parametrize("name", CONFIGS)
def test_config_trains_two_updates(name, tiny_corpus, tmp_path):
    from attnmt.train.run import run_training

    root = Path(__file__).parents[1]
    cfg = load_config(root / name)
    d = tiny_corpus.directory
    assert (cfg.data.src, cfg.data.tgt) == ("en", "es")  # the tiny corpus's languages
    if cfg.task == "lm":
        paths = [f"data.train={d}/train.en", f"data.dev={d}/dev.en"]
    else:
        paths = [f"data.train={d}/train", f"data.dev={d}/dev", f"data.test={d}/dev"]
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = run_training(str(root / name), str(tmp_path / "run"),
                               paths + ["train.max_steps=2", "train.batch_size=8", "train.batch_by=sents",
                                       "train.device=cpu"], resume=False)
    finally:  # the trainer installs its own handlers and thread count
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
    assert summary["step"] == 2 and summary["best_dev_ppl"] < float("inf")
