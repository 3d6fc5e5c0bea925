"""`attnmt score --hyp A --hyp B --ref R --paired-bs | --paired-ar`: sacrebleu's paired tests."""

from __future__ import annotations

import json
import random

import pytest

from attnmt.cli.main import main
from attnmt.errors import UserError
from attnmt.eval.significance import paired_test

WORDS = "el la un una gato perro casa mesa ve tiene quiere rojo roja grande".split()


def _systems(n: int = 120):
    rng = random.Random(0)
    refs = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(n)]
    near = list(refs)
    near[5] = "otra cosa"  # one line of 120 differs: not significant
    bad = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(n)]
    return refs, near, bad


def _write(tmp_path, **files) -> dict:
    out = {}
    for name, lines in files.items():
        (tmp_path / name).write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        out[name] = str(tmp_path / name)
    return out


def test_paired_bootstrap_separates_clear_differences_from_none(tmp_path, capsys):
    refs, near, bad = _systems()
    f = _write(tmp_path, ref=refs, base=near, same=near, good=refs, bad=bad)
    argv = ["score", "--ref", f["ref"], "--hyp", f["base"], "--hyp", f["same"], "--hyp", f["good"],
            "--hyp", f["bad"], "--paired-bs", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    base, same, good, bad_row = out["systems"]
    assert base["bleu"]["p_value"] is None and base["name"] == f["base"]
    assert same["bleu"]["p_value"] == 1.0 and same["chrf"]["p_value"] == 1.0  # identical outputs
    assert same["differing_lines"] == 0 and good["differing_lines"] == 1
    assert good["bleu"]["p_value"] > 0.05  # one sentence of 120 better: not significant
    assert bad_row["bleu"]["p_value"] < 0.01 and bad_row["chrf"]["p_value"] < 0.01
    assert bad_row["bleu"]["score"] < base["bleu"]["score"]
    assert bad_row["bleu"]["ci"] > 0 and abs(bad_row["bleu"]["mean"] - bad_row["bleu"]["score"]) < 3
    assert "bs:1000" in out["signatures"]["bleu"] and out["samples"] == 1000
    assert main(argv) == 0  # the default seed: the same figures every time
    assert json.loads(capsys.readouterr().out) == out


def test_seed_reproducibility_and_text_output(tmp_path, capsys):
    refs, near, bad = _systems(60)
    systems = [("a", near), ("b", bad)]
    one = paired_test(systems, refs, "bs", samples=200, seed=7)
    assert paired_test(systems, refs, "bs", samples=200, seed=7) == one
    other = paired_test(systems, refs, "bs", samples=200, seed=8)
    assert other["systems"] != one["systems"]  # resampled anew: other means and intervals
    f = _write(tmp_path, ref=refs, a=near, b=bad)
    assert main(["score", "--ref", f["ref"], "--hyp", f["a"], "--hyp", f["b"], "--paired-ar",
                 "--samples", "500"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert "baseline" in text[0] and "p=" in text[1] and "*" in text[1]  # significant
    assert text[-1].startswith("approximate randomisation, 500 samples")


def test_paired_tests_refuse_bad_input(tmp_path, capsys):
    refs, near, _ = _systems(20)
    f = _write(tmp_path, ref=refs, a=near, short=near[:5])
    assert main(["score", "--ref", f["ref"], "--hyp", f["a"], "--paired-bs"]) == 2
    assert "two or more --hyp" in capsys.readouterr().err
    assert main(["score", "--ref", f["ref"], "--hyp", f["a"], "--hyp", f["short"], "--paired-bs"]) == 2
    err = capsys.readouterr().err
    assert "line counts differ" in err and f["short"] in err and len(err.strip().splitlines()) == 1
    assert main(["score", "--ref", f["ref"], "--hyp", f["a"], "--hyp", f["a"]]) == 2
    assert "--paired-bs or --paired-ar" in capsys.readouterr().err
    assert main(["score", "--ref", f["ref"], "--hyp", f["a"], "--seed", "3"]) == 2
    assert "are for --paired-bs" in capsys.readouterr().err
    with pytest.raises(UserError, match="seed"):
        paired_test([("a", near), ("b", near)], refs, "bs", seed=0)


def test_table1_driver_reports_the_p_value_of_each_delta(tmp_path):
    from attnmt.eval.experiment import paired_p_values, write_table

    refs, near, bad = _systems(60)
    (tmp_path / "hyp").mkdir()
    results = []
    for row, hyps in (("base", bad), ("feed", near), ("local", near)):
        _write(tmp_path / "hyp", **{f"{row}.txt": hyps})
        results.append({"row": row, "label": row, "ppl": 5.0, "bleu": 1.0, "bleu_tok": 1.0, "chrf": 1.0})
    results.append({"row": "missing", "label": "no hyp file", "ppl": 5.0, "bleu": 1.0, "bleu_tok": 1.0, "chrf": 1.0})
    paired_p_values(tmp_path, results, refs)
    assert "p_delta" not in results[0] and "p_delta" not in results[3]
    assert results[1]["p_delta"] < 0.01 and results[2]["p_delta"] == 1.0  # feed vs base; local = feed
    table = write_table(results, tmp_path / "table.md").splitlines()
    assert table[0].endswith("| p (Δ) |") and table[3].endswith("| 0.001 |") and table[4].endswith("| 1.000 |")


def test_equal_scores_are_not_significant_even_when_outputs_differ():
    refs = ["el gato ve un perro"] * 30
    out = paired_test([("a", ["uno"] * 30), ("b", ["dos"] * 30)], refs, "bs", samples=200)
    b = out["systems"][1]
    assert b["bleu"]["score"] == out["systems"][0]["bleu"]["score"] == 0.0
    assert b["bleu"]["p_value"] == 1.0 and b["differing_lines"] == 30  # sacrebleu alone: 1/201
