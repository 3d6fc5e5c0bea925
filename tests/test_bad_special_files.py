"""The malformed-input zoo, special files and archives: what a hostile or careless user names as a file.

A FIFO (no writer: an open would block forever), /dev/zero and /dev/urandom (a read never ends),
a directory, a socket, a link to nothing, given at every door that reads a file the user names: a
config, a run's config, vocabulary, pointer and weights, a corpus, a text to translate or score,
an n-gram model or its text. And archives: a gzip of endless blank lines (a decompression bomb),
a member followed by junk, truncated xz and bz2. Each ends within a time limit with exit status 2
and one line naming the path (attnmt/files.py), nothing left behind. The runner is
tests/bad_input_zoo.py.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import socket
from pathlib import Path

import pytest

from bad_input_zoo import assert_fails, copy_corpus, good_files, run_cli, run_copy, train_argv

from attnmt.errors import UserError
from attnmt.files import archive_limit, check_regular, open_input, read_small_text


def _make_special(kind: str, path: Path) -> tuple[str, ...]:
    """Put a ``kind`` where ``path`` is (removing what was there); the words its error names."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
        return ("FIFO", "not a regular file")
    if kind in ("dev-zero", "dev-urandom"):
        path.symlink_to("/dev/" + kind.split("-")[1])
        return ("character device",)
    if kind == "directory":
        path.mkdir()
        return ("directory",)
    if kind == "socket":
        cwd = os.getcwd()
        os.chdir(path.parent)  # a socket's path is limited to 108 bytes: bind its name
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(path.name)
        finally:
            os.chdir(cwd)
        return ("socket",)
    if kind == "dangling-link":
        path.symlink_to(path.parent / "nowhere")
        return ("not found",)
    raise AssertionError(kind)


KINDS = ["fifo", "dev-zero", "dev-urandom", "directory", "socket", "dangling-link"]


# doors: (name, where the special file goes, argv). ``where`` gets (tmp_path, good files, run copy).
def _doors():
    def at(name):
        return lambda d, g, r: d / name

    def in_run(rel):
        return lambda d, g, r: r / rel

    def best_weights(d, g, r):
        best = (r / "checkpoints" / "BEST").read_text().strip()
        return r / "checkpoints" / best / "model.safetensors"

    return [
        ("train-config", at("c.yaml"), lambda p, d, g, r: ["train", str(p), "--out", str(d / "out")]),
        ("train-corpus", lambda d, g, r: d / "c" / "train.en",
         lambda p, d, g, r: train_argv(d, d / "c")),
        ("translate-input", at("in.en"), lambda p, d, g, r: ["translate", "--model", str(r), "-i", str(p)]),
        ("score-hyp", at("hyp.es"), lambda p, d, g, r: ["score", "--hyp", str(p), "--ref", str(g["es"])]),
        ("run-config", in_run("config.yaml"), lambda p, d, g, r: ["translate", "--model", str(r), "-i", str(g["en"])]),
        ("run-tgt-vocab", in_run("tgt.vocab"), lambda p, d, g, r: ["translate", "--model", str(r), "-i", str(g["en"])]),
        ("run-best", in_run("checkpoints/BEST"), lambda p, d, g, r: ["translate", "--model", str(r), "-i", str(g["en"])]),
        ("run-last", in_run("checkpoints/LAST"),
         lambda p, d, g, r: ["translate", "--model", str(r), "--checkpoint", "last", "-i", str(g["en"])]),
        ("run-weights", best_weights, lambda p, d, g, r: ["translate", "--model", str(r), "-i", str(g["en"])]),
        ("run-src-vocab", in_run("src.vocab"), lambda p, d, g, r: ["translate", "--model", str(r), "-i", str(g["en"])]),
        ("run-log", in_run("log.jsonl"), lambda p, d, g, r: ["analyse", "curves", "--run", str(r), "--out",
                                                             str(d / "c.png")]),
        ("eval-input", lambda d, g, r: d / "good.es", lambda p, d, g, r: ["eval", "--model", str(r), "--input",
                                                                           str(g["prefix"])]),
        ("translate-dict", at("d.dict"), lambda p, d, g, r: ["translate", "--model", str(r), "-i", str(g["en"]),
                                                            "--replace-unk", "--dict", str(p)]),
        ("ngram-ppl-input", at("t.es"), lambda p, d, g, r: ["ngram", "ppl", "--model", str(g["arpa"]),
                                                           "--input", str(p)]),
        ("ngram-build-input", at("t.es"), lambda p, d, g, r: ["ngram", "build", "--order", "2", "--input",
                                                             str(p), "--arpa", str(d / "o.arpa")]),
        ("ngram-ppl-model", at("m.arpa"), lambda p, d, g, r: ["ngram", "ppl", "--model", str(p),
                                                             "--input", str(g["es"])]),
        ("translate-ngram", at("m.arpa"), lambda p, d, g, r: ["translate", "--model", str(r), "-i", str(g["en"]),
                                                             "--ngram", str(p), "--alpha", "0.1"]),
    ]


