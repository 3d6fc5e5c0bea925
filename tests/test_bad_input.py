"""The malformed-input zoo: every command that reads files, over generated bad inputs.

Bad text files (missing, a directory, invalid UTF-8, NUL bytes, UTF-16, an over-long line, empty or
blank), bad configs and ``--set`` values, broken run directories and training logs, broken
ARPA/binary n-gram models, each through every command that takes them. Every case must end with
exit status 2 and exactly one line ``attnmt: error: ...`` on stderr that names the file (or key),
no traceback, nothing on stdout, and no file left behind in its directory.

The commands run in-process (``attnmt.cli.main.main``, stderr captured) on one tiny model trained
once per session (``tiny_run`` in conftest.py); a few cases run the real console script to check
that the process exit status is 2. Configs, ``--set`` and training corpora are in
tests/test_bad_configs.py, n-gram models in tests/test_bad_ngram.py, outputs that cannot or must
not be written in tests/test_bad_outputs.py, resuming and averaging runs in
tests/test_bad_resume.py, the shared runner and bad files in
tests/bad_input_zoo.py; the server's half of the zoo is tests/test_bad_requests.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest


from bad_input_zoo import (BAD_TEXT, EMPTY_TEXT, GOOD_EN, GOOD_ES, assert_fails, good_files,
                           nan_weights, run_cli, run_copy)


# -- untrained Transformer runs for the window and classification analyses -------------------------------------
def _untrained_run(root: Path, task: str) -> Path:
    import torch

    from attnmt.config import Config, apply_overrides, save_config
    from attnmt.data.labels import LabelSet
    from attnmt.data.vocab import WordTokenizer
    from attnmt.models import build_model
    from attnmt.runs.checkpoint import save_checkpoint

    run = root / task
    run.mkdir(parents=True)
    cfg = apply_overrides(Config(), [f"task={task}", "model.type=transformer", "model.layers=1",
                                     "model.hidden=16", "model.heads=2", "model.ff=16",
                                     "model.enc_self_attention=window-add", "data.src=en", "data.tgt=es"])
    src = WordTokenizer.build(GOOD_EN.splitlines(), lang="en")
    src.save(run, "src")
    if task == "classify":
        tgt = LabelSet(["pl", "sg"])
        tgt.save(run)
    else:
        tgt = WordTokenizer.build(GOOD_ES.splitlines(), lang="es")
        tgt.save(run, "tgt")
    save_config(cfg, run / "config.yaml")
    torch.manual_seed(0)
    save_checkpoint(run, 1, build_model(cfg, len(src), len(tgt)), None, best=True)
    return run


@pytest.fixture(scope="module")
def window_run(tmp_path_factory) -> Path:
    return _untrained_run(tmp_path_factory.mktemp("window"), "translate")


@pytest.fixture(scope="module")
def classify_run(tmp_path_factory) -> Path:
    return _untrained_run(tmp_path_factory.mktemp("classify"), "classify")


def _each_weights(run: Path, breaks: Callable[[Path], object]) -> None:
    for weights in (run / "checkpoints").glob("step-*/model.safetensors"):
        breaks(weights)


def _best(run: Path) -> Path:
    return run / "checkpoints" / (run / "checkpoints" / "BEST").read_text().strip()


def _double_hidden(run: Path) -> None:
    import yaml

    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["model"]["hidden"] *= 2
    if "embed" in cfg["model"]:  # an LSTM's (a Transformer's config has no embed)
        cfg["model"]["embed"] *= 2
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))


def _int_weights(weights: Path) -> None:
    """Every tensor as int64: load_state_dict would cast them (whole numbers) without a word."""
    import torch
    from safetensors.torch import load_file, save_file

    save_file({k: v.to(torch.int64) for k, v in load_file(weights).items()}, weights)


def _set_config(run: Path, old: str, new: str) -> None:
    cfg = run / "config.yaml"
    text = cfg.read_text()
    assert old in text, (old, text)
    cfg.write_text(text.replace(old, new))


# A broken run directory: make(copy of tiny_run) breaks it; the error names RUN/shown + words.
WEIGHTS = "checkpoints/step-*/model.safetensors"  # every checkpoint's weights
BAD_RUNS = [
    ("missing", lambda r: shutil.rmtree(r), "", ("run directory",)),
    ("a-file", lambda r: (shutil.rmtree(r), r.write_text("x")), "", ()),
    ("empty-dir", lambda r: (shutil.rmtree(r), r.mkdir()), "", ("no config.yaml",)),
    ("config-is-dir", lambda r: ((r / "config.yaml").unlink(), (r / "config.yaml").mkdir()),
     "config.yaml", ("directory",)),
    ("config-malformed", lambda r: (r / "config.yaml").write_text("model: [1,\n"), "config.yaml",
     ("malformed YAML",)),
    ("config-not-utf8", lambda r: (r / "config.yaml").write_bytes(b"model:\n  type: \xff\n"),
     "config.yaml", ("UTF-8",)),
    ("config-unknown-key", lambda r: _set_config(r, "model:", "model:\n  bogus: 1"), "config.yaml",
     ("model.bogus",)),
    ("junk-spm", lambda r: (r / "src.spm.model").write_bytes(b"\x00junk" * 10), "src.spm.model",
     ("sentencepiece",)),
    ("spm-is-dir", lambda r: (r / "tgt.spm.model").mkdir(), "tgt.spm.model", ()),
    ("vocab-no-header", lambda r: (r / "src.vocab").write_text("the\ncat\n"), "src.vocab", ("#word",)),
    ("vocab-not-utf8", lambda r: (r / "tgt.vocab").write_bytes(b"#word es\n\xff\n"), "tgt.vocab",
     ("UTF-8",)),
    ("vocab-missing", lambda r: (r / "tgt.vocab").unlink(), "", ("tgt tokenizer",)),
    ("no-checkpoints", lambda r: shutil.rmtree(r / "checkpoints"), "", ("checkpoint",)),
    ("pointers-dangling", lambda r: [(r / "checkpoints" / n).write_text("step-99999999\n")
                                     for n in ("BEST", "LAST")], "", ("no checkpoint",)),
    ("pointers-junk", lambda r: [(r / "checkpoints" / n).write_bytes(b"\xff\x00../../etc\n")
                                 for n in ("BEST", "LAST")], "", ("no checkpoint",)),
    ("weights-missing", lambda r: _each_weights(r, lambda w: w.unlink()), WEIGHTS, ()),
    ("weights-junk", lambda r: _each_weights(r, lambda w: w.write_bytes(b"\x10" + b"\x00" * 7 + b"{x")),
     WEIGHTS, ("safetensors",)),
    ("weights-empty", lambda r: _each_weights(r, lambda w: w.write_bytes(b"")), WEIGHTS, ()),
    ("weights-dir", lambda r: _each_weights(r, lambda w: (w.unlink(), w.mkdir())), WEIGHTS, ()),
    ("weights-nan", lambda r: _each_weights(r, nan_weights), "", ("NaN",)),
    ("weights-int", lambda r: _each_weights(r, _int_weights), "", ("weights do not fit", "int64")),
    ("weights-misfit", lambda r: _double_hidden(r), "", ("weights do not fit",)),
    ("vocab-misfit", lambda r: (r / "tgt.vocab").write_text((r / "tgt.vocab").read_text() + "extra\n"),
     "tgt.vocab", ("entries", "the weights'")),
]

# -- text inputs of every command -------------------------------------------------------------------------
@dataclass
class Slot:
    """One text-file argument of one command: ``argv(bad, good, run, arpa)`` puts ``bad`` there."""

    name: str
    argv: Callable[[Path, dict, Path, Path], list[str]]
    empty_fails: bool = True  # an empty/blank file is an error here (not an empty result)
    stdin: bool = False  # the bad file's bytes go to stdin instead of a path
    words: tuple[str, ...] = ()
    stdout_ok: bool = False
    skip: tuple[str, ...] = ()  # kinds that are fine here (e.g. blank hypotheses score BLEU 0)


# n-gram text is read as lmplz reads it: NUL separates words, a line may be of any length
_LMPLZ = ("nul-bytes", "overlong-line")

TEXT_SLOTS = [
    Slot("translate --input", lambda b, g, r, a: ["translate", "--model", str(r), "-i", str(b)],
         empty_fails=False),
    Slot("translate stdin", lambda b, g, r, a: ["translate", "--model", str(r)], empty_fails=False,
         stdin=True),
    Slot("translate --dict", lambda b, g, r, a: ["translate", "--model", str(r), "-i", str(g["en"]),
                                                 "--replace-unk", "--dict", str(b)]),
    Slot("score --hyp", lambda b, g, r, a: ["score", "--hyp", str(b), "--ref", str(g["es"])],
         skip=("blank",)),
    Slot("score --ref", lambda b, g, r, a: ["score", "--hyp", str(g["es"]), "--ref", str(b)]),
    Slot("score --model --src", lambda b, g, r, a: ["score", "--model", str(r), "--src", str(b),
                                                    "--ref", str(g["es"])]),
    Slot("score --model --ref", lambda b, g, r, a: ["score", "--model", str(r), "--src", str(g["en"]),
                                                    "--ref", str(b)]),
    Slot("align --src", lambda b, g, r, a: ["align", "--model", str(r), "--src", str(b), "--tgt",
                                            str(g["es"])]),
    Slot("align --tgt", lambda b, g, r, a: ["align", "--model", str(r), "--src", str(g["en"]),
                                            "--tgt", str(b)]),
    Slot("align --gold", lambda b, g, r, a: ["align", "--model", str(r), "--src", str(g["en"]),
                                             "--tgt", str(g["es"]), "--gold", str(b)]),
    Slot("aer --alignments", lambda b, g, r, a: ["aer", "--alignments", str(b), "--gold",
                                                 str(g["align"])], skip=("blank",)),
    Slot("aer --gold", lambda b, g, r, a: ["aer", "--alignments", str(g["align"]), "--gold", str(b)]),
    Slot("analyse lengths --src", lambda b, g, r, a: ["analyse", "lengths", "--src", str(b), "--ref",
                                                      str(g["es"]), "--hyp", str(g["es"]), "--out",
                                                      str(g["en"].parent / "lengths")]),
    Slot("analyse lengths --ref", lambda b, g, r, a: ["analyse", "lengths", "--src", str(g["en"]),
                                                      "--ref", str(b), "--hyp", str(g["es"]), "--out",
                                                      str(g["en"].parent / "lengths")]),
    Slot("analyse lengths --hyp", lambda b, g, r, a: ["analyse", "lengths", "--src", str(g["en"]),
                                                      "--ref", str(g["es"]), "--hyp", str(b), "--out",
                                                      str(g["en"].parent / "lengths")], skip=("blank",)),
    Slot("analyse window-stats --input", lambda b, g, r, a: ["analyse", "window-stats", "--model",
                                                             str(g["window"]), "--input", str(b)]),
    Slot("analyse classify --input", lambda b, g, r, a: ["analyse", "classify", "--model",
                                                         str(g["classify"]), "--input", _as_tsv(b)]),
    Slot("eval --src", lambda b, g, r, a: ["eval", "--model", str(r), "--src", str(b), "--input",
                                           str(g["es"])]),
    Slot("eval --src --input", lambda b, g, r, a: ["eval", "--model", str(r), "--src", str(g["en"]),
                                                   "--input", str(b)]),
    Slot("eval --input (tsv)", lambda b, g, r, a: ["eval", "--model", str(r), "--input",
                                                   _as_tsv(b)]),
    Slot("eval --tune-on (tsv)", lambda b, g, r, a: ["eval", "--model", str(r), "--input",
                                                     str(g["prefix"]), "--alpha", "0,0", "--tune-on",
                                                     _as_tsv(b)]),
    Slot("ngram build --input", lambda b, g, r, a: ["ngram", "build", "--order", "2", "--input",
                                                    str(b), "--arpa", str(g["en"].parent / "o.arpa")],
         skip=_LMPLZ),
    Slot("ngram build --vocab-from --input", lambda b, g, r, a: [
        "ngram", "build", "--order", "2", "--input", str(b), "--vocab-from", str(r), "--binary",
        str(g["en"].parent / "o.bin")], skip=_LMPLZ),
    Slot("ngram ppl --input", lambda b, g, r, a: ["ngram", "ppl", "--model", str(a), "--input", str(b)],
         skip=_LMPLZ),
    Slot("ngram query stdin", lambda b, g, r, a: ["ngram", "query", "--model", str(a)], stdin=True,
         empty_fails=False, stdout_ok=True),  # KenLM-style streaming: lines before the bad one print
    Slot("data domains --add", lambda b, g, r, a: ["data", "domains", "--out",
                                                   str(g["en"].parent / "dom"), "--domains", "none",
                                                   "--add", f"mine={b}"]),
]


def _as_tsv(path: Path) -> str:
    """eval reads PREFIX.SRC/.TGT or a .tsv: give the bad file a .tsv name."""
    tsv = path.with_name(path.name + ".tsv")
    if path.exists() or path.is_symlink():
        path.rename(tsv)
    return str(tsv)


def _text_cases():
    for slot in TEXT_SLOTS:
        kinds = BAD_TEXT + (EMPTY_TEXT if slot.empty_fails else [])
        for bad in kinds:
            if (slot.stdin and bad.name in ("missing", "directory")) or bad.name in slot.skip:
                continue
            yield pytest.param(slot, bad, id=f"{slot.name}-{bad.name}")


@pytest.mark.parametrize("slot,bad", list(_text_cases()))
def test_bad_text_file(slot, bad, tmp_path, tiny_run, tiny_arpa, window_run, classify_run):
    good = good_files(tmp_path)
    good["window"], good["classify"] = window_run, classify_run
    path = tmp_path / f"bad-{bad.name}.txt"
    bad.make(path)
    stdin = None
    if slot.stdin:
        stdin, path = path.read_bytes(), Path("<stdin>")
    argv = slot.argv(path, good, tiny_run, tiny_arpa)
    shown = next((a for a in argv if a.endswith(path.name + ".tsv")), str(path))
    where = f"{shown}:{bad.line}:" if bad.line and not slot.stdin else shown
    if slot.stdin and bad.line:
        where = f"<stdin>:{bad.line}:"
    assert_fails(tmp_path, argv, (where, *bad.words, *slot.words), stdin, slot.stdout_ok)

# -- run directories --------------------------------------------------------------------------------------
RUN_SLOTS = [
    ("translate", "lstm", lambda r, g, o: ["translate", "--model", str(r), "-i", str(g["en"]), "-o",
                                           str(o / "hyp")]),
    ("translate ensemble", "lstm", lambda r, g, o: ["translate", "--model", str(g["run"]), "--model",
                                                    str(r), "-i", str(g["en"])]),
    ("score --model", "lstm", lambda r, g, o: ["score", "--model", str(r), "--src", str(g["en"]), "--ref",
                                               str(g["es"])]),
    ("align", "lstm", lambda r, g, o: ["align", "--model", str(r), "--src", str(g["en"]), "--tgt",
                                       str(g["es"]), "-o", str(o / "al")]),
    ("average", "lstm", lambda r, g, o: ["average", "--model", str(r), "--last", "1", "--out",
                                         str(o / "avg")]),
    ("analyse heatmap", "lstm", lambda r, g, o: ["analyse", "heatmap", "--model", str(r), "--input",
                                                 "a cat", "--out", str(o / "h.png")]),
    ("analyse windows", "window", lambda r, g, o: ["analyse", "windows", "--model", str(r), "--input",
                                                   "a cat", "--out", str(o / "win")]),
    ("analyse window-stats", "window", lambda r, g, o: ["analyse", "window-stats", "--model", str(r),
                                                        "--input", str(g["en"])]),
    ("analyse classify", "classify", lambda r, g, o: ["analyse", "classify", "--model", str(r),
                                                      "--input", str(g["en"]) + ".tsv"]),
    ("eval", "lstm", lambda r, g, o: ["eval", "--model", str(r), "--input", str(g["prefix"])]),
    ("ngram build --vocab-from", "lstm", lambda r, g, o: ["ngram", "build", "--input", str(g["es"]),
                                                          "--vocab-from", str(r), "--arpa",
                                                          str(o / "x.arpa")]),
    ("serve", "lstm", lambda r, g, o: ["serve", "--model", str(r), "--port", "0"]),
]
# ngram build --vocab-from reads only the target tokenizer; a classifier has labels, no tgt.vocab
_SKIP_RUNS = {
    "ngram build --vocab-from": {"weights-missing", "weights-junk", "weights-empty", "weights-dir",
                                 "weights-nan", "weights-int", "weights-misfit", "vocab-misfit", "no-checkpoints", "pointers-dangling",
                                 "pointers-junk",
                                 "config-unknown-key", "junk-spm", "vocab-no-header", "empty-dir",
                                 "config-is-dir", "config-malformed", "config-not-utf8"},
    "analyse classify": {"vocab-not-utf8", "vocab-missing", "vocab-misfit", "spm-is-dir"},
    # averaging lists the step directories; it needs no LAST/BEST pointer
    "average": {"pointers-dangling", "pointers-junk"},
}


def _run_cases():
    for slot, kind, argv in RUN_SLOTS:
        for name, make, shown, words in BAD_RUNS:
            if name not in _SKIP_RUNS.get(slot, ()):
                yield pytest.param(kind, argv, make, shown, words, id=f"{slot}-{name}")


@pytest.mark.parametrize("kind,argv,make,shown,words", list(_run_cases()))
def test_bad_run_directory(kind, argv, make, shown, words, tmp_path, tiny_run, window_run, classify_run):
    good = good_files(tmp_path)
    (tmp_path / "good.en.tsv").write_text("a cat\tsg\n", encoding="utf-8")
    good["run"] = tiny_run
    run = run_copy({"lstm": tiny_run, "window": window_run, "classify": classify_run}[kind],
                    tmp_path / "run")
    out = tmp_path / "out"
    out.mkdir()
    where = str(run / shown) if shown else str(run)
    if shown == WEIGHTS:
        where, words = str(run / "checkpoints" / "step-"), (*words, "model.safetensors")
    make(run)
    assert_fails(tmp_path, argv(run, good, out), (where, *words))


# A broken training log (log.jsonl) for analyse curves: (name, bytes, the line named, words).
_LOG_OK = b'{"event": "start", "params": 1}\n{"event": "train", "step": 1, "ppl": 9.5}\n'
BAD_LOGS = [
    ("truncated-last-line", _LOG_OK + b'{"event": "valid", "step": 1, "pp', 3, ("not a JSON record",)),
    ("garbled-line", _LOG_OK + b'{"event": "valid", step=1 ppl=3}\n' + _LOG_OK, 3, ("not a JSON record",)),
    ("nested-too-deep", _LOG_OK + b"[" * 100_000 + b"\n", 3, ("not a JSON record",)),
    ("not-an-object", b'[1, 2]\n' + _LOG_OK, 1, ("JSON object",)),
    ("ppl-not-a-number", b'{"event": "valid", "step": 1, "ppl": "low"}\n', 1, ("numbers",)),
    ("step-infinite", b'{"event": "valid", "step": Infinity, "ppl": 3.0}\n', 1, ("numbers",)),
    ("invalid-utf8", _LOG_OK + b'{"event": "valid", "step": 2, "ppl": \xff}\n', 3, ("invalid UTF-8",)),
    ("nul-bytes", _LOG_OK + b'{"event": "valid",\x00 "step": 2}\n', 3, ("NUL byte",)),
]


@pytest.mark.parametrize("name,data,line,words", BAD_LOGS, ids=[b[0] for b in BAD_LOGS])
def test_bad_training_log(name, data, line, words, tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    for run, text in ((good, _LOG_OK), (bad, data)):
        run.mkdir()
        (run / "log.jsonl").write_bytes(text)
    argv = ["analyse", "curves", "--run", str(good), "--run", str(bad), "--out", str(tmp_path / "c.png"),
            "--csv", str(tmp_path / "c.csv")]
    assert_fails(tmp_path, argv, (f"{bad / 'log.jsonl'}:{line}:", *words))


def test_checkpoint_names_are_checked(tmp_path, tiny_run):
    good = good_files(tmp_path)
    for name in ("step-nope", "../../etc", "LAST", ""):
        assert_fails(tmp_path, ["translate", "--model", str(tiny_run), "--checkpoint", name, "-i",
                                str(good["en"])], (str(tiny_run), "checkpoint"))


# -- the real console: exit status 2 and one line ---------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["score", "--hyp", "{d}", "--ref", "{d}"],
    ["ngram", "ppl", "--model", "{d}/none.arpa", "--input", "{d}"],
    ["train", "{d}", "--out", "{d}/run"],
], ids=["score-dir", "ngram-missing", "train-config-dir"])
def test_real_process_status_is_2(argv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnmt", *[a.format(d=tmp_path) for a in argv]],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnmt: error: ") and str(tmp_path) in lines[0]
    assert proc.stdout == ""


def test_ngram_query_binary_stdin_real_process(tmp_path, tiny_arpa):
    proc = subprocess.run([sys.executable, "-m", "attnmt", "ngram", "query", "--model", str(tiny_arpa)],
                          input=b"el gato\n\xff\xfe\x00\x01\n", capture_output=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.decode().strip().splitlines() == [proc.stderr.decode().strip()]
    assert b"<stdin>:2:" in proc.stderr


# -- numeric flags out of range: refused before any work -------------------------------------------------------
NUMERIC_FLAGS = [
    (lambda r, g: ["eval", "--model", str(r), "-i", str(g["prefix"]), "--alpha", "nan"], ("--alpha", "finite")),
    (lambda r, g: ["eval", "--model", str(r), "-i", str(g["prefix"]), "--lambda", "0.5,inf"], ("--lambda", "finite")),
    (lambda r, g: ["eval", "--model", str(r), "-i", str(g["prefix"]), "--batch-tokens", "0"], ("--batch-tokens",)),
    (lambda r, g: ["align", "--model", str(r), "--src", str(g["en"]), "--tgt", str(g["es"]), "--batch-size", "0"],
     ("--batch-size",)),
    (lambda r, g: ["analyse", "heatmap", "--model", str(r), "--input", "a cat", "--out", str(g["en"].parent / "h.png"),
                   "--beam", "0"], ("--beam",)),
    (lambda r, g: ["translate", "--model", str(r), "-i", str(g["en"]), "--max-len-ratio", "nan"], ("--max-len-ratio",)),
    (lambda r, g: ["translate", "--model", str(r), "-i", str(g["en"]), "--length-penalty", "inf"], ("--length-penalty",)),
    (lambda r, g: ["translate", "--model", str(r), "-i", str(g["en"]), "--workers", "-1"], ("--workers",)),
    (lambda r, g: ["average", "--model", str(r), "--last", "0", "--out", str(g["en"].parent / "avg")], ("--last",)),
    (lambda r, g: ["ngram", "build", "--order", "0", "--input", str(g["es"]), "--arpa", str(g["en"].parent / "x.arpa")],
     ("--order",)),
]


@pytest.mark.parametrize("argv,words", NUMERIC_FLAGS, ids=[" ".join(w) for _, w in NUMERIC_FLAGS])
def test_numeric_flag_out_of_range(argv, words, tmp_path, tiny_run):
    assert_fails(tmp_path, argv(tiny_run, good_files(tmp_path)), words)


# -- flag values a command cannot use: refused, not taken as something else -------------------------------------
def _score(lang):
    return lambda g: ["score", "--hyp", str(g["es"]), "--ref", str(g["es"]), "--lang", lang]


def _build(memory):
    return lambda g: ["ngram", "build", "--order", "2", "--input", str(g["es"]), "--arpa",
                      str(g["en"].parent / "x.arpa"), f"--memory={memory}"]  # = : -1G is no flag


# score --lang took any string (the Moses tokenizer treats an unknown code as English); --memory took 500%
UNUSABLE_VALUES = [
    ("--lang=xx", _score("xx"), ("--lang 'xx'", "Moses", " es ")),
    ("--lang=sp", _score("sp"), ("--lang 'sp'",)),
    ("--lang=EN", _score("EN"), ("--lang 'EN'",)),
    ("--lang=spanish", _score("spanish"), ("--lang 'spanish'",)),
    ("--lang=", _score(""), ("--lang ''",)),
    ("--memory=500%", _build("500%"), ("--memory 500%", "at most 100%")),
    ("--memory=100.5%", _build("100.5%"), ("--memory 100.5%", "at most 100%")),
    ("--memory=0%", _build("0%"), ("--memory", "too small")),
    ("--memory=0", _build("0"), ("--memory", "too small")),
    ("--memory=-1G", _build("-1G"), ("--memory", "bad memory size '-1G'")),
    ("--memory=-50%", _build("-50%"), ("--memory", "bad memory size '-50%'")),
    ("--memory=4X", _build("4X"), ("--memory", "bad memory size '4X'")),
    ("--memory=1e9", _build("1e9"), ("--memory", "bad memory size '1e9'")),
    ("--memory=nan", _build("nan"), ("--memory", "bad memory size 'nan'")),
    ("--memory=", _build(""), ("--memory", "bad memory size ''")),
]


@pytest.mark.parametrize("value,argv,words", UNUSABLE_VALUES, ids=[v for v, _, _ in UNUSABLE_VALUES])
def test_flag_value_the_command_cannot_use(value, argv, words, tmp_path):
    assert_fails(tmp_path, argv(good_files(tmp_path)), words)


def test_usable_flag_values_still_work(tmp_path):
    good = good_files(tmp_path)
    for lang in ("en", "es", "de", "zh", "ja"):
        status, out, err = run_cli(_score(lang)(good))
        assert status == 0 and out.startswith("bleu=100.0"), (lang, out, err)
    for memory in ("100%", "0.5%", "64K", "1G"):
        status, _, err = run_cli(_build(memory)(good))
        assert status == 0 and (tmp_path / "x.arpa").is_file(), (memory, err)
        (tmp_path / "x.arpa").unlink()


# -- wrong successes: each is now an error or a clearly labelled empty result ------------------------------
def test_translate_output_cut_at_the_cap_is_an_error(tmp_path, tiny_run):
    good = good_files(tmp_path)
    out = tmp_path / "hyp"
    assert_fails(tmp_path, ["translate", "--model", str(tiny_run), "-i", str(good["en"]), "-o", str(out),
                            "--max-len-cap", "2"], (str(good["en"]), "line 1", "--max-len-cap 2"))
    assert_fails(tmp_path, ["translate", "--model", str(tiny_run), "--max-len-cap", "2"],
                 ("<stdin>", "line 1"), stdin=GOOD_EN.encode())


def test_a_byte_order_mark_is_no_token(tmp_path):
    from attnmt.data.corpus import read_lines
    from attnmt.ngram.corpus import read_lines as ngram_lines, read_text_corpus

    f = tmp_path / "bom.txt"
    f.write_bytes(b"\xef\xbb\xbfthe cat\nthe dog\n")
    assert read_lines(f) == ["the cat", "the dog"]
    assert [line for _, line in ngram_lines(f)] == ["the cat", "the dog"]
    vocab, _ = read_text_corpus(f)
    assert "\ufeffthe" not in vocab and "the" in vocab


def test_empty_translation_input_is_an_empty_result(tmp_path, tiny_run):
    empty = tmp_path / "empty.en"
    empty.write_text("")
    status, out, err = run_cli(["translate", "--model", str(tiny_run), "-i", str(empty),
                                "-o", str(tmp_path / "hyp")])
    assert status == 0 and (tmp_path / "hyp").read_text() == ""


def test_lengths_table_labels_empty_buckets(tmp_path):
    good = good_files(tmp_path)
    status, out, err = run_cli(["analyse", "lengths", "--src", str(good["en"]), "--ref", str(good["es"]),
                                "--hyp", str(good["es"]), "--out", str(tmp_path / "len")])
    assert status == 0, err
    csv = (tmp_path / "len" / "lengths.csv").read_text()
    assert "nan" not in csv.lower() and "\n10-20,0,,\n" in csv
    assert "| 10-20 | 0 | – | – |" in out


def test_align_and_aer_print_valid_json(tmp_path, tiny_run):
    import json

    good = good_files(tmp_path)
    status, out, err = run_cli(["align", "--model", str(tiny_run), "--src", str(good["en"]), "--tgt",
                                str(good["es"])])
    assert status == 0, err
    summary = json.loads(err.split("attnmt: align ", 1)[1])
    assert summary["sentences"] == 3 and isinstance(summary["entropy"], float)
    status, out, err = run_cli(["aer", "--alignments", str(good["align"]), "--gold", str(good["align"]),
                                "--json"])
    assert status == 0 and json.loads(out)["aer"] == 0.0


def test_align_gold_links_outside_the_sentences(tmp_path, tiny_run):
    """A gold file of another corpus (or shifted by a line) scored as AER 1.0, exit 0."""
    good = good_files(tmp_path)
    gold = tmp_path / "gold.align"
    gold.write_text("0-0 5-5\n0-0 1?7\n0-0\n", encoding="utf-8")  # line 2 has 6 target words
    assert_fails(tmp_path, ["align", "--model", str(tiny_run), "--src", str(good["en"]), "--tgt",
                            str(good["es"]), "--gold", str(gold), "-o", str(tmp_path / "out.align")],
                 (f"{gold}:2:", "link 1-7", "6 target words"))


def test_a_ragged_tsv_is_an_error_not_other_columns(tmp_path, tiny_run):
    """A TSV line with more columns than the first (a tab inside a sentence) would have its last
    two fields read as source and target: a perplexity of the wrong text, exit 0."""
    tsv = tmp_path / "x.tsv"
    tsv.write_text("the cat\tel gato\n\nthe dog\tel perro\textra\n", encoding="utf-8")
    assert_fails(tmp_path, ["eval", "--model", str(tiny_run), "--input", str(tsv)],
                 (f"{tsv}:3:", "3 tab-separated columns, line 1 has 2"))
    tsv.write_text("k1\tthe cat\tel gato\nk2\tthe dog\tel perro\n", encoding="utf-8")
    status, out, err = run_cli(["eval", "--model", str(tiny_run), "--input", str(tsv), "--json"])
    assert status == 0, err  # key<TAB>src<TAB>tgt on every line is fine


# -- classification inputs: labels and group columns named by file and line ------------------------------------
def test_classify_label_and_group_column_errors(tmp_path, classify_run, tiny_run):
    tsv = tmp_path / "x.tsv"
    run = ["analyse", "classify", "--model", str(classify_run), "--input", str(tsv)]
    tsv.write_text("a cat\tsg\t0\nthe cats\tplural\t1\n", encoding="utf-8")
    assert_fails(tmp_path, run, (f"{tsv}:2:", "'plural'"))
    (tmp_path / "x.en").write_text("a cat\nthe cats\n", encoding="utf-8")
    (tmp_path / "x.es").write_text("sg\nzz\n", encoding="utf-8")  # the label file is named
    assert_fails(tmp_path, run[:-1] + [str(tmp_path / "x")], (f"{tmp_path / 'x.es'}:2:", "'zz'"))
    # a line without the group column would drop out of the per-group accuracies, exit 0
    tsv.write_text("a cat\tsg\t0\nthe cats\tpl\n", encoding="utf-8")
    assert_fails(tmp_path, run, (f"{tsv}:2:", "no column 2", "line 1 has one"))
    tsv.write_text("a cat\tsg\t0\nthe cats\tpl\t1\n", encoding="utf-8")
    for column, words in (("7", ("no column 7",)), ("1", ("--group-column", "label")),
                          ("-1", ("--group-column",))):
        assert_fails(tmp_path, run + ["--group-column", column], words)
    status, out, err = run_cli(run + ["--json"])
    assert status == 0 and set(json.loads(out)["by_group"]) == {"0", "1"}, err
    tsv.write_text("a cat\tsg\nthe cats\tpl\n", encoding="utf-8")  # no group column: no groups
    status, out, err = run_cli(run + ["--json"])
    assert status == 0 and json.loads(out)["by_group"] == {}, err
    assert_fails(tmp_path, ["analyse", "classify", "--model", str(tiny_run), "--input", str(tsv)],
                 (str(tiny_run), "not a classification run"))  # was a TypeError traceback


def test_classify_training_dev_label_names_file_and_line(tmp_path):
    (tmp_path / "train.tsv").write_text("a cat\tsg\nthe cats\tpl\n" * 4, encoding="utf-8")
    (tmp_path / "dev.tsv").write_text("a dog\tsg\n\nthe dogs\tplural\n", encoding="utf-8")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"task: classify\ndata: {{train: {tmp_path}/train.tsv, dev: {tmp_path}/dev.tsv, "
                   "tokenizer: word}\nmodel: {type: transformer, layers: 1, hidden: 8, heads: 2, ff: 8}\n"
                   "train: {device: cpu, threads: 1, max_steps: 1}\n", encoding="utf-8")
    assert_fails(tmp_path, ["train", str(cfg), "--out", str(tmp_path / "run")],
                 (f"{tmp_path / 'dev.tsv'}:3:", "'plural'"))


# -- figures of one sentence: an empty or ignored --target --------------------------------------------------------
def test_heatmap_and_windows_target_problems(tmp_path, tiny_run, window_run, classify_run, monkeypatch):
    png = str(tmp_path / "h.png")
    for target in ("", "  "):  # were ValueError tracebacks (a plot of no rows)
        assert_fails(tmp_path, ["analyse", "heatmap", "--model", str(tiny_run), "--input", "a cat",
                                "--target", target, "--out", png, "--csv", str(tmp_path / "h.csv")],
                     ("--target is empty",))
        assert_fails(tmp_path, ["analyse", "windows", "--model", str(window_run), "--input", "a cat",
                                "--target", target, "--out", str(tmp_path / "win")], ("--target is empty",))
    # a classifier has no output to force: --target was ignored, exit 0
    assert_fails(tmp_path, ["analyse", "windows", "--model", str(classify_run), "--input", "a cat",
                            "--target", "x", "--out", str(tmp_path / "win")], ("--target", "classify"))
    from attnmt.decode.translate import Translation, Translator

    monkeypatch.setattr(Translator, "translate",
                        lambda self, lines, **kw: [[Translation("", 0.0, ["a", "cat"], [])] for _ in lines])
    assert_fails(tmp_path, ["analyse", "heatmap", "--model", str(tiny_run), "--input", "a cat", "--out", png],
                 (str(tiny_run), "translates --input to nothing"))


# -- flags that contradict or would be silently unused: refused before any work ----------------------------------
CONFLICTING_FLAGS = [
    (lambda r, g: ["translate", "--model", str(r), "-i", str(g["en"]), "--unk-timing", "input"],
     ("--unk-timing needs --replace-unk",)),
    (lambda r, g: ["score", "--hyp", str(g["es"]), "--ref", str(g["es"]), "--src", str(g["en"])],
     ("--src needs --model",)),
    (lambda r, g: ["score", "--model", str(r), "--src", str(g["en"]), "--ref", str(g["es"]), "--lang", "es"],
     ("--lang is for the BLEU of translations",)),
    (lambda r, g: ["score", "--hyp", str(g["es"]), "--ref", str(g["es"]), "--model", str(r), "--src",
                   str(g["en"])], ("--hyp", "--model", "exclude")),
    (lambda r, g: ["ngram", "build", "--order", "2", "--prune", "0", "0", "1", "--input", str(g["es"]),
                   "--arpa", str(g["en"].parent / "x.arpa")], ("--prune gives 3 thresholds", "2-gram")),
]


@pytest.mark.parametrize("argv,words", CONFLICTING_FLAGS, ids=[" ".join(w) for _, w in CONFLICTING_FLAGS])
def test_conflicting_flags(argv, words, tmp_path, tiny_run):
    assert_fails(tmp_path, argv(tiny_run, good_files(tmp_path)), words)
