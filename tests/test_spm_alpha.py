"""data.spm_alpha: each batch's segmentation is sampled anew from the kept text (different across
epochs and batches, the same for a given seed, epoch and batch: --resume and every rank agree);
the sentences of an epoch do not depend on the sampling (a sample over data.max_len falls back to
the sentence's best segmentation); dev data is never sampled; word vocabularies refuse it."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
import torch

from attnmt.config import load_config
from attnmt.data.batching import collate_rows, encode_corpus
from attnmt.errors import UserError
from attnmt.train.data import prepare_data
from attnmt.train.run import run_training

BPE = ["data.tokenizer=bpe", "data.src_vocab_size=60", "data.tgt_vocab_size=60", "data.max_len=100"]


@pytest.fixture(scope="module")
def sampled(tiny_corpus, tmp_path_factory):
    cfg = load_config(tiny_corpus.config, [*BPE, "data.spm_alpha=0.3"])
    run = tmp_path_factory.mktemp("spm")
    return cfg, run, prepare_data(cfg, run)


def _rows(batch) -> tuple[list, list]:
    src = [r[r != 0].tolist() for r in batch.src]
    tgt = [r[r != 0].tolist() for r in batch.tgt_out]
    return src, tgt


def test_batches_get_different_segmentations_and_a_seed_fixes_them(sampled):
    cfg, run, data = sampled
    ts = data.train
    index = np.arange(min(len(ts), 12))
    plain = _rows(collate_rows(ts.src, ts.tgt, index))  # the best segmentation
    first, second, other = (_rows(ts.collate(index, e, k)) for e, k in ((1, 0), (2, 0), (1, 1)))
    assert first != plain and second != first and other != first  # each epoch and batch its own
    again = prepare_data(cfg, run)  # a resumed run, another rank
    assert _rows(again.train.collate(index, 1, 0)) == first
    decoded = [data.tgt_tok.decode(seq[:-1]) for seq in first[1]]  # the same text, other pieces
    assert decoded == ts.split.lines("tgt", index)


def test_another_seed_samples_otherwise(sampled):
    cfg, run, data = sampled
    index = np.arange(min(len(data.train), 12))
    one = _rows(data.train.collate(index, 3, 0))
    cfg.train.seed += 1
    try:
        assert _rows(data.train.collate(index, 3, 0)) != one
    finally:
        cfg.train.seed -= 1


def test_a_sample_over_max_len_falls_back_to_the_best_segmentation(tiny_corpus, tmp_path):
    """Sampling makes segmentations longer; a pair kept once is kept in every epoch, with its
    best segmentation where a sample comes out over data.max_len."""
    cfg = load_config(tiny_corpus.config, [*BPE, "data.spm_alpha=1.0"])
    data = prepare_data(cfg, tmp_path)
    longest = int(max(np.max(data.train.src.lengths), np.max(data.train.tgt.lengths)))
    cfg.data.max_len = longest  # nothing is left out; a sample over it must not be either
    ts = data.train
    index = np.arange(len(ts))
    src, tgt = _rows(ts.collate(index, 1, 0))
    assert len(tgt) == len(index)
    assert max(len(t) - 1 for t in tgt) <= longest and max(len(s) for s in src) <= longest
    best = [ts.tgt.row(i).tolist() + [3] for i in index]
    assert any(t == b for t, b in zip(tgt, best)) and any(t != b for t, b in zip(tgt, best))


def test_dev_is_never_sampled(sampled):
    cfg, run, data = sampled
    assert data.dev_tgt == encode_corpus(data.tgt_tok, data.dev_tgt_text)  # the one best segmentation


def test_a_sampled_run_trains_across_epochs(tiny_corpus, tmp_path):
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = run_training(str(tiny_corpus.config), str(tmp_path / "run"),
                               [*BPE, "data.spm_alpha=0.2", "train.max_steps=20", "train.epochs=2"],
                               resume=False)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        torch.set_num_threads(threads)
    assert summary["step"] == 20 and summary["epoch"] == 2
    records = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert not [r for r in records if r["event"] == "resample"]  # no pass over the corpus per epoch


@pytest.mark.parametrize("override, message", [([], "needs data.tokenizer bpe or unigram"),
                                               ([*BPE, "data.spm_alpha=1.5"], r"in \[0, 1\]")])
def test_bad_spm_alpha_is_refused_naming_the_key(tiny_corpus, override, message):
    with pytest.raises(UserError, match=r"data\.spm_alpha .*" + message):
        load_config(tiny_corpus.config, ["data.spm_alpha=0.1", *override])
