"""BLEU by length, learning curves, heat maps (PNG + tables), and the Table-1 experiment runner."""

from __future__ import annotations

import json
import math

import pytest
import torch
from analysis_fixtures import SRC, TGT, make_run

from attnmt.cli.main import main
from attnmt.eval.lengths import bleu_by_length, bucket_labels, bucket_of
from attnmt.eval.plots import plot_heatmap, read_log

PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG and len(data) > 2000


def test_buckets():
    assert bucket_labels() == ["<10", "10-20", "20-30", "30-40", "40-50", "50+"]
    assert [bucket_of(n) for n in (0, 9, 10, 19, 20, 39, 49, 50, 120)] == [0, 0, 1, 1, 2, 3, 4, 5, 5]


def test_bleu_by_length():
    src = ["w " * 5, "w " * 12, "w " * 15, "w " * 55]
    ref = ["a b c d e", "the cat sat on the mat today", "one two three four five six", "x y z w v u"]
    hyp = [ref[0], ref[1], "one two three four five six", "completely wrong output here now"]
    rows = bleu_by_length(src, ref, {"sys": hyp, "ref": ref})
    by = {r["bucket"]: r for r in rows}
    assert by["<10"]["sentences"] == 1 and by["10-20"]["sentences"] == 2 and by["50+"]["sentences"] == 1
    assert by["10-20"]["sys"] == pytest.approx(100.0) and by["50+"]["sys"] < 10
    assert all(r["ref"] == pytest.approx(100.0) for r in rows if r["sentences"])
    assert by["20-30"]["sys"] is None and by["20-30"]["sentences"] == 0  # labelled empty, not nan


def test_cli_lengths_writes_tables_and_png(tmp_path, capsys):
    src, ref, h1, h2 = (tmp_path / n for n in ("s", "r", "h1", "h2"))
    src.write_text("\n".join(["a b c"] * 3 + ["w " * 25]) + "\n", encoding="utf-8")
    ref.write_text("x y z\np q r\ns t u\nl m n o\n", encoding="utf-8")
    h1.write_text("x y z\np q r\ns t\nl m n o\n", encoding="utf-8")
    h2.write_text("x\np\ns\nl\n", encoding="utf-8")
    out = tmp_path / "len"
    assert main(["analyse", "lengths", "--src", str(src), "--ref", str(ref), "--hyp", str(h1), "--hyp",
                 str(h2), "--name", "good", "--name", "bad", "--out", str(out)]) == 0
    assert "| bucket | sentences | avg_len | good | bad |" in capsys.readouterr().out
    assert _is_png(out / "lengths.png")
    assert (out / "lengths.csv").read_text(encoding="utf-8").startswith("bucket,sentences,avg_len,good,bad")
    h2.write_text("x\n", encoding="utf-8")
    assert main(["analyse", "lengths", "--src", str(src), "--ref", str(ref), "--hyp", str(h2),
                 "--out", str(out)]) == 2


def test_cli_lengths_writes_all_three_outputs_or_none(tmp_path, monkeypatch):
    import attnmt.eval.plots as plots
    from attnmt.errors import UserError

    src, ref = tmp_path / "s", tmp_path / "r"
    src.write_text("a b c\nd e\n", encoding="utf-8")
    ref.write_text("x y z\np q\n", encoding="utf-8")
    out = tmp_path / "len"
    out.mkdir()
    (out / "lengths.md").write_text("the last run's table\n", encoding="utf-8")

    def failing_plot(rows, names, path):
        raise UserError("cannot draw", str(path))

    monkeypatch.setattr(plots, "plot_lengths", failing_plot)
    assert main(["analyse", "lengths", "--src", str(src), "--ref", str(ref), "--hyp", str(ref),
                 "--out", str(out)]) == 2
    # the figure failed after the tables were written: neither table is new, nothing left over
    assert sorted(p.name for p in out.iterdir()) == ["lengths.md"]
    assert (out / "lengths.md").read_text(encoding="utf-8") == "the last run's table\n"


