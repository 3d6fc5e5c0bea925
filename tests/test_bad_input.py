"""The malformed-input zoo: every command that reads files, over generated bad inputs.

Bad text files (missing, a directory, invalid UTF-8, NUL bytes, UTF-16, an over-long line, empty or
blank), bad configs and ``--set`` values, broken run directories and training logs, broken
ARPA/binary n-gram models and outputs that cannot or must not be written, each through every
command that takes them. Every case must end with exit status 2 and exactly one line
``attnmt: error: ...`` on stderr that names the file (or key), no traceback, nothing on stdout, and
no file left behind in its directory.

The commands run in-process (``attnmt.cli.main.main``, stderr captured) on one tiny model trained
once per session (``tiny_run`` in conftest.py); a few cases run the real console script to check
that the process exit status is 2. The server's half of the zoo is tests/test_bad_requests.py.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from attnmt.cli.main import main

GOOD_EN = "the red cat sees a dog\na girl has the old book\nthe boy wants a table\n"
GOOD_ES = "el gato rojo ve un perro\nuna niña tiene el libro viejo\nel niño quiere una mesa\n"


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


# -- the runner ---------------------------------------------------------------------------------------
def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def run_cli(argv: list[str], stdin: bytes | None = None) -> tuple[int, str, str]:
    """main(argv) in this process with its own stdin; returns (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    sys.stdout, sys.stderr = out, err
    try:
        status = main(argv)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return status, out.getvalue(), err.getvalue()


def assert_fails(root: Path, argv: list[str], words: tuple[str, ...], stdin: bytes | None = None,
                 stdout_ok: bool = False) -> str:
    """The command fails as a user error: status 2, one line naming ``words``, no traceback, no
    output, nothing new under ``root``."""
    before = _listing(root)
    status, out, err = run_cli(argv, stdin)
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert status == 2, (status, err)
    assert len(lines) == 1 and lines[0].startswith("attnmt: error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert stdout_ok or out == "", out
    assert _listing(root) == before, sorted(_listing(root) ^ before)
    return lines[0]


# -- generated bad files --------------------------------------------------------------------------------
@dataclass
class Bad:
    """A way for a file to be wrong: ``make(path)`` creates it (or not); the error must contain
    the path and ``words``."""

    name: str
    make: Callable[[Path], None]
    words: tuple[str, ...] = ()
    line: int | None = None  # the error must say path:line


def _write(data: bytes) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(data)


BAD_TEXT = [
    Bad("missing", lambda p: None, ("not found",)),
    Bad("directory", lambda p: p.mkdir(), ("directory",)),
    Bad("invalid-utf8", _write(b"a b\nc d\n\xc3\x28 e\n"), ("invalid UTF-8",), 3),
    Bad("latin1", _write("a b\nniño\n".encode("latin-1")), ("invalid UTF-8",), 2),
    Bad("nul-bytes", _write(b"a b\nc\x00d\n"), ("NUL byte",), 2),
    Bad("utf16", _write("a b\nc d\n".encode("utf-16")), ("",), 1),
    Bad("binary", _write(bytes(range(256)) * 4), ("",)),
    Bad("overlong-line", _write(b"a\n" + b"x" * 1_000_001 + b"\n"), ("limit",), 2),
]
EMPTY_TEXT = [Bad("empty", _write(b"")), Bad("blank", _write(b"\n  \n\t\n"))]


def _run_copy(tiny_run: Path, dest: Path) -> Path:
    shutil.copytree(tiny_run, dest)
    return dest


def _each_weights(run: Path, breaks: Callable[[Path], object]) -> None:
    for weights in (run / "checkpoints").glob("step-*/model.safetensors"):
        breaks(weights)


def _best(run: Path) -> Path:
    return run / "checkpoints" / (run / "checkpoints" / "BEST").read_text().strip()


def _double_hidden(run: Path) -> None:
    import yaml

    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["model"]["hidden"] *= 2
    cfg["model"]["embed"] *= 2
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))


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
    ("weights-misfit", lambda r: _double_hidden(r), "", ("weights do not fit",)),
    ("vocab-misfit", lambda r: (r / "tgt.vocab").write_text((r / "tgt.vocab").read_text() + "extra\n"),
     "", ("weights do not fit",)),
]

