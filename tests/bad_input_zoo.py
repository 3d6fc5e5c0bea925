"""Shared parts of the malformed-input zoo (tests/test_bad_input.py, test_bad_configs.py, test_bad_ngram.py,
test_bad_outputs.py, test_bad_resume.py): running a command in-process and checking that it fails
as a user error, generated bad text files, copies and damage of a trained run."""

from __future__ import annotations

import io
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from attnmt.cli.main import main

GOOD_EN = "the red cat sees a dog\na girl has the old book\nthe boy wants a table\n"
GOOD_ES = "el gato rojo ve un perro\nuna niña tiene el libro viejo\nel niño quiere una mesa\n"



# -- the runner ---------------------------------------------------------------------------------------
def listing(root: Path) -> set[str]:
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


class Hung(Exception):
    """A command that did not return within its time (a FIFO waited on, an endless stream read)."""


@contextmanager
def no_hang(seconds: float) -> Iterator[None]:
    """Raise ``Hung`` in the block after ``seconds`` (SIGALRM: a blocking open or read is
    interrupted too)."""
    def alarm(signum, frame):
        raise Hung(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def assert_fails(root: Path, argv: list[str], words: tuple[str, ...], stdin: bytes | None = None,
                 stdout_ok: bool = False, timeout: float = 60) -> str:
    """The command fails as a user error within ``timeout`` seconds: status 2, one line naming
    ``words``, no traceback, no output, nothing new under ``root``."""
    before = listing(root)
    with no_hang(timeout):
        status, out, err = run_cli(argv, stdin)
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert status == 2, (status, err)
    assert len(lines) == 1 and lines[0].startswith("attnmt: error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert stdout_ok or out == "", out
    assert listing(root) == before, sorted(listing(root) ^ before)
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


def copy_corpus(d: Path, tiny_corpus) -> Path:
    """A copy of the tiny corpus under d/c/ (train.*, dev.*) to break one file of."""
    c = d / "c"
    c.mkdir()
    for f in tiny_corpus.directory.iterdir():
        if f.suffix in (".en", ".es"):
            shutil.copyfile(f, c / f.name)
    return c


def train_argv(d: Path, c: Path, *extra: str) -> list[str]:
    cfg = d / "c.yaml"
    cfg.write_text(
        f"data: {{train: {c}/train, dev: {c}/dev, src: en, tgt: es, src_vocab_size: 50, "
        "tgt_vocab_size: 50}\nmodel: {layers: 1, hidden: 8, embed: 8, attention: global, score: dot}\n"
        "train: {optimizer: adam, lr: 0.01, epochs: 1, batch_size: 64, device: cpu, threads: 1}\n",
        encoding="utf-8")
    return ["train", str(cfg), "--out", str(d / "run"), *extra]


def good_files(d: Path) -> dict[str, Path]:
    (d / "good.en").write_text(GOOD_EN, encoding="utf-8")
    (d / "good.es").write_text(GOOD_ES, encoding="utf-8")
    (d / "good.align").write_text("0-0 1-2 2-1\n0-0\n0-0 1-1\n", encoding="utf-8")
    return {"en": d / "good.en", "es": d / "good.es", "align": d / "good.align", "prefix": d / "good"}


def run_copy(tiny_run: Path, dest: Path) -> Path:
    shutil.copytree(tiny_run, dest)
    return dest


def nan_weights(weights: Path) -> None:
    """One NaN in the first floating tensor: a diverged run's checkpoint (translated to empty lines,
    exit 0)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    first = next(k for k, v in tensors.items() if v.is_floating_point())
    tensors[first].view(-1)[0] = float("nan")
    save_file(tensors, weights)