@pytest.mark.parametrize("door", _doors(), ids=lambda d: d[0])
@pytest.mark.parametrize("kind", KINDS)
def test_special_file_at_every_door(door, kind, tmp_path, tiny_run, tiny_corpus, tiny_arpa):
    _, where, argv = door
    g = good_files(tmp_path)
    g["arpa"] = tiny_arpa
    copy_corpus(tmp_path, tiny_corpus)
    run = run_copy(tiny_run, tmp_path / "r")
    (tmp_path / "c.yaml").write_text("model: {layers: 1}\n")
    path = where(tmp_path, g, run)
    words = _make_special(kind, path)
    assert_fails(tmp_path, argv(path, tmp_path, g, run), (str(path), *words), timeout=30)


def test_dev_zero_itself_is_no_input_and_not_missing(tmp_path, tiny_arpa):
    """`ngram ppl --input /dev/zero` said 'file not found' for a file that exists."""
    line = assert_fails(tmp_path, ["ngram", "ppl", "--model", str(tiny_arpa), "--input", "/dev/zero"],
                        ("/dev/zero", "character device"), timeout=30)
    assert "not found" not in line


def test_stdin_stays_allowed(tmp_path, tiny_run):
    status, out, err = run_cli(["translate", "--model", str(tiny_run)], stdin=b"the red cat\n")
    assert status == 0 and len(out.splitlines()) == 1, err


