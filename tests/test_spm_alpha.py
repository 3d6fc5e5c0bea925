"""data.spm_alpha: the training segmentation is sampled anew every epoch (different across epochs,
the same for a given seed and epoch), the dev data never; word vocabularies refuse it."""

from __future__ import annotations

import signal

import pytest
import torch

from attnmt.config import load_config
from attnmt.data.batching import encode_corpus
from attnmt.errors import UserError
from attnmt.train.data import prepare_data, resample
from attnmt.train.run import run_training

BPE = ["data.tokenizer=bpe", "data.src_vocab_size=60", "data.tgt_vocab_size=60", "data.max_len=100"]


@pytest.fixture(scope="module")
def sampled(tiny_corpus, tmp_path_factory):
    cfg = load_config(tiny_corpus.config, [*BPE, "data.spm_alpha=0.3"])
    run = tmp_path_factory.mktemp("spm")
    return cfg, run, prepare_data(cfg, run, create_tokenizers=True)


def test_epochs_get_different_segmentations_and_a_seed_fixes_them(sampled):
    cfg, run, data = sampled
    plain = (data.train_src, data.train_tgt)
    resample(data, cfg, 1)
    first = (data.train_src, data.train_tgt)
    resample(data, cfg, 2)
    second = (data.train_src, data.train_tgt)
    assert first != plain and second != first  # real regularisation: each epoch its own
    again = prepare_data(cfg, run, create_tokenizers=False)
    resample(again, cfg, 1)
    assert (again.train_src, again.train_tgt) == first  # reproducible (resume, other ranks)
    assert len(first[1]) == len(data.train_tgt_text)  # none over max_len here
    decoded = [data.tgt_tok.decode(seq) for seq in first[1]]
    assert decoded == data.train_tgt_text  # the same text, other pieces


def test_another_seed_samples_otherwise(sampled):
    cfg, run, data = sampled
    resample(data, cfg, 3)
    one = data.train_tgt
    cfg.train.seed += 1
    try:
        data.sampled_epoch = 0
        resample(data, cfg, 3)
        assert data.train_tgt != one
    finally:
        cfg.train.seed -= 1


def test_dev_is_never_sampled(sampled):
    cfg, run, data = sampled
    dev_before = [list(x) for x in data.dev_tgt], [list(x) for x in data.dev_src]
    resample(data, cfg, 4)
    assert (data.dev_tgt, data.dev_src) == dev_before
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
    import json

    records = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records if r["event"] == "resample"] == [1, 2]  # once per epoch


@pytest.mark.parametrize("override, message", [([], "needs data.tokenizer bpe or unigram"),
                                               ([*BPE, "data.spm_alpha=1.5"], r"in \[0, 1\]")])
def test_bad_spm_alpha_is_refused_naming_the_key(tiny_corpus, override, message):
    with pytest.raises(UserError, match=r"data\.spm_alpha .*" + message):
        load_config(tiny_corpus.config, ["data.spm_alpha=0.1", *override])
