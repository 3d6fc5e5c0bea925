"""Validation by train.valid_metric: BEST follows the chosen metric, patience stops a run, the
score and its sacrebleu signature (and the seconds a validation took) are in log.jsonl; bleu/chrf
are refused where there is nothing to translate."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from attnmt.config import load_config
from attnmt.errors import UserError
from attnmt.runs.checkpoint import find_checkpoint
from attnmt.train import training, validation
from attnmt.train.run import run_training
from attnmt.train.validation import Tracker, better


def _train(config, run: Path, overrides: list[str], **kwargs) -> dict:
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run_training(str(config), str(run), overrides, resume=False, **kwargs)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        torch.set_num_threads(threads)


def _valid(run: Path) -> list[dict]:
    records = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    return [r for r in records if r["event"] == "valid"]


def _scripted(monkeypatch, ppls: list[float], bleus: list[float]) -> None:
    """Validation results in a fixed order: dev ppl and BLEU that disagree on which is best."""
    calls = {"ppl": 0, "bleu": 0}

    def ppl(model, src, tgt, device, autocast=None):
        value = ppls[min(calls["ppl"], len(ppls) - 1)]
        calls["ppl"] += 1
        return {"loss": 0.0, "ppl": value, "tokens": 1}

    def bleu(model, cfg, src_tok, tgt_tok, device, sources, references):
        value = bleus[min(calls["bleu"], len(bleus) - 1)]
        calls["bleu"] += 1
        return {"bleu": value, "signature": "nrefs:1|scripted", "sentences": 1, "beam": 1}

    monkeypatch.setattr(validation, "perplexity", ppl)
    monkeypatch.setattr(validation, "dev_score", bleu)


@pytest.mark.parametrize("metric, flags", [("bleu", [True, False, True]), ("ppl", [True, True, False])])
def test_best_follows_the_chosen_metric_when_ppl_and_bleu_disagree(tiny_corpus, tmp_path, monkeypatch,
                                                                   metric, flags):
    # ppl is best at the 2nd validation, BLEU at the 3rd (and worse at the 2nd than the 1st)
    _scripted(monkeypatch, ppls=[10.0, 5.0, 8.0], bleus=[2.0, 1.0, 3.0])
    run = tmp_path / metric
    overrides = ["train.max_steps=6", "train.valid_every=2", f"train.valid_metric={metric}"]
    if metric == "ppl":
        monkeypatch.setattr(validation, "dev_score", lambda *a: pytest.fail("ppl validation translated"))
    summary = _train(tiny_corpus.config, run, overrides)
    valid = _valid(run)
    assert [v["step"] for v in valid] == [2, 4, 6]
    best_validation = 3 if metric == "bleu" else 2
    assert find_checkpoint(run, "best").name == f"step-{2 * best_validation:08d}"
    assert [v["best"] for v in valid] == flags
    assert all(v["metric"] == metric and v["seconds"] >= 0 for v in valid)
    if metric == "bleu":
        assert summary["best_dev_bleu"] == 3.0 and summary["best_checkpoint_dev_ppl"] == 8.0  # BEST's ppl
        assert "best_dev_ppl" not in summary  # 5.0 was the lowest: a name that says "best" would lie
        assert all(v["signature"] == "nrefs:1|scripted" for v in valid)


def test_patience_stops_after_n_validations_without_improvement(tiny_corpus, tmp_path, monkeypatch):
    _scripted(monkeypatch, ppls=[9.0], bleus=[4.0, 5.0, 5.0, 4.5, 6.0])  # 6.0 would come too late
    run = tmp_path / "patient"
    summary = _train(tiny_corpus.config, run, ["train.max_steps=40", "train.valid_every=1",
                                               "train.valid_metric=bleu", "train.patience=2"])
    assert summary["reason"] == "patience" and summary["step"] == 4
    assert [v["since_best"] for v in _valid(run)] == [0, 0, 1, 2]
    assert find_checkpoint(run, "best").name == "step-00000002"


def test_patience_counts_across_a_resume(tiny_corpus, tmp_path, monkeypatch):
    _scripted(monkeypatch, ppls=[9.0], bleus=[5.0])  # never better after the first
    run = tmp_path / "resumed"
    common = ["train.valid_every=1", "train.valid_metric=bleu", "train.patience=3"]
    _train(tiny_corpus.config, run, ["train.max_steps=2", *common])  # validations 1 and 2
    threads = torch.get_num_threads()
    try:
        summary = run_training(None, str(run), ["train.max_steps=40"], resume=True)
    finally:
        torch.set_num_threads(threads)
    assert summary["reason"] == "patience" and summary["step"] == 4


def test_a_real_bleu_validation_logs_score_signature_sentences_and_seconds(tiny_corpus, tmp_path):
    run = tmp_path / "bleu"
    _train(tiny_corpus.config, run, ["train.max_steps=4", "train.valid_every=4", "train.valid_metric=chrf",
                                     "train.valid_beam=2", "train.valid_max_sentences=5"])
    (record,) = _valid(run)
    assert record["metric"] == "chrf" and 0.0 <= record["chrf"] <= 100.0
    assert record["signature"].startswith("nrefs:1|") and "version:" in record["signature"]
    assert record["sentences"] == 5 and record["beam"] == 2
    assert record["seconds"] > 0 and record["ppl"] > 1


def test_tracker_directions_and_ties():
    assert better("bleu", 2.0, 1.0) and not better("bleu", 1.0, 1.0)
    assert better("ppl", 1.0, 2.0) and not better("ppl", 2.0, 1.0) and not better("ppl", float("nan"), 9.0)
    tracker = Tracker.fresh("chrf")
    assert tracker.observe(0.0) and not tracker.observe(0.0) and tracker.patience_spent(1)
    assert not tracker.patience_spent(0)  # 0 = never


@pytest.mark.parametrize("task", ["lm", "classify"])
def test_bleu_validation_is_refused_without_translations(tmp_path, task):
    config = tmp_path / "c.yaml"
    model = "{type: transformer, hidden: 16, heads: 2}" if task == "classify" else "{hidden: 16}"
    config.write_text(f"task: {task}\nmodel: {model}\ntrain: {{valid_metric: bleu}}\n")
    with pytest.raises(UserError, match=r"train\.valid_metric bleu scores translations") as err:
        load_config(config)
    assert err.value.args and "\n" not in str(err.value)


@pytest.mark.parametrize("override, key", [("train.valid_metric=bleuu", "train.valid_metric"),
                                           ("train.valid_beam=0", "train.valid_beam"),
                                           ("train.patience=-1", "train.patience"),
                                           ("train.valid_max_sentences=-2", "train.valid_max_sentences")])
def test_bad_validation_settings_name_their_key(tiny_corpus, override, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        load_config(tiny_corpus.config, [override])


def test_resuming_a_run_that_patience_stopped_validates_nothing_again(tiny_corpus, tmp_path, monkeypatch):
    """The run ended by patience at step 4 (validated there); --resume finds patience spent and
    ends at once, without counting step 4's validation a second time."""
    _scripted(monkeypatch, ppls=[9.0], bleus=[5.0])
    run = tmp_path / "stopped"
    common = ["train.valid_every=1", "train.valid_metric=bleu", "train.patience=3", "train.max_steps=40"]
    first = _train(tiny_corpus.config, run, common)
    assert first["reason"] == "patience" and first["step"] == 4
    before = _valid(run)
    threads = torch.get_num_threads()
    try:
        again = run_training(None, str(run), [], resume=True)
    finally:
        torch.set_num_threads(threads)
    assert again["reason"] == "patience" and again["step"] == 4
    assert _valid(run) == before  # no new validation record


