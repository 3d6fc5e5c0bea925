"""``attnmt translate`` as a process ends without the interpreter's teardown (cli/main.py,
``quick_exit``), after its output is complete; called in process it returns as any command."""

import os
import subprocess
import sys

import pytest

from attnmt.cli import main as cli_main


def test_translate_as_a_process_exits_at_once_with_its_output_flushed(tiny_run, tiny_corpus, monkeypatch, capsys):
    src = tiny_corpus.directory / "dev.en"
    exits = []

    def fake_exit(status):  # os._exit would end pytest: record the call and stop the command
        exits.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(os, "_exit", fake_exit)
    with pytest.raises(SystemExit):
        cli_main.main(["translate", "--model", str(tiny_run), "--input", str(src), "--beam", "2"], program=True)
    assert exits == [0]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(src.read_text(encoding="utf-8").splitlines())
    # in process (a library caller, a test) the command returns, and nothing exits
    assert cli_main.main(["translate", "--model", str(tiny_run), "--input", str(src), "--beam", "2"]) == 0
    assert exits == [0] and capsys.readouterr().out.splitlines() == printed
    # an error ends the same way, with its status
    with pytest.raises(SystemExit):
        cli_main.main(["translate", "--model", str(tiny_run), "--input", str(src), "--beam", "0"], program=True)
    assert exits == [0, 2]


def test_a_command_without_quick_exit_returns_as_a_program_too(tiny_corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "_exit", lambda status: pytest.fail("os._exit called"))
    ref = tiny_corpus.directory / "dev.es"
    argv = ["score", "--hyp", str(tmp_path / "missing.txt"), "--ref", str(ref)]
    assert cli_main.main(argv, program=True) == 2
    assert "missing.txt" in capsys.readouterr().err


def test_real_process_writes_every_line_to_a_pipe_and_a_file(tiny_run, tiny_corpus, tmp_path):
    src = tiny_corpus.directory / "dev.en"
    n = len(src.read_text(encoding="utf-8").splitlines())
    out = tmp_path / "hyp.txt"
    base = [sys.executable, "-m", "attnmt", "translate", "--model", str(tiny_run), "--input", str(src), "--beam", "2"]
    to_file = subprocess.run(base + ["--output", str(out)], capture_output=True, text=True)
    assert to_file.returncode == 0 and "Traceback" not in to_file.stderr, to_file.stderr
    piped = subprocess.run(base, capture_output=True, text=True)
    assert piped.returncode == 0 and "Traceback" not in piped.stderr, piped.stderr
    assert len(piped.stdout.splitlines()) == n
    assert out.read_text(encoding="utf-8") == piped.stdout
