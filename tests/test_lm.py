"""Neural language models (task lm): the LSTM LM, sampling, training and `attnmt eval` perplexity."""

from __future__ import annotations

import json
import math
import signal

import pytest
import torch

from attnmt.config import Config, ModelConfig
from attnmt.data.vocab import BOS, PAD
from attnmt.decode.search import greedy_search
from attnmt.models import build_model
from attnmt.models.lm import LSTMLM, sample

V = 30


def make_lm(layers: int = 2, hidden: int = 16, embed: int = 16, seed: int = 0) -> LSTMLM:
    torch.manual_seed(seed)
    return LSTMLM(ModelConfig(layers=layers, hidden=hidden, embed=embed, dropout=0.0), V, 0.1).eval()


def test_build_model_wires_lstm_lm_and_ties_embeddings():
    cfg = Config(task="lm", model=ModelConfig(type="lstm", layers=1, hidden=16, embed=16))
    model = build_model(cfg, 0, V)
    assert isinstance(model, LSTMLM)
    assert model.output.weight is model.embedding.weight  # tied when embed == hidden
    untied = LSTMLM(ModelConfig(layers=1, hidden=16, embed=8), V)
    assert untied.output.weight.shape == (V, 16)


def test_teacher_forcing_equals_step_by_step():
    model = make_lm()
    g = torch.Generator().manual_seed(0)
    tgt_in = torch.cat([torch.full((3, 1), BOS), torch.randint(4, V, (3, 6), generator=g)], 1)
    tgt_in[1, 4:] = PAD
    src, lengths = torch.zeros((3, 0), dtype=torch.long), torch.zeros(3, dtype=torch.long)
    forced, weights = model(src, lengths, tgt_in)
    assert forced.shape == (3, 7, V) and weights is None
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    for t in range(7):
        logits, state, _ = model.step(tgt_in[:, : t + 1], state, enc)
        torch.testing.assert_close(logits[0], forced[0, t], atol=1e-5, rtol=1e-5)
        if t < 4:  # padding after the end of row 1 cannot change its earlier positions
            torch.testing.assert_close(logits[1], forced[1, t], atol=1e-5, rtol=1e-5)


def test_sampling_is_seeded_and_top1_is_greedy():
    model = make_lm(seed=2)
    a = sample(model, 4, max_len=12, generator=torch.Generator().manual_seed(5))
    b = sample(model, 4, max_len=12, generator=torch.Generator().manual_seed(5))
    assert a == b and all(all(0 < t < V and t not in (BOS, 3) for t in s) for s in a)
    top1 = sample(model, 2, max_len=12, top_k=1, generator=torch.Generator().manual_seed(1))
    src, lengths = torch.zeros((2, 0), dtype=torch.long), torch.zeros(2, dtype=torch.long)
    greedy = greedy_search(model, src, lengths, max_len_extra=12)
    assert top1 == [h[0].tokens for h in greedy]


# -- training and evaluation from the command line ------------------------------------------------
LM_CONFIG = """\
task: lm
data: {{train: {d}/train.en, dev: {d}/dev.en, tokenizer: {tok}, tgt_vocab_size: {size}, max_len: 30}}
model: {{type: lstm, layers: 1, hidden: 24, embed: 24, dropout: 0.0}}
train: {{optimizer: adam, lr: 0.02, warmup: 1, epochs: 50, max_steps: 30, batch_size: 32,
        init_uniform: 0.1, device: cpu, threads: 1, log_every: 100, valid_every: 15}}
"""


def _train(config, run):
    from attnmt.train.run import run_training

    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run_training(str(config), str(run), [], resume=False)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def bpe_lm_run(tiny_corpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lm")
    config = tmp / "lm.yaml"
    config.write_text(LM_CONFIG.format(d=tiny_corpus.directory, tok="bpe", size=60))
    run = tmp / "run"
    summary = _train(config, run)
    return run, summary


def test_lstm_lm_learns(bpe_lm_run):
    run, summary = bpe_lm_run
    valid = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines() if '"valid"' in x]
    first = next(json.loads(x) for x in (run / "log.jsonl").read_text().splitlines() if '"train"' in x)
    assert summary["step"] == 30 and [v["step"] for v in valid] == [15, 30]  # the last one not twice
    assert valid[-1]["ppl"] < valid[0]["ppl"] and valid[-1]["ppl"] < 0.7 * first["ppl"]


def test_eval_reports_token_and_word_perplexity(bpe_lm_run, tiny_corpus, capsys):
    from attnmt.cli.main import main
    from attnmt.data.batching import encode_corpus
    from attnmt.data.corpus import read_lines
    from attnmt.runs.loader import load_run
    from attnmt.train.training import perplexity

    run, _ = bpe_lm_run
    dev = tiny_corpus.directory / "dev.en"
    assert main(["eval", "--model", str(run), "--input", str(dev), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["results"][0]
    lines = read_lines(str(dev))
    assert row["words"] == sum(len(x.split()) for x in lines) and row["sentences"] == len(lines)
    assert row["tokens"] > row["words"] + row["sentences"]  # BPE splits some words into pieces
    # one total log-probability, two normalisations: ppl per piece, word_ppl per word (+ </s>)
    assert math.log(row["ppl"]) * row["tokens"] == pytest.approx(-row["logprob"], rel=1e-9)
    assert math.log(row["word_ppl"]) * (row["words"] + row["sentences"]) == pytest.approx(-row["logprob"], rel=1e-9)
    assert row["word_ppl"] > row["ppl"]
    # the same number the trainer's validation computes
    loaded = load_run(run, device="cpu")
    model, tok = loaded.model, loaded.tgt_tok
    ids = encode_corpus(tok, lines)
    ref = perplexity(model, [[] for _ in ids], ids, torch.device("cpu"))
    assert row["ppl"] == pytest.approx(ref["ppl"], rel=1e-5) and row["tokens"] == ref["tokens"]
    # plain text output and user errors
    assert main(["eval", "--model", str(run), "--input", str(dev)]) == 0
    assert "word_ppl=" in capsys.readouterr().out
    assert main(["eval", "--model", str(run), "--input", str(dev), "--alpha", "0.5"]) == 2
    assert "--ngram" in capsys.readouterr().err
    assert main(["eval", "--model", str(run), "--input", str(dev / "missing")]) == 2


def test_transformer_lm_trains_and_evaluates_when_available(tiny_corpus, tmp_path, capsys):
    pytest.importorskip("attnmt.models.transformer")
    from attnmt.cli.main import main

    text = LM_CONFIG.format(d=tiny_corpus.directory, tok="word", size=100)
    text = text.replace("type: lstm, layers: 1, hidden: 24, embed: 24",
                        "type: transformer, layers: 1, hidden: 16, heads: 2, ff: 32")
    text = text.replace("max_steps: 30", "max_steps: 6").replace("valid_every: 15", "valid_every: 6")
    config = tmp_path / "t.yaml"
    config.write_text(text)
    _train(config, tmp_path / "run")
    assert main(["eval", "--model", str(tmp_path / "run"), "--input",
                 str(tiny_corpus.directory / "dev.en"), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["results"][0]
    assert math.isfinite(row["ppl"]) and row["word_ppl"] > 1.0