# -- the reader itself -------------------------------------------------------------------------------------------
def test_check_regular_names_what_is_there(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    assert check_regular(f) == str(f)
    (tmp_path / "link").symlink_to(f)  # a link to a regular file is that file
    assert check_regular(tmp_path / "link") == str(tmp_path / "link")
    with pytest.raises(UserError, match="not found"):
        check_regular(tmp_path / "f" / "below")  # a folder on the way is a file
    for kind in KINDS:
        words = _make_special(kind, tmp_path / kind)
        with pytest.raises(UserError) as err:
            check_regular(tmp_path / kind, "config")
        assert str(tmp_path / kind) in str(err.value) and all(w in str(err.value) for w in words)


def test_small_text_is_bounded_and_checked(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"a: 1\n" * 10)
    assert read_small_text(p, 50) == "a: 1\n" * 10
    with pytest.raises(UserError, match="over the 49-byte limit"):
        read_small_text(p, 49)
    p.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(UserError, match=r"c.yaml:2: invalid UTF-8"):
        read_small_text(p)
    p.write_bytes(b"a: 1\n\nb\x00\n")
    with pytest.raises(UserError, match=r"c.yaml:3: NUL byte"):
        read_small_text(p)


def test_a_config_over_the_limit_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# padding\n" * 110_000)  # 1.1 MB of comments
    assert_fails(tmp_path, ["train", str(big), "--out", str(tmp_path / "run")], (str(big), "byte limit"))


# -- archives ------------------------------------------------------------------------------------------------
COMPRESSORS = {"gzip": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress}


@pytest.mark.parametrize("kind", list(COMPRESSORS))
def test_archives_of_several_members_read_whole(kind, tmp_path):
    pack = COMPRESSORS[kind]
    p = tmp_path / f"t.{kind}"
    p.write_bytes(pack(b"one\ntwo\n") + pack(b"three\n"))
    with open_input(p) as f:
        assert f.read().splitlines() == [b"one", b"two", b"three"]


@pytest.mark.parametrize("kind", list(COMPRESSORS))
@pytest.mark.parametrize("damage,words", [("junk", ("junk after",)), ("zeros", ("junk after",)),
                                          ("truncated", ("truncated",))])
def test_damaged_archives_are_errors(kind, damage, words, tmp_path):
    data = COMPRESSORS[kind](b"hello world\n" * 100)
    data = {"junk": data + b"garbage!", "zeros": data + b"\0" * 16, "truncated": data[:-6]}[damage]
    p = tmp_path / f"t.{kind}"
    p.write_bytes(data)
    with pytest.raises(UserError) as err, open_input(p) as f:
        f.read()
    assert str(p) in str(err.value) and all(w in str(err.value) for w in words), err.value


def test_the_archive_limit_and_how_to_raise_it(tmp_path, monkeypatch):
    assert archive_limit(1000) == 100 * 1000 + (1 << 20)
    monkeypatch.setenv("ATTNMT_MAX_ARCHIVE_RATIO", "1000")
    monkeypatch.setenv("ATTNMT_MAX_ARCHIVE_BYTES", "5000000")
    assert archive_limit(1000) == 1000 * 1000 + (1 << 20)
    assert archive_limit(10**6) == 5_000_000
    monkeypatch.setenv("ATTNMT_MAX_ARCHIVE_BYTES", "lots")
    with pytest.raises(UserError, match="ATTNMT_MAX_ARCHIVE_BYTES"):
        archive_limit(1)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    """An ARPA header, then 20 MB of blank lines: a gzip of about 20 KB (1000x)."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.arpa.gz"
    path.write_bytes(gzip.compress(b"\\data\\\nngram 1=3\n" + b"\n" * (20 << 20), compresslevel=6))
    assert path.stat().st_size < 100_000
    return path


BOMB_SLOTS = [
    ("ngram ppl", lambda m, g: ["ngram", "ppl", "--model", str(m), "--input", str(g["es"])]),
    ("ngram query", lambda m, g: ["ngram", "query", "--model", str(m)]),
    ("translate --ngram", lambda m, g: ["translate", "--model", str(g["run"]), "-i", str(g["en"]),
                                        "--ngram", str(m), "--alpha", "0.1"]),
]


@pytest.mark.parametrize("argv", [a for _, a in BOMB_SLOTS], ids=[n for n, _ in BOMB_SLOTS])
def test_a_decompression_bomb_stops_with_an_error(argv, tmp_path, tiny_run, bomb):
    g = good_files(tmp_path)
    g["run"] = tiny_run
    assert_fails(tmp_path, argv(bomb, g), (str(bomb), "decompression bomb", "ATTNMT_MAX_ARCHIVE_RATIO"),
                 stdin=b"el gato\n", timeout=30)


@pytest.mark.parametrize("kind", list(COMPRESSORS))
def test_a_compressed_model_followed_by_junk_is_no_good_model(kind, tmp_path, tiny_arpa):
    g = good_files(tmp_path)
    model = tmp_path / f"m.arpa.{kind}"
    model.write_bytes(COMPRESSORS[kind](tiny_arpa.read_bytes()))
    status, out, err = run_cli(["ngram", "ppl", "--model", str(model), "--input", str(g["es"])])
    assert status == 0, err  # xz and bz2 ARPA files load like gzip ones
    model.write_bytes(COMPRESSORS[kind](tiny_arpa.read_bytes()) + b"this is no gzip member\n")
    assert_fails(tmp_path, ["ngram", "ppl", "--model", str(model), "--input", str(g["es"])],
                 (str(model), "junk after"))


def test_text_after_the_end_of_an_arpa_file_is_an_error(tmp_path, tiny_arpa):
    g = good_files(tmp_path)
    model = tmp_path / "m.arpa"
    model.write_bytes(tiny_arpa.read_bytes() + b"\n\n-1.0\tsurplus\n")
    assert_fails(tmp_path, ["ngram", "ppl", "--model", str(model), "--input", str(g["es"])],
                 (str(model), "after \\end\\"))
