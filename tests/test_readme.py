"""The README's Python snippet runs as written (on a tiny run at runs/demo), and `attnmt.load`
gives what the commands give."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from analysis_fixtures import SRC, TGT, make_run

import attnmt
from attnmt.decode.translate import Translator
from attnmt.errors import UserError

README = Path(__file__).parents[1] / "README.md"


def _python_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use from Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_python_snippet_runs(tmp_path, monkeypatch, capsys):
    make_run(tmp_path / "runs", "demo")
    monkeypatch.chdir(tmp_path)
    exec(compile(_python_snippet(), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "ppl" in out and "word_ppl" in out


def test_load_translates_and_scores_like_the_library(tmp_path):
    run = make_run(tmp_path, "run", ["model.attention=global", "model.score=general"])
    model = attnmt.load(run, device="cpu")
    got = model.translate([SRC[0], "", SRC[1]], beam=3)
    want = Translator.from_run(run, device="cpu").translate([SRC[0], SRC[1]], beam=3, with_attention=True)
    assert [t.text for t in got] == [want[0][0].text, "", want[1][0].text]
    assert got[0].score == want[0][0].score and got[0].alignment == want[0][0].alignment
    assert got[0].alignment and all(i < len(SRC[0].split()) for i, _ in got[0].alignment)
    result = model.score(TGT[:2], sources=SRC[:2])
    assert result["sentences"] == 2 and result["ppl"] > 1 and result["word_ppl"] > 1
    assert result["words"] == sum(len(t.split()) for t in TGT[:2])
    with pytest.raises(UserError, match="one source per text"):
        model.score(TGT[:2])
    with pytest.raises(UserError, match="classify"):
        model.classify(["x"])


def test_score_model_is_an_alias_of_eval(tmp_path, capsys):
    import json

    from attnmt.cli.main import main

    run = make_run(tmp_path, "run", ["model.attention=global", "model.score=general"])
    (tmp_path / "t.en").write_text("\n".join(SRC) + "\n", encoding="utf-8")
    (tmp_path / "t.es").write_text("\n".join(TGT) + "\n", encoding="utf-8")
    assert main(["eval", "--model", str(run), "--input", str(tmp_path / "t"), "--json"]) == 0
    prefix = json.loads(capsys.readouterr().out)["results"][0]
    assert main(["eval", "--model", str(run), "--src", str(tmp_path / "t.en"), "--input", str(tmp_path / "t.es"),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0] == prefix
    assert main(["score", "--model", str(run), "--src", str(tmp_path / "t.en"), "--ref", str(tmp_path / "t.es"),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ppl": round(prefix["ppl"], 3),
                                                   "word_ppl": round(prefix["word_ppl"], 3),
                                                   "tokens": prefix["tokens"], "words": prefix["words"]}
    assert attnmt.load(run, device="cpu").score(TGT, sources=SRC)["ppl"] == pytest.approx(prefix["ppl"])
    (tmp_path / "short.en").write_text(SRC[0] + "\n", encoding="utf-8")
    assert main(["score", "--model", str(run), "--src", str(tmp_path / "short.en"), "--ref",
                 str(tmp_path / "t.es")]) == 2
    assert "line counts differ" in capsys.readouterr().err
    assert main(["score", "--model", str(run), "--ref", str(tmp_path / "t.es")]) == 2
    assert "--src is needed" in capsys.readouterr().err
    # the files are read before the run is loaded: a missing file is named even when the run is missing too
    for argv in (["score", "--ref", str(tmp_path / "t.es")], ["eval", "--input", str(tmp_path / "t.es")]):
        assert main([*argv, "--model", str(tmp_path / "no-run"), "--src", str(tmp_path / "none.en")]) == 2
        err = capsys.readouterr().err
        assert "none.en" in err and "no-run" not in err and err.count("\n") == 1


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_gives_each_corpus_its_own_run():
    """`make demo` resumes its run, so another corpus or direction must train a run of its own
    (the Bible run, resumed on another corpus, would translate it with the Bible's vocabulary)."""

    def run_dir(*variables: str) -> str:
        out = subprocess.run(["make", "-n", "-C", str(README.parent), "demo", *variables],
                             capture_output=True, text=True, check=True).stdout
        return re.search(r"attnmt train \S+ --out (\S+)", out).group(1)

    assert run_dir() == "runs/demo"
    assert run_dir("CORPUS=corpora/mine/") == "runs/demo-corpora_mine"
    assert run_dir("CORPUS=mine", "SRC=es", "TGT=en") == "runs/demo-mine-es-en"
    assert run_dir("SRC=es", "TGT=en") == "runs/demo-es-en"
    assert run_dir("CORPUS=mine", "RUN=runs/x") == "runs/x"


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_scores_with_a_language_only_if_tgt_is_one():
    """`make demo` passed TGT to `score --lang`, which refuses a suffix that is no language (tgt, of
    attnmt data synthetic) after 11 minutes of training; such a TGT scores with score's default."""
    import os
    import sys

    def lang(*variables: str) -> str:
        env = dict(os.environ, PYTHONPATH=str(README.parent))  # this checkout's attnmt
        out = subprocess.run(["make", "-n", "-C", str(README.parent), "demo", f"PYTHON={sys.executable}",
                              *variables], capture_output=True, text=True, check=True, env=env).stdout
        return re.search(r"attnmt score .* --lang (\S+)$", out, re.M).group(1)

    assert lang() == "es"
    assert lang("CORPUS=data/synthetic", "SRC=src", "TGT=tgt") == "en"
    assert lang("CORPUS=mine", "SRC=es", "TGT=de") == "de"