def test_scores_are_compared_unrounded(tiny_corpus, tmp_path, monkeypatch):
    """BLEU 20.004 after 20.001 is better (it was 20.00 = 20.00, a tie, when rounded first)."""
    _scripted(monkeypatch, ppls=[9.0], bleus=[20.001, 20.004])
    run = tmp_path / "fine"
    _train(tiny_corpus.config, run, ["train.max_steps=2", "train.valid_every=1", "train.valid_metric=bleu"])
    assert [v["best"] for v in _valid(run)] == [True, True]


def test_each_validation_is_said_on_the_console(tiny_corpus, tmp_path, monkeypatch, capsys):
    _scripted(monkeypatch, ppls=[9.0, 8.0, 8.5], bleus=[1.0, 2.0, 1.5])
    _train(tiny_corpus.config, tmp_path / "said", ["train.max_steps=3", "train.valid_every=1",
                                                   "train.valid_metric=bleu", "train.patience=4"])
    lines = [x for x in capsys.readouterr().err.splitlines() if "valid step" in x]
    assert len(lines) == 3
    assert lines[1] == "attnmt: valid step 2 (epoch 1): dev ppl 8.00, bleu 2.00, new best, patience 4 of 4 left"
    assert lines[2] == ("attnmt: valid step 3 (epoch 1): dev ppl 8.50, bleu 1.50, best 2.00 at step 2, "
                        "patience 3 of 4 left")
