"""The malformed-input zoo, a run's pointers and vocabularies, and outputs that are not plain files.

checkpoints/BEST or LAST naming a missing step, a path outside the run or a symbolic link out of
it is an error naming the pointer, never a silent fallback to another checkpoint (``--checkpoint
last`` is the fallback a user asks for). A vocabulary with a word twice, a special symbol in an
ordinary slot, an empty line inside or a size that disagrees with the weights is an error naming
the file (and line). An output (-o, --alignments, --arpa, --binary, --out/--csv of the plots) that
is a symbolic link, a FIFO, a device or a directory is refused and left as it was; ``average
--out`` inside a run's checkpoints/ is refused. The runner is tests/bad_input_zoo.py.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from bad_input_zoo import assert_fails, good_files, run_cli, run_copy


def _translate(run: Path, g: dict, *extra: str) -> list[str]:
    return ["translate", "--model", str(run), "-i", str(g["en"]), *extra]


def _best_name(run: Path) -> str:
    return (run / "checkpoints" / "BEST").read_text().strip()


# -- pointers ----------------------------------------------------------------------------------------------
def _outside_step(run: Path, tmp: Path) -> None:
    """BEST names step-00000999, a link to a copy of the best step outside the run."""
    outside = tmp / "elsewhere" / "step-00000999"
    shutil.copytree(run / "checkpoints" / _best_name(run), outside)
    (run / "checkpoints" / "step-00000999").symlink_to(outside, target_is_directory=True)
    (run / "checkpoints" / "BEST").write_text("step-00000999\n")


def _checkpoints_elsewhere(run: Path, tmp: Path) -> None:
    shutil.move(run / "checkpoints", tmp / "moved")
    (run / "checkpoints").symlink_to(tmp / "moved", target_is_directory=True)


POINTERS = [
    ("best-missing-step", lambda r, t: (r / "checkpoints" / "BEST").write_text("step-99999999\n"),
     "checkpoints/BEST", ("no checkpoint",)),
    ("best-dotdot", lambda r, t: (r / "checkpoints" / "BEST").write_text("../../etc\n"),
     "checkpoints/BEST", ("not the name of a checkpoint",)),
    ("best-absolute", lambda r, t: (r / "checkpoints" / "BEST").write_text(f"{r}/checkpoints/{_best_name(r)}\n"),
     "checkpoints/BEST", ("checkpoint",)),  # over the size limit of a pointer too
    ("best-empty", lambda r, t: (r / "checkpoints" / "BEST").write_text(""), "checkpoints/BEST", ("checkpoint",)),
    ("best-long", lambda r, t: (r / "checkpoints" / "BEST").write_text("step-1" + "0" * 100 + "\n"),
     "checkpoints/BEST", ("64-byte limit",)),
    ("best-link-outside", _outside_step, "checkpoints/BEST", ("symbolic link",)),
    ("checkpoints-link-outside", _checkpoints_elsewhere, "checkpoints/BEST", ("outside",)),
]


@pytest.mark.parametrize("make,rel,words", [p[1:] for p in POINTERS], ids=[p[0] for p in POINTERS])
def test_a_pointer_that_names_no_checkpoint_of_the_run(make, rel, words, tmp_path, tiny_run):
    g = good_files(tmp_path)
    run = run_copy(tiny_run, tmp_path / "r")
    make(run, tmp_path)
    assert_fails(tmp_path, _translate(run, g), (str(run / rel), *words))


def test_last_is_the_fallback_a_user_asks_for(tmp_path, tiny_run):
    g = good_files(tmp_path)
    run = run_copy(tiny_run, tmp_path / "r")
    (run / "checkpoints" / "BEST").write_text("step-99999999\n")
    status, out, err = run_cli(_translate(run, g, "--checkpoint", "last"))
    assert status == 0 and len(out.splitlines()) == 3, err


def test_a_step_that_links_out_of_the_run_is_refused(tmp_path, tiny_run):
    g = good_files(tmp_path)
    run = run_copy(tiny_run, tmp_path / "r")
    _outside_step(run, tmp_path)
    assert_fails(tmp_path, _translate(run, g, "--checkpoint", "step-00000999"), (str(run), "symbolic link"))


# -- vocabularies ------------------------------------------------------------------------------------------
def _edit_lines(path: Path, edit) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    path.write_text("\n".join(edit(lines)), encoding="utf-8")


VOCABS = [
    ("duplicate", lambda ls: ls[:-1] + [ls[6], ""], None, ("duplicate entry",)),  # a word again, at the end
    ("duplicate-inside", lambda ls: ls[:7] + [ls[5]] + ls[8:], 8, ("duplicate entry", "also line 6")),
    ("special-in-ordinary-slot", lambda ls: ls[:6] + ["<unk>"] + ls[7:], 7, ("special symbol <unk>",)),
    ("specials-swapped", lambda ls: [ls[0], ls[2], ls[1]] + ls[3:], 2, ("<pad>",)),
    ("blank-inside", lambda ls: ls[:6] + [""] + ls[6:], 7, ("empty entry",)),
    ("one-word-less", lambda ls: ls[:-2] + [""], None, ("entries", "the weights'")),
    ("one-word-more", lambda ls: ls[:-1] + ["zzz-new", ""], None, ("entries", "the weights'")),
]


@pytest.mark.parametrize("side", ["src", "tgt"])
@pytest.mark.parametrize("edit,line,words", [v[1:] for v in VOCABS], ids=[v[0] for v in VOCABS])
def test_a_damaged_vocabulary(edit, line, words, side, tmp_path, tiny_run):
    g = good_files(tmp_path)
    run = run_copy(tiny_run, tmp_path / "r")
    vocab = run / f"{side}.vocab"
    _edit_lines(vocab, edit)
    if line is None and "duplicate entry" in words:
        line = len(vocab.read_text().split("\n")) - 1
    where = f"{vocab}:{line}:" if line else str(vocab)
    assert_fails(tmp_path, _translate(run, g), (where, *words))


# -- outputs that are not plain files ---------------------------------------------------------------------------
def _output_argvs():
    return [
        ("translate -o", lambda o, g: _translate(g["run"], g, "-o", str(o))),
        ("translate --alignments", lambda o, g: _translate(g["run"], g, "--alignments", str(o))),
        ("align -o", lambda o, g: ["align", "--model", str(g["run"]), "--src", str(g["en"]), "--tgt",
                                   str(g["es"]), "-o", str(o)]),
        ("ngram build --arpa", lambda o, g: ["ngram", "build", "--order", "2", "--input", str(g["es"]),
                                             "--arpa", str(o)]),
        ("ngram build --binary", lambda o, g: ["ngram", "build", "--order", "2", "--input", str(g["es"]),
                                               "--binary", str(o)]),
        ("analyse heatmap --out", lambda o, g: ["analyse", "heatmap", "--model", str(g["run"]), "--input",
                                                "a cat", "--out", str(o)]),
    ]


def _node(path: Path) -> tuple:
    """What is at ``path`` (kind, link target), to check that nothing was replaced."""
    mode = os.lstat(path).st_mode
    return stat.S_IFMT(mode), os.readlink(path) if stat.S_ISLNK(mode) else None


def _link_to_mine(path: Path, d: Path) -> None:
    (d / "target.txt").write_text("mine\n")
    path.symlink_to(d / "target.txt")


OUTPUT_KINDS = {
    "link-to-a-file": (lambda p, d: _link_to_mine(p, d), ("symbolic link",)),
    "dangling-link": (lambda p, d: p.symlink_to(d / "nowhere.txt"), ("symbolic link",)),
    "fifo": (lambda p, d: os.mkfifo(p), ("FIFO", "not a regular file")),
    "link-to-dev-null": (lambda p, d: p.symlink_to("/dev/null"), ("symbolic link",)),
}


@pytest.mark.parametrize("kind", list(OUTPUT_KINDS))
@pytest.mark.parametrize("argv", [a for _, a in _output_argvs()], ids=[n for n, _ in _output_argvs()])
def test_an_output_that_is_not_a_plain_file_is_refused_and_left(argv, kind, tmp_path, tiny_run):
    g = good_files(tmp_path)
    g["run"] = tiny_run
    out = tmp_path / "out.txt"
    make, words = OUTPUT_KINDS[kind]
    make(out, tmp_path)
    before = _node(out)
    assert_fails(tmp_path, argv(out, g), (str(out), *words), timeout=30)
    assert _node(out) == before
    if (tmp_path / "target.txt").exists():
        assert (tmp_path / "target.txt").read_text() == "mine\n"
    assert not (tmp_path / "nowhere.txt").exists()


@pytest.mark.parametrize("device", ["/dev/null", "/dev/stdout", "/dev/zero"])
def test_a_device_as_output_is_refused(device, tmp_path, tiny_run):
    """Never replaced (as root, -o /dev/null would have replaced /dev/null); leave -o out for stdout."""
    g = good_files(tmp_path)
    before = os.lstat(device)
    assert_fails(tmp_path, _translate(tiny_run, g, "-o", device), (device,), timeout=30)
    after = os.lstat(device)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)


def test_average_out_inside_a_runs_checkpoints_is_refused(tmp_path, tiny_run):
    run = run_copy(tiny_run, tmp_path / "r")
    pointers = {n: (run / "checkpoints" / n).read_bytes() for n in ("BEST", "LAST")}
    for out in (run / "checkpoints" / "avg", run / "checkpoints" / "deeper" / "avg"):
        assert_fails(tmp_path, ["average", "--model", str(run), "--last", "1", "--out", str(out)],
                     (str(out), "inside the checkpoints"))
    assert {n: (run / "checkpoints" / n).read_bytes() for n in pointers} == pointers


def test_a_label_list_with_a_label_twice(tmp_path):
    from attnmt.data.labels import LabelSet
    from attnmt.errors import UserError

    (tmp_path / "labels.txt").write_text("pl\nsg\n")
    assert LabelSet.load(tmp_path).labels == ["pl", "sg"]
    (tmp_path / "labels.txt").write_text("pl\nsg\npl\n")
    with pytest.raises(UserError, match=r"labels.txt:3: duplicate label 'pl' \(also line 1\)"):
        LabelSet.load(tmp_path)
