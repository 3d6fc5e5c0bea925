"""The command line as a new user meets it (issue 58, item 12): every option explained with its
default in --help, ``attnmt --version``, progress bars on a terminal only, an empty input said
so, and no silent no-ops (a flag that does nothing in its combination is refused or warned of,
by name)."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import pytest

import attnmt
from attnmt.cli.main import build_parser, main

from analysis_fixtures import make_run

class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _parsers(parser: argparse.ArgumentParser, name: str = "attnmt"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}")


def test_every_option_has_help_and_shows_its_default():
    parser = build_parser()
    bare = [f"{name} {a.option_strings[0]}" for name, p in _parsers(parser)
            for a in p._actions if a.option_strings and not a.help]
    assert bare == []
    helps = dict(_parsers(parser))
    translate = " ".join(helps["attnmt translate"].format_help().split())
    for text in ("--batch-size", "(default: 5)", "(default: 32)", "(default: best)", "auto (a GPU"):
        assert text in translate, text
    serve = " ".join(helps["attnmt serve"].format_help().split())
    assert "--max-beam MAX_BEAM largest beam a request may ask for" in serve and "(default: 16)" in serve
    assert "(default: None)" not in translate and "(default: False)" not in translate


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"attnmt {attnmt.__version__}"


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.en"
    path.write_text("the red cat sees a dog\na girl has the old book\n", encoding="utf-8")
    return str(path)


def test_progress_bars_only_on_a_terminal(tiny_run, source, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["translate", "--model", str(tiny_run), "-i", source, "--device", "cpu"]) == 0
    shown = sys.stderr.getvalue()
    assert "translate: " in shown and "/2 [" in shown and "line" in shown
    assert main(["score", "--model", str(tiny_run), "--src", source, "--ref", source, "--per-sentence"]) == 0
    assert "score: " in sys.stderr.getvalue()
    from attnmt.ngram.model import NgramLM

    lm = Path(source).with_suffix(".ngram")
    NgramLM.estimate_text(source, order=2).save(lm)
    assert main(["ngram", "ppl", "--model", str(lm), "--input", source]) == 0
    assert "ngram: " in sys.stderr.getvalue()
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe or a log file: no bar
    assert main(["translate", "--model", str(tiny_run), "-i", source, "--device", "cpu"]) == 0
    assert "translate: " not in sys.stderr.getvalue()
    monkeypatch.setattr(sys, "stderr", Terminal())  # a Python caller on a terminal: no bar either
    attnmt.load(tiny_run, device="cpu").translate(["the red cat sees a dog"])
    assert sys.stderr.getvalue() == ""


def test_an_empty_input_is_said_and_gives_an_empty_output(tiny_run, tmp_path, capsys):
    empty = tmp_path / "empty.en"
    empty.write_bytes(b"")
    out = tmp_path / "out.es"
    assert main(["translate", "--model", str(tiny_run), "-i", str(empty), "-o", str(out), "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert f"attnmt: warning: {empty} is empty: nothing to translate" in err.splitlines()
    assert out.read_bytes() == b""


def test_flags_that_would_do_nothing_are_named(tiny_run, source, capsys):
    def fails(*argv) -> str:
        assert main(["translate", "--model", str(tiny_run), "-i", source, "--device", "cpu", *argv]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("attnmt: error: ")
        return lines[0]

    assert "--beam 5 has no effect with --sample" in fails("--sample", "topk=3", "--beam", "5")
    assert "--temperature needs --sample" in fails("--temperature", "0.5")
    assert "--length-penalty has no effect with --sample" in fails("--sample", "topk=3", "--length-penalty", "0.5")
    assert main(["translate", "--model", str(tiny_run), "-i", source, "--device", "cpu",
                 "--sample", "topk=3", "--seed", "1"]) == 0  # the default beam is not the user's
    assert main(["translate", "--model", str(tiny_run), "-i", source, "--device", "cpu",
                 "--sample", "topk=3", "--beam", "1"]) == 0
    capsys.readouterr()
    model = attnmt.load(tiny_run, device="cpu")
    with pytest.raises(attnmt.errors.UserError, match="beam 4 has no effect with sample"):
        model.translate(["the dog"], sample="topk=2", beam=4)


def test_raw_weights_without_ema_is_a_warning_in_eval_too(tmp_path, capsys):
    run = make_run(tmp_path)
    pairs = tmp_path / "dev"
    (tmp_path / "dev.en").write_text("the dog runs\n", encoding="utf-8")
    (tmp_path / "dev.es").write_text("el perro corre\n", encoding="utf-8")
    assert main(["eval", "--model", str(run), "--input", str(pairs), "--json", "--raw-weights",
                 "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["weights"] == "model.safetensors"
    (line,) = [x for x in captured.err.splitlines() if "EMA" in x]
    assert line.startswith("attnmt: warning: --raw-weights") and "no effect" in line