BAD_CONFIGS = [
    # (name, YAML text or bytes, words: the file name plus these)
    ("not-utf8", b"model:\n  type: \xff\n", ("UTF-8",)),
    ("malformed", "model:\n  layers: [1,\n", ("malformed YAML",)),
    ("tab-indent", "model:\n\tlayers: 1\n", ("malformed YAML",)),
    ("a-list", "- data\n- model\n", ("mapping",)),
    ("a-string", "hello\n", ("mapping",)),
    ("unknown-section", "bogus: 1\n", ("unknown section 'bogus'",)),
    ("unknown-key", "model:\n  hiddn: 3\n", ("model.hiddn",)),
    ("section-not-mapping", "model: 3\n", ("'model' must be a mapping",)),
    ("bad-task", "task: dance\n", ("task",)),
    ("wrong-type-int", "model:\n  layers: two\n", ("model.layers", "expected int")),
    ("wrong-type-bool", "model:\n  input_feed: maybe\n", ("model.input_feed",)),
    ("float-for-int", "model:\n  layers: 1.5\n", ("model.layers",)),
    ("list-for-str", "data:\n  src: [en]\n", ("data.src",)),
    ("duplicate-key", "model:\n  layers: 1\n  layers: 2\n", ("duplicate", "model.layers")),
    ("duplicate-section", "model:\n  layers: 1\nmodel:\n  hidden: 8\n", ("duplicate", "model")),
    ("yaml-tag", "model: !!python/object:os.system ls\n", ("",)),
    ("anchor-bomb", "a: &a [x, x]\nb: &b [*a, *a]\nmodel: *b\n", ("",)),
]

# Values that pass YAML but make no sense: each is a --set override and a config line.
BAD_VALUES = [
    ("model.attention", "bogus"), ("model.score", "bogus"), ("model.type", "rnn"),
    ("model.local_composition", "x"), ("model.norm", "mid"), ("model.positions", "none"),
    ("model.enc_self_attention", "magic"), ("model.window_mask", "x"),
    ("model.dropout", "5"), ("model.dropout", "-0.1"), ("model.dropout", "nan"),
    ("model.layers", "0"), ("model.hidden", "-4"), ("model.embed", "0"), ("model.heads", "0"),
    ("model.window", "-1"), ("model.max_src_len", "0"),
    ("train.lr", "nan"), ("train.lr", "-1"), ("train.lr", "inf"), ("train.lr", "0"),
    ("train.epochs", "0"), ("train.batch_size", "0"), ("train.accumulate", "0"),
    ("train.clip", "-1"), ("train.label_smoothing", "1.5"), ("train.decay", "0"),
    ("train.max_time", "-5"), ("train.max_steps", "-1"), ("train.log_every", "0"),
    ("train.device", "tpu"), ("train.device", "cuda:x"), ("train.optimizer", "lion"),
    ("train.batch_by", "words"), ("train.loss_norm", "x"), ("train.threads", "-2"),
    ("data.max_len", "0"), ("data.src_vocab_size", "0"), ("data.tgt_vocab_size", "-1"),
    ("data.tokenizer", "chars"), ("data.src", ""), ("ngram.mode", "mix"), ("ngram.order", "0"),
    ("ngram.lam", "2"), ("ngram.alpha", "nan"),
]

BAD_SETS = [
    ("no-equals", "train.lr", ("--set",)),
    ("no-section", "lr=3", ("--set",)),
    ("three-parts", "a.b.c=1", ("--set",)),
    ("unknown-section", "bogus.lr=3", ("bogus",)),
    ("unknown-key", "train.lrr=3", ("train.lrr",)),
    ("malformed-yaml", "train.lr=[", ("--set", "train.lr")),
    ("malformed-yaml-brace", "model.hidden={a", ("--set", "model.hidden")),
    ("wrong-type", "model.layers=two", ("model.layers",)),
    ("a-list", "model.layers=[1, 2]", ("model.layers",)),
    ("a-mapping", "train.lr={a: 1}", ("train.lr",)),
    ("bad-task", "task=dance", ("task",)),
]