def _fake_log(run, points):
    run.mkdir(parents=True)
    with open(run / "log.jsonl", "w", encoding="utf-8") as f:
        f.write(json.dumps({"event": "start", "params": 1}) + "\n")
        for step, ppl in points:
            f.write(json.dumps({"event": "train", "step": step, "loss": math.log(ppl * 1.1), "ppl": ppl * 1.1}) + "\n")
            f.write(json.dumps({"event": "valid", "step": step, "ppl": ppl}) + "\n")


def test_cli_curves(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _fake_log(a, [(100, 50.0), (200, 20.0), (300, 12.0)])
    _fake_log(b, [(100, 60.0), (200, 30.0)])
    assert read_log(a)["valid"] == [(100, 50.0), (200, 20.0), (300, 12.0)]
    out, csv = tmp_path / "c.png", tmp_path / "c.csv"
    assert main(["analyse", "curves", "--run", str(a), "--run", str(b), "--out", str(out), "--csv", str(csv)]) == 0
    assert _is_png(out)
    assert len(csv.read_text(encoding="utf-8").splitlines()) == 1 + 2 * 5
    assert main(["analyse", "curves", "--run", str(tmp_path / "missing"), "--out", str(out)]) == 2


def test_curves_of_a_run_killed_and_resumed(tmp_path):
    """A run killed at step 300 after its checkpoint at 200 trains 300 again after --resume: the
    log holds both; the curve went back to 200 and the CSV had step 300 twice."""
    run = tmp_path / "killed"
    _fake_log(run, [(100, 50.0), (200, 20.0), (300, 15.0)])
    with open(run / "log.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"event": "resume", "checkpoint": "step-00000200", "step": 200}) + "\n")
        f.write(json.dumps({"event": "valid", "step": 300, "ppl": 12.0}) + "\n")
    assert read_log(run)["valid"] == [(100, 50.0), (200, 20.0), (300, 12.0)]
    assert [s for s, _ in read_log(run)["train"]] == [100, 200]


def test_heatmap(tmp_path, capsys):
    plot_heatmap(torch.rand(3, 4), list("abcd"), list("xyz"), tmp_path / "h.png", "title")
    assert _is_png(tmp_path / "h.png")
    run = make_run(tmp_path, overrides=["model.attention=global", "model.score=dot", "data.reverse_source=true"])
    out, csv = tmp_path / "hm.png", tmp_path / "hm.csv"
    assert main(["analyse", "heatmap", "--model", str(run), "--input", "the old dog saw a cat",
                 "--target", "el perro viejo vio un gato", "--out", str(out), "--csv", str(csv)]) == 0
    assert _is_png(out)
    rows = csv.read_text(encoding="utf-8").splitlines()
    assert rows[0] == "target,the,old,dog,saw,a,cat" and len(rows) == 1 + 6
    assert all(abs(sum(map(float, r.split(",")[1:])) - 1) < 1e-3 for r in rows[1:])
    assert main(["analyse", "heatmap", "--model", str(run), "--input", "the dog", "--out", str(out)]) == 0
    assert _is_png(out)


def test_experiment_luong_tiny(tmp_path):
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.en").write_text("\n".join(SRC * 2) + "\n", encoding="utf-8")
        (tmp_path / f"{split}.es").write_text("\n".join(TGT * 2) + "\n", encoding="utf-8")
    out = tmp_path / "exp"
    (tmp_path / "d.tsv").write_text("dog\tperro\ncat\tgato\n", encoding="utf-8")
    args = ["experiment", "luong", "--train", str(tmp_path / "train"), "--dev", str(tmp_path / "dev"),
            "--test", str(tmp_path / "test"), "--out", str(out), "--steps", "2", "--layers", "1",
            "--hidden", "8", "--vocab", "12", "--beam", "2", "--test-lines", "3",
            "--dict", str(tmp_path / "d.tsv"), "--set", "train.batch_size=4"]
    assert main(args) == 0
    table = (out / "table.md").read_text(encoding="utf-8")
    assert table.count("\n") == 2 + 8 and "+ unk replace" in table and "Ensemble" in table
    unk = json.loads((out / "results" / "unk.json").read_text(encoding="utf-8"))
    assert unk["unk_in_output"] == 0  # every <unk> was replaced
    assert {"bleu_before_replace", "bleu_copy_only", "bleu_paper_timing", "unk_replaced"} <= set(unk)
    ens = json.loads((out / "results" / "ensemble.json").read_text(encoding="utf-8"))
    assert len(ens["models"]) == 3
    assert _is_png(out / "curves.png") and _is_png(out / "lengths" / "lengths.png")
    cfg = (out / "configs" / "feed.yaml").read_text(encoding="utf-8")
    assert "tokenizer: word" in cfg and "attention: global" in cfg and "score: location" in cfg
    assert "input_feed: true" in cfg and "reverse_source: true" in cfg and "dropout: 0.2" in cfg
    mtime = (out / "runs" / "base" / "log.jsonl").stat().st_mtime
    assert main(args) == 0  # finished rows are reused, not retrained
    assert (out / "runs" / "base" / "log.jsonl").stat().st_mtime == mtime
    assert main(args[:-2] + ["--rows", "base,nope"]) == 2


def test_experiment_luong_reuse_is_checked(tmp_path, capsys):
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.en").write_text("\n".join(SRC * 2) + "\n", encoding="utf-8")
        (tmp_path / f"{split}.es").write_text("\n".join(TGT * 2) + "\n", encoding="utf-8")
    out = tmp_path / "exp"
    common = ["experiment", "luong", "--train", str(tmp_path / "train"), "--dev", str(tmp_path / "dev"),
              "--test", str(tmp_path / "test"), "--out", str(out), "--layers", "1", "--hidden", "8",
              "--vocab", "12", "--beam", "2", "--test-lines", "3", "--set", "train.batch_size=4"]
    # a missing dictionary fails before any training
    assert main(common + ["--steps", "2", "--dict", str(tmp_path / "nope.tsv")]) == 2
    assert "nope.tsv" in capsys.readouterr().err and not (out / "runs").exists()
    rows = ["--rows", "local-p,unk"]
    assert main(common + ["--steps", "2"] + rows) == 0
    first = json.loads((out / "results" / "unk.json").read_text(encoding="utf-8"))
    assert first["settings"]["beam"] == 2
    # another budget: the finished run is not reused silently as if it had been trained for it
    capsys.readouterr()
    assert main(common + ["--steps", "3"] + rows) == 2
    assert "train.max_steps=2" in capsys.readouterr().err
    # other evaluation settings: the cached results are recomputed, the model is reused
    mtime = (out / "runs" / "local-p" / "log.jsonl").stat().st_mtime
    assert main(common[:-6] + ["--beam", "1", "--test-lines", "2", "--set", "train.batch_size=4",
                               "--steps", "2"] + rows) == 0
    again = json.loads((out / "results" / "unk.json").read_text(encoding="utf-8"))
    assert again["settings"]["beam"] == 1 and again["settings"]["test_lines"] == 2
    assert (out / "runs" / "local-p" / "log.jsonl").stat().st_mtime == mtime


def test_experiment_results_are_strict_json(tmp_path, monkeypatch, capsys):
    """A non-finite number (an overflowing perplexity) is cached as null, not the bare word
    Infinity that strict JSON readers refuse; files written before (with Infinity) and a truncated
    file are still handled: the first is reused, the second evaluated again."""
    import attnmt.eval.perplexity as perplexity

    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.en").write_text("\n".join(SRC * 2) + "\n", encoding="utf-8")
        (tmp_path / f"{split}.es").write_text("\n".join(TGT * 2) + "\n", encoding="utf-8")
    out = tmp_path / "exp"
    args = ["experiment", "luong", "--train", str(tmp_path / "train"), "--dev", str(tmp_path / "dev"),
            "--test", str(tmp_path / "test"), "--out", str(out), "--steps", "2", "--layers", "1",
            "--hidden", "8", "--vocab", "12", "--beam", "1", "--test-lines", "2",
            "--set", "train.batch_size=4", "--rows", "base"]
    monkeypatch.setattr(perplexity, "perplexity_report", lambda *a, **k: {"results": [{"ppl": math.inf}]})
    assert main(args) == 0
    cached = out / "results" / "base.json"

    def no_constant(word):
        raise AssertionError(f"non-standard JSON constant {word}")

    result = json.loads(cached.read_text(encoding="utf-8"), parse_constant=no_constant)
    assert result["ppl"] is None and result["bleu"] >= 0
    assert "| n/a |" in (out / "table.md").read_text(encoding="utf-8")
    # a file from before: Infinity written bare; it is read and reused, not evaluated again
    old = dict(result, ppl=math.inf, bleu=12.5)
    cached.write_text(json.dumps(old, indent=1), encoding="utf-8")
    capsys.readouterr()
    assert main(args) == 0
    assert "evaluating base" not in capsys.readouterr().err
    table = (out / "table.md").read_text(encoding="utf-8")
    assert "| n/a | 12.50 |" in table
    # a truncated file (killed mid-write before writes were atomic): evaluated again, rewritten
    cached.write_text(json.dumps(old, indent=1)[:40], encoding="utf-8")
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "base.json is not a readable result" in err and "evaluating base" in err
    assert json.loads(cached.read_text(encoding="utf-8"), parse_constant=no_constant)["bleu"] == result["bleu"]


def test_experiment_scores_with_a_language_only_if_tgt_is_one(tmp_path, monkeypatch, capsys):
    """--tgt is a file suffix, and it went to the tokenised BLEU as the language: with `attnmt data
    synthetic`'s files (.src/.tgt) sacremoses took 'tgt' with partly other rules than English
    ("isn't" -> "isn ' t"). A suffix that is no Moses language now scores as `score` without --lang."""
    from attnmt.eval import scoring

    assert scoring.bleu_lang("es") == "es" and scoring.bleu_lang("tgt") == scoring.bleu_lang("EN") == "en"
    real, used = scoring.tokenized_bleu, []

    def spy(hyps, refs, lang="en"):
        used.append(lang)
        return real(hyps, refs, lang)

    monkeypatch.setattr(scoring, "tokenized_bleu", spy)
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.src").write_text("\n".join(SRC * 2) + "\n", encoding="utf-8")
        (tmp_path / f"{split}.tgt").write_text("\n".join(TGT * 2) + "\n", encoding="utf-8")
    out = tmp_path / "exp"
    args = ["experiment", "luong", "--train", str(tmp_path / "train"), "--dev", str(tmp_path / "dev"),
            "--test", str(tmp_path / "test"), "--src", "src", "--tgt", "tgt", "--out", str(out),
            "--steps", "2", "--layers", "1", "--hidden", "8", "--vocab", "12", "--beam", "1",
            "--test-lines", "2", "--set", "train.batch_size=4", "--rows", "base"]
    assert main(args) == 0
    assert used == ["en"]
    cached = out / "results" / "base.json"
    result = json.loads(cached.read_text(encoding="utf-8"))
    assert result["settings"]["bleu_lang"] == "en"
    # a result cached when 'tgt' was taken as the language is evaluated again
    del result["settings"]["bleu_lang"]
    cached.write_text(json.dumps(result), encoding="utf-8")
    capsys.readouterr()
    assert main(args) == 0
    assert "evaluating base" in capsys.readouterr().err and used == ["en", "en"]
