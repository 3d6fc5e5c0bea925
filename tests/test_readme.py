"""The README's Python snippet runs as written (on a tiny run at runs/demo), and `attnmt.load`
gives what the commands give."""

from __future__ import annotations

import re
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