def _good_files(d: Path) -> dict[str, Path]:
    (d / "good.en").write_text(GOOD_EN, encoding="utf-8")
    (d / "good.es").write_text(GOOD_ES, encoding="utf-8")
    (d / "good.align").write_text("0-0 1-2 2-1\n0-0\n0-0 1-1\n", encoding="utf-8")
    return {"en": d / "good.en", "es": d / "good.es", "align": d / "good.align", "prefix": d / "good"}


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
    good = _good_files(tmp_path)
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
                                 "weights-misfit", "vocab-misfit", "no-checkpoints", "pointers-dangling",
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
    good = _good_files(tmp_path)
    (tmp_path / "good.en.tsv").write_text("a cat\tsg\n", encoding="utf-8")
    good["run"] = tiny_run
    run = _run_copy({"lstm": tiny_run, "window": window_run, "classify": classify_run}[kind],
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
    good = _good_files(tmp_path)
    for name in ("step-nope", "../../etc", "LAST", ""):
        assert_fails(tmp_path, ["translate", "--model", str(tiny_run), "--checkpoint", name, "-i",
                                str(good["en"])], (str(tiny_run), "checkpoint"))


# -- configs and --set ----------------------------------------------------------------------------------------
def _config_with(tiny_corpus, extra: str = "") -> str:
    return tiny_corpus.config.read_text() + extra


@pytest.mark.parametrize("name,text,words", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config(name, text, words, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert_fails(tmp_path, ["train", str(cfg), "--out", str(tmp_path / "run")], (str(cfg), *words))


@pytest.mark.parametrize("kind", ["missing", "directory", "empty-path"])
def test_config_path_is_not_a_file(kind, tmp_path):
    cfg = tmp_path / "c.yaml"
    if kind == "directory":
        cfg.mkdir()
    arg = "" if kind == "empty-path" else str(cfg)
    assert_fails(tmp_path, ["train", arg, "--out", str(tmp_path / "run")], ())


@pytest.mark.parametrize("key,value", BAD_VALUES, ids=[f"{k}={v}" for k, v in BAD_VALUES])
def test_bad_value_as_set_and_in_config(key, value, tmp_path, tiny_corpus):
    run = tmp_path / "run"
    assert_fails(tmp_path, ["train", str(tiny_corpus.config), "--out", str(run), "--set",
                            f"{key}={value}"], (key,))
    import yaml

    section, name = key.split(".")
    raw = yaml.safe_load(tiny_corpus.config.read_text())
    raw.setdefault(section, {})[name] = yaml.safe_load(value) if value else ""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    line = cfg.read_text().splitlines().index(f"  {name}: {yaml.safe_dump(raw[section][name]).split(chr(10))[0]}") + 1
    assert_fails(tmp_path, ["train", str(cfg), "--out", str(run)], (f"{cfg}:{line}:", key))


@pytest.mark.parametrize("name,item,words", BAD_SETS, ids=[c[0] for c in BAD_SETS])
def test_bad_set_override(name, item, words, tmp_path, tiny_corpus):
    assert_fails(tmp_path, ["train", str(tiny_corpus.config), "--out", str(tmp_path / "run"), "--set",
                            item], words)


@pytest.mark.parametrize("name,item,words", BAD_SETS[:6], ids=[c[0] for c in BAD_SETS[:6]])
def test_bad_set_in_experiment(name, item, words, tmp_path, tiny_corpus):
    d = tiny_corpus.directory
    assert_fails(tmp_path, ["experiment", "luong", "--train", str(d / "train"), "--dev", str(d / "dev"),
                            "--test", str(d / "dev"), "--out", str(tmp_path / "exp"), "--set", item,
                            "--rows", "base", "--steps", "1"], words)

# -- training corpora ----------------------------------------------------------------------------------------
def _corpus(d: Path, tiny_corpus) -> Path:
    """A copy of the tiny corpus under d/c/ (train.*, dev.*) to break one file of."""
    c = d / "c"
    c.mkdir()
    for f in tiny_corpus.directory.iterdir():
        if f.suffix in (".en", ".es"):
            shutil.copyfile(f, c / f.name)
    return c


def _train_argv(d: Path, c: Path, *extra: str) -> list[str]:
    cfg = d / "c.yaml"
    cfg.write_text(
        f"data: {{train: {c}/train, dev: {c}/dev, src: en, tgt: es, src_vocab_size: 50, "
        "tgt_vocab_size: 50}\nmodel: {layers: 1, hidden: 8, embed: 8, attention: global, score: dot}\n"
        "train: {optimizer: adam, lr: 0.01, epochs: 1, batch_size: 64, device: cpu, threads: 1}\n",
        encoding="utf-8")
    return ["train", str(cfg), "--out", str(d / "run"), *extra]


def _corpus_cases():
    for side in ("train.en", "train.es", "dev.en", "dev.es"):
        for bad in BAD_TEXT + EMPTY_TEXT:
            yield pytest.param(side, bad, id=f"{side}-{bad.name}")


@pytest.mark.parametrize("side,bad", list(_corpus_cases()))
def test_bad_training_corpus(side, bad, tmp_path, tiny_corpus):
    c = _corpus(tmp_path, tiny_corpus)
    path = c / side
    path.unlink()
    bad.make(path)
    where = f"{path}:{bad.line}:" if bad.line else str(path)
    assert_fails(tmp_path, _train_argv(tmp_path, c), (where, *bad.words))


@pytest.mark.parametrize("what,make,words", [
    ("line counts", lambda c: (c / "train.es").write_text("uno\ndos\n"), ("train.en has", "train.es has 2")),
    ("dev line counts", lambda c: (c / "dev.en").write_text("a\n"), ("dev.en has 1", "dev.es has")),
    ("tsv without tab", lambda c: (c / "train.tsv").write_text("a\tb\nno tab here\n"), ("train.tsv:2:", "tab")),
    ("no pairs", lambda c: ((c / "train.en").write_text("a\n\n"), (c / "train.es").write_text("\nb\n")),
     ("train.en", "no non-empty")),
])
def test_bad_parallel_corpus(what, make, words, tmp_path, tiny_corpus):
    c = _corpus(tmp_path, tiny_corpus)
    make(c)
    argv = _train_argv(tmp_path, c)
    if what == "tsv without tab":
        argv += ["--set", f"data.train={c}/train.tsv"]
    assert_fails(tmp_path, argv, words)


def test_bad_experiment_corpus(tmp_path, tiny_corpus):
    c = _corpus(tmp_path, tiny_corpus)
    (c / "train.es").write_bytes(b"\xff\n")
    assert_fails(tmp_path, ["experiment", "luong", "--train", str(c / "train"), "--dev", str(c / "dev"),
                            "--test", str(c / "dev"), "--out", str(tmp_path / "exp"), "--rows", "base",
                            "--steps", "1"], (f"{c / 'train.es'}:1:", "UTF-8"))
    assert_fails(tmp_path, ["experiment", "luong", "--train", str(c / "nope"), "--dev", str(c / "dev"),
                            "--test", str(c / "dev"), "--out", str(tmp_path / "exp"), "--rows", "base"],
                 (str(c / "nope"),))


# -- n-gram models (ARPA, gzipped ARPA, binary) -------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_arpa(tiny_corpus, tmp_path_factory) -> Path:
    from attnmt.ngram.model import NgramLM

    path = tmp_path_factory.mktemp("arpa") / "tiny.arpa"
    NgramLM.estimate_text(tiny_corpus.directory / "train.es", order=3).to_arpa(path)
    return path


def _gz(text: bytes, keep: float = 1.0) -> bytes:
    data = gzip.compress(text)
    return data[: int(len(data) * keep)]


def _arpa_bads(good: bytes):
    body = good.split(b"\\1-grams:")[1]
    return [
        ("empty", b"", ("not an ARPA file",)),
        ("garbage", b"hello world\n", ("not an ARPA file",)),
        ("no-counts", b"\\data\\\n\n\\1-grams:\n", ("",)),
        ("bad-count", b"\\data\\\nngram 1=abc\n", ("count",)),
        ("count-mismatch", good.replace(b"ngram 1=", b"ngram 1=9", 1), ("",)),
        ("huge-count", good.replace(b"ngram 1=", b"ngram 1=99999999999", 1), ("",)),
        ("truncated", good[: len(good) // 2], ("",)),
        ("no-end", good.replace(b"\\end\\", b""), ("",)),
        ("bad-prob", good.replace(b"\\1-grams:\n", b"\\1-grams:\nxyz\tthe\n", 1), ("",)),
        ("nan-prob", good.replace(b"\\1-grams:\n" + body.split(b"\n")[1],
                                  b"\\1-grams:\nnan\t" + body.split(b"\n")[1].split(b"\t", 1)[1], 1),
         ("finite",)),
        ("not-utf8", good.replace(b"\\1-grams:\n", b"\\1-grams:\n-1.0\t\xff\n", 1), ("UTF-8",)),
        ("binary-junk", bytes(range(256)) * 8, ("",)),
        ("kenlm-binary", b"mmap lm http://kheafield.com/code format version 5\n\x00" * 4, ("KenLM",)),
        ("fake-safetensors", b"\x20" + b"\x00" * 7 + b'{"__metadata__": {"x": "y"}}  ', ("",)),
        ("gz-truncated", _gz(good, 0.5), ("gzip",)),
        ("gz-corrupt", _gz(good)[:40] + b"\x00" * 64 + _gz(good)[104:], ("gzip",)),
        ("gz-empty-stream", b"\x1f\x8b", ("",)),
    ]


ARPA_SLOTS = [
    ("ngram ppl", lambda m, g: ["ngram", "ppl", "--model", str(m), "--input", str(g["es"])]),
    ("ngram query", lambda m, g: ["ngram", "query", "--model", str(m)]),
    ("translate --ngram", lambda m, g: ["translate", "--model", str(g["run"]), "-i", str(g["en"]),
                                        "--ngram", str(m), "--alpha", "0.1"]),
    ("eval --ngram", lambda m, g: ["eval", "--model", str(g["run"]), "--input", str(g["prefix"]),
                                   "--ngram", str(m), "--alpha", "0,0.1"]),
]


def _arpa_cases():
    good_names = ["empty", "garbage", "no-counts", "bad-count", "count-mismatch", "huge-count", "truncated",
                  "no-end", "bad-prob", "nan-prob", "not-utf8", "binary-junk", "kenlm-binary",
                  "fake-safetensors", "gz-truncated", "gz-corrupt", "gz-empty-stream", "missing", "directory"]
    for slot, argv in ARPA_SLOTS:
        for name in good_names:
            yield pytest.param(argv, name, id=f"{slot}-{name}")


@pytest.mark.parametrize("argv,name", list(_arpa_cases()))
def test_bad_ngram_model(argv, name, tmp_path, tiny_run, tiny_arpa):
    good = _good_files(tmp_path)
    good["run"] = tiny_run
    path = tmp_path / ("m.arpa.gz" if name.startswith("gz") else "m.arpa")
    words: tuple[str, ...] = ()
    if name == "directory":
        path.mkdir()
    elif name != "missing":
        data, words = next((d, w) for n, d, w in _arpa_bads(tiny_arpa.read_bytes()) if n == name)
        path.write_bytes(data)
    assert_fails(tmp_path, argv(path, good), (str(path), *words), stdin=b"the cat\n")


def test_bad_ngram_path_in_config(tmp_path, tiny_corpus):
    c = _corpus(tmp_path, tiny_corpus)
    arpa = tmp_path / "m.arpa"
    arpa.write_bytes(b"garbage\n")
    assert_fails(tmp_path, _train_argv(tmp_path, c, "--set", f"ngram.path={arpa}"), (str(arpa),))
    assert_fails(tmp_path, _train_argv(tmp_path, c, "--set", f"ngram.path={tmp_path / 'none.arpa'}"),
                 ("none.arpa",))


# -- outputs that cannot or must not be written -------------------------------------------------------------
def _output_cases():
    def translate(o, g):
        return ["translate", "--model", str(g["run"]), "-i", str(g["en"]), "-o", str(o)]

    def alignments(o, g):
        return ["translate", "--model", str(g["run"]), "-i", str(g["en"]), "--alignments", str(o)]

    def ngram_arpa(o, g):
        return ["ngram", "build", "--order", "2", "--input", str(g["es"]), "--arpa", str(o)]

    def ngram_binary(o, g):
        return ["ngram", "build", "--order", "2", "--input", str(g["es"]), "--binary", str(o)]

    def align(o, g):
        return ["align", "--model", str(g["run"]), "--src", str(g["en"]), "--tgt", str(g["es"]), "-o", str(o)]

    def heatmap(o, g):
        return ["analyse", "heatmap", "--model", str(g["run"]), "--input", "a cat", "--out", str(o)]

    def heatmap_csv(o, g):
        return ["analyse", "heatmap", "--model", str(g["run"]), "--input", "a cat", "--out",
                str(g["en"].parent / "h.png"), "--csv", str(o)]

    def curves(o, g):
        return ["analyse", "curves", "--run", str(g["run"]), "--out", str(o)]

    def lengths(o, g):
        return ["analyse", "lengths", "--src", str(g["en"]), "--ref", str(g["es"]), "--hyp", str(g["es"]),
                "--out", str(o)]

    def synthetic(o, g):
        return ["data", "synthetic", "--out", str(o), "--train", "5", "--dev", "5", "--test", "5"]

    def agreement(o, g):
        return ["data", "agreement", "--out", str(o), "--train", "5", "--test-per-bucket", "2"]

    def average(o, g):
        return ["average", "--model", str(g["run"]), "--last", "1", "--out", str(o)]

    def train(o, g):
        return ["train", str(g["config"]), "--out", str(o)]

    files = [translate, alignments, ngram_arpa, ngram_binary, align, heatmap, heatmap_csv, curves]
    dirs = [lengths, synthetic, agreement, average, train]
    for f in files:
        for kind in ("directory", "missing-folder", "folder-is-a-file"):
            yield pytest.param(f, kind, id=f"{f.__name__}-{kind}")
    for f in dirs:
        yield pytest.param(f, "dir-is-a-file", id=f"{f.__name__}-dir-is-a-file")
    for f, inp in ((translate, "en"), (alignments, "en"), (ngram_arpa, "es"), (ngram_binary, "es"),
                   (align, "es")):
        yield pytest.param(f, f"same-as-input-{inp}", id=f"{f.__name__}-same-as-input")


@pytest.mark.parametrize("argv,kind", list(_output_cases()))
def test_bad_output(argv, kind, tmp_path, tiny_run, tiny_corpus):
    good = _good_files(tmp_path)
    good["run"], good["config"] = tiny_run, tiny_corpus.config
    if kind == "directory":
        out = tmp_path / "outdir"
        out.mkdir()
        (out / "keep").write_text("x")
    elif kind == "missing-folder":
        out = tmp_path / "no" / "such" / "out.txt"
    elif kind == "folder-is-a-file":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "out.txt"
    elif kind == "dir-is-a-file":
        out = tmp_path / "afile"
        out.write_text("x")
    else:
        out = good[kind.rsplit("-", 1)[1]]
    before = out.read_bytes() if out.is_file() else None
    assert_fails(tmp_path, argv(out, good), (str(out) if kind != "folder-is-a-file" else "afile",))
    if before is not None:
        assert out.read_bytes() == before  # an input is never overwritten


def test_translate_output_equal_to_input_via_another_name(tmp_path, tiny_run):
    good = _good_files(tmp_path)
    link = tmp_path / "link.en"
    link.symlink_to(good["en"])
    assert_fails(tmp_path, ["translate", "--model", str(tiny_run), "-i", str(good["en"]), "-o", str(link)],
                 ("would overwrite the input",))
    assert good["en"].read_text() == GOOD_EN


# -- resuming from a run directory ---------------------------------------------------------------------------
def test_resume_problems(tmp_path, tiny_run):
    run = _run_copy(tiny_run, tmp_path / "run")
    last = run / "checkpoints" / (run / "checkpoints" / "LAST").read_text().strip()
    state = last / "trainer.pt"
    assert_fails(tmp_path, ["train", "--out", str(tmp_path / "none"), "--resume"], ("CONFIG",))
    state.write_bytes(b"not a pickle")
    assert_fails(tmp_path, ["train", "--out", str(run), "--resume"], (str(state),))
    import torch

    torch.save({"step": 3}, state)  # a dict without the optimizer and progress
    assert_fails(tmp_path, ["train", "--out", str(run), "--resume"], (str(state),))
    state.unlink()
    state.mkdir()
    assert_fails(tmp_path, ["train", "--out", str(run), "--resume"], (str(state),))


class _Exploit:
    """A pickle whose loading runs code: it would create the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_crafted_trainer_state_does_not_run(tmp_path, tiny_run):
    import torch

    run = _run_copy(tiny_run, tmp_path / "run")
    last = run / "checkpoints" / (run / "checkpoints" / "LAST").read_text().strip()
    marker = tmp_path / "pwned"
    torch.save({"optimizer": _Exploit(marker), "step": 1}, last / "trainer.pt")
    status, out, err = run_cli(["train", "--out", str(run), "--resume"])
    assert not marker.exists(), "loading trainer.pt ran code from the run directory"
    assert status == 2 and "trainer.pt" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


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
    (lambda r, g: ["average", "--model", str(r), "--last", "0", "--out", str(g["en"].parent / "avg")], ("--last",)),
    (lambda r, g: ["ngram", "build", "--order", "0", "--input", str(g["es"]), "--arpa", str(g["en"].parent / "x.arpa")],
     ("--order",)),
]


@pytest.mark.parametrize("argv,words", NUMERIC_FLAGS, ids=[" ".join(w) for _, w in NUMERIC_FLAGS])
def test_numeric_flag_out_of_range(argv, words, tmp_path, tiny_run):
    assert_fails(tmp_path, argv(tiny_run, _good_files(tmp_path)), words)


# -- wrong successes: each is now an error or a clearly labelled empty result ------------------------------
def test_translate_output_cut_at_the_cap_is_an_error(tmp_path, tiny_run):
    good = _good_files(tmp_path)
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
    good = _good_files(tmp_path)
    status, out, err = run_cli(["analyse", "lengths", "--src", str(good["en"]), "--ref", str(good["es"]),
                                "--hyp", str(good["es"]), "--out", str(tmp_path / "len")])
    assert status == 0, err
    csv = (tmp_path / "len" / "lengths.csv").read_text()
    assert "nan" not in csv.lower() and "\n10-20,0,,\n" in csv
    assert "| 10-20 | 0 | – | – |" in out


def test_align_and_aer_print_valid_json(tmp_path, tiny_run):
    import json

    good = _good_files(tmp_path)
    status, out, err = run_cli(["align", "--model", str(tiny_run), "--src", str(good["en"]), "--tgt",
                                str(good["es"])])
    assert status == 0, err
    summary = json.loads(err.split("attnmt: align ", 1)[1])
    assert summary["sentences"] == 3 and isinstance(summary["entropy"], float)
    status, out, err = run_cli(["aer", "--alignments", str(good["align"]), "--gold", str(good["align"]),
                                "--json"])
    assert status == 0 and json.loads(out)["aer"] == 0.0


def test_write_errors_leave_no_temporary_file(tmp_path):
    from attnmt.data.corpus import write_lines

    def lines():
        yield "one"
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_lines(tmp_path / "out.txt", lines())
    assert list(tmp_path.iterdir()) == []
