"""Per-sentence scores (`attnmt score --per-sentence`, Model.score(per_sentence=True)): one JSON
line per input line, and the lines' log-probabilities add up to the corpus figure."""

from __future__ import annotations

import json
import math
import signal

import pytest
import torch

from attnmt.cli.main import main

LM_CONFIG = """\
task: lm
data: {{train: {d}/train.es, dev: {d}/dev.es, tokenizer: word, tgt_vocab_size: 60, max_len: 30}}
model: {{type: lstm, layers: 1, hidden: 16, embed: 16, dropout: 0.0}}
train: {{optimizer: adam, lr: 0.02, warmup: 1, epochs: 50, max_steps: 10, batch_size: 32,
        init_uniform: 0.1, device: cpu, threads: 1, log_every: 100, valid_every: 10}}
"""


def _lines(capsys) -> list[dict]:
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def _files(tmp_path, tiny_corpus, blank_at: int | None = None):
    src = (tiny_corpus.directory / "dev.en").read_text().splitlines()[:12]
    ref = (tiny_corpus.directory / "dev.es").read_text().splitlines()[:12]
    if blank_at is not None:
        ref[blank_at] = ""
    (tmp_path / "s.en").write_text("".join(x + "\n" for x in src))
    (tmp_path / "r.es").write_text("".join(x + "\n" for x in ref))
    return src, ref, str(tmp_path / "s.en"), str(tmp_path / "r.es")


def test_per_sentence_logprobs_sum_to_the_corpus_total(tiny_run, tiny_corpus, tmp_path, capsys):
    src, ref, s, r = _files(tmp_path, tiny_corpus, blank_at=4)
    assert main(["score", "--model", str(tiny_run), "--src", s, "--ref", r, "--per-sentence"]) == 0
    rows = _lines(capsys)
    assert [row["line"] for row in rows] == list(range(1, 13))  # one per input line, in order
    assert rows[4]["logprob"] is None and rows[4]["tokens"] == 0  # the blank line is not scored
    scored = [row for row in rows if row["logprob"] is not None]
    for row, text in zip(scored, ref[:4] + ref[5:]):
        assert row["tokens"] == len(text.split()) + 1  # word tokenizer: words + </s>
        assert row["words"] == len(text.split())
        assert row["logprob"] < 0
        assert row["ppl"] == pytest.approx(math.exp(-row["logprob"] / row["tokens"]))
    assert main(["score", "--model", str(tiny_run), "--src", s, "--ref", r, "--json"]) == 0
    corpus = json.loads(capsys.readouterr().out)
    total = sum(row["logprob"] for row in scored)
    tokens = sum(row["tokens"] for row in scored)
    assert tokens == corpus["tokens"]
    assert math.exp(-total / tokens) == pytest.approx(corpus["ppl"], abs=2e-3)


def test_api_per_sentence_matches_the_corpus_score(tiny_run, tiny_corpus, tmp_path):
    import attnmt

    src, ref, *_ = _files(tmp_path, tiny_corpus)
    model = attnmt.load(tiny_run, device="cpu")
    rows = model.score(ref, sources=src, per_sentence=True)
    total = model.score(ref, sources=src)
    assert len(rows) == len(ref)
    assert sum(r["logprob"] for r in rows) == pytest.approx(total["logprob"], rel=1e-9)
    # a sentence scored alone gets the same log-probability as in the batch
    alone = model.score(ref[3:4], sources=src[3:4], per_sentence=True)[0]
    assert alone["logprob"] == pytest.approx(rows[3]["logprob"], abs=1e-4)


def test_per_sentence_for_a_language_model_without_src(tiny_corpus, tmp_path, capsys):
    from attnmt.train.run import run_training

    config = tmp_path / "lm.yaml"
    config.write_text(LM_CONFIG.format(d=tiny_corpus.directory))
    threads = torch.get_num_threads()
    handlers = {x: signal.getsignal(x) for x in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_training(str(config), str(tmp_path / "lm"), [], resume=False)
    finally:
        for x, handler in handlers.items():
            signal.signal(x, handler)
        torch.set_num_threads(threads)
    _, ref, _, r = _files(tmp_path, tiny_corpus)
    assert main(["score", "--model", str(tmp_path / "lm"), "--ref", r, "--per-sentence"]) == 0
    rows = _lines(capsys)
    assert len(rows) == len(ref) and all(row["logprob"] < 0 for row in rows)
    assert main(["score", "--model", str(tmp_path / "lm"), "--ref", r, "--json"]) == 0
    corpus = json.loads(capsys.readouterr().out)
    total, tokens = sum(row["logprob"] for row in rows), sum(row["tokens"] for row in rows)
    assert math.exp(-total / tokens) == pytest.approx(corpus["ppl"], abs=2e-3)


def test_per_sentence_refuses_what_it_cannot_do(tiny_run, tiny_corpus, tmp_path, capsys):
    _, _, s, r = _files(tmp_path, tiny_corpus)
    assert main(["score", "--hyp", r, "--ref", r, "--per-sentence"]) == 2
    assert "--per-sentence needs --model" in capsys.readouterr().err
    (tmp_path / "short.en").write_text("the cat\n")
    assert main(["score", "--model", str(tiny_run), "--src", str(tmp_path / "short.en"), "--ref", r,
                 "--per-sentence"]) == 2
    err = capsys.readouterr()
    assert "line counts differ" in err.err and err.out == ""
