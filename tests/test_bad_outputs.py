"""The malformed-input zoo, outputs: paths a command cannot or must not write.

A directory, a missing folder or a file where a folder should be, an output that is one of the
command's inputs (by name, through a link, or a run's own files: config.yaml, vocabularies,
checkpoints, log.jsonl; --dict, --ngram), an unwritable or full disk (experiment's table.md too),
a file of the same name in a generated data set's --out, a failure after the first of two outputs
(neither is left new). Every case ends with exit status 2 and one line ``attnmt: error: ...``
naming the output, and the input is left as it was.
The rest of the zoo is tests/test_bad_input.py; the shared runner is tests/bad_input_zoo.py.
"""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
from pathlib import Path

import pytest

from bad_input_zoo import GOOD_EN, assert_fails, good_files, run_cli, run_copy


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
    good = good_files(tmp_path)
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
    good = good_files(tmp_path)
    link = tmp_path / "link.en"
    link.symlink_to(good["en"])
    assert_fails(tmp_path, ["translate", "--model", str(tiny_run), "-i", str(good["en"]), "-o", str(link)],
                 ("would overwrite the input",))
    assert good["en"].read_text() == GOOD_EN


def test_write_errors_leave_no_temporary_file(tmp_path):
    from attnmt.data.corpus import write_lines

    def lines():
        yield "one"
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_lines(tmp_path / "out.txt", lines())
    assert list(tmp_path.iterdir()) == []


def test_an_output_group_renames_all_or_none(tmp_path, monkeypatch):
    from attnmt.data.corpus import output_group, write_lines
    from attnmt.errors import UserError

    a, b = tmp_path / "a", tmp_path / "b"
    with pytest.raises(RuntimeError), output_group():
        write_lines(a, ["one"])
        with output_group():  # an inner group joins the outer one
            write_lines(b, ["two"])
        assert sorted(p.name for p in tmp_path.iterdir()) == [".a.tmp", ".b.tmp"]
        raise RuntimeError("after both were complete")
    assert list(tmp_path.iterdir()) == []
    with output_group():
        write_lines(a, ["one"])
        write_lines(b, ["two"])
    assert a.read_text() == "one\n" and b.read_text() == "two\n"
    # a destination that cannot be replaced (b became a folder meanwhile) is found before any
    # rename: a stays as it was
    with pytest.raises(UserError, match=f"{re.escape(str(b))}: cannot be written"), output_group():
        write_lines(a, ["three"])
        write_lines(b, ["four"])
        b.unlink()
        b.mkdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"] and a.read_text() == "one\n"
    # a rename that fails at the end all the same (a race) says what is in place already
    b.rmdir()
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst) == b:
            raise PermissionError(errno.EPERM, "Operation not permitted", str(src))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    said = f"{re.escape(str(b))}: cannot be written .*; {re.escape(str(a))} already written"
    with pytest.raises(UserError, match=said), output_group():
        write_lines(a, ["five"])
        write_lines(b, ["six"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"] and a.read_text() == "five\n"


# -- an output that is a file the command reads: the run's own files, --dict, --ngram, a log -------------------
def _reads(run: Path, g: dict) -> list[tuple[str, list[str], str]]:
    """(name, argv, the file it must not overwrite): each wrote there, exit 0, losing that file."""
    en, es, d = str(g["en"]), str(g["es"]), g["en"].parent
    return [
        ("translate -o RUN/config.yaml", ["translate", "--model", str(run), "-i", en, "-o", str(run / "config.yaml")],
         str(run / "config.yaml")),
        ("translate -o RUN/src.vocab", ["translate", "--model", str(run), "-i", en, "-o", str(run / "src.vocab")],
         str(run / "src.vocab")),
        ("translate --alignments RUN/checkpoints/BEST", ["translate", "--model", str(run), "-i", en,
                                                         "--alignments", str(run / "checkpoints" / "BEST")],
         str(run / "checkpoints" / "BEST")),
        ("translate -o --dict", ["translate", "--model", str(run), "-i", en, "--replace-unk", "--dict",
                                 str(d / "d.tsv"), "-o", str(d / "d.tsv")], str(d / "d.tsv")),
        ("align -o RUN/tgt.vocab", ["align", "--model", str(run), "--src", en, "--tgt", es, "-o",
                                    str(run / "tgt.vocab")], str(run / "tgt.vocab")),
        ("ngram build --arpa --vocab-from RUN/tgt.vocab", ["ngram", "build", "--order", "2", "--input", es,
                                                           "--vocab-from", str(run), "--arpa",
                                                           str(run / "tgt.vocab")], str(run / "tgt.vocab")),
        ("heatmap --csv RUN/config.yaml", ["analyse", "heatmap", "--model", str(run), "--input", "a cat", "--out",
                                           str(d / "h.png"), "--csv", str(run / "config.yaml")],
         str(run / "config.yaml")),
        ("curves --csv RUN/log.jsonl", ["analyse", "curves", "--run", str(run), "--out", str(d / "c.png"), "--csv",
                                        str(run / "log.jsonl")], str(run / "log.jsonl")),
        ("lengths --out DIR holding --src as lengths.csv", ["analyse", "lengths", "--src", str(d / "L" / "lengths.csv"),
                                                             "--ref", es, "--hyp", es, "--out", str(d / "L")],
         str(d / "L" / "lengths.csv")),
    ]


READS = [name for name, _, _ in _reads(Path("RUN"), {"en": Path("d/en"), "es": Path("d/es")})]


@pytest.mark.parametrize("name", READS)
def test_an_output_never_overwrites_what_the_command_reads(name, tmp_path, tiny_run):
    good = good_files(tmp_path)
    run = run_copy(tiny_run, tmp_path / "run")
    (tmp_path / "d.tsv").write_text("cat\tgato\n", encoding="utf-8")
    (tmp_path / "L").mkdir()
    shutil.copyfile(good["en"], tmp_path / "L" / "lengths.csv")
    argv, kept = next((a, k) for n, a, k in _reads(run, good) if n == name)
    before = Path(kept).read_bytes()
    assert_fails(tmp_path, argv, (kept, "would overwrite the input"))
    assert Path(kept).read_bytes() == before, name


@pytest.mark.parametrize("failure", ["no-permission", "disk-full"])
def test_an_unwritable_output_is_named_by_its_own_name(failure, tmp_path, tiny_run, monkeypatch):
    """No permission named the temporary file (.hyp.tmp); a full disk was an OSError traceback."""
    import builtins

    from attnmt.data import corpus

    good = good_files(tmp_path)
    out = tmp_path / "hyp"
    real_open = builtins.open

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fake_open(file, mode="r", *args, **kwargs):
        if "w" not in mode:
            return real_open(file, mode, *args, **kwargs)
        if failure == "no-permission":
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        real_open(file, mode, *args, **kwargs).close()  # the temporary file exists, then the disk fills
        return Full()

    monkeypatch.setattr(corpus, "open", fake_open, raising=False)
    assert_fails(tmp_path, ["translate", "--model", str(tiny_run), "-i", str(good["en"]), "-o", str(out)],
                 (f"{out}: cannot be written", "Permission denied" if failure == "no-permission" else "No space"))


def test_experiment_table_is_written_atomically(tmp_path, monkeypatch):
    """table.md was written in place: a disk that filled (or a kill) left it cut off, the previous
    table lost."""
    import builtins

    from attnmt.errors import UserError
    from attnmt.eval.experiment import write_table

    table = tmp_path / "table.md"
    table.write_text("the previous table\n", encoding="utf-8")
    real_open = builtins.open

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fake_open(file, mode="r", *args, **kwargs):  # every writer's open, pathlib's included
        if "w" not in mode or Path(file).parent != tmp_path:
            return real_open(file, mode, *args, **kwargs)
        real_open(file, mode, *args, **kwargs).close()
        return Full()

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    row = {"label": "Base", "ppl": 9.5, "bleu": 1.0, "bleu_tok": 1.5, "chrf": 20.0}
    with pytest.raises(UserError, match=f"{re.escape(str(table))}: cannot be written"):
        write_table([row], table)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["table.md"]
    assert table.read_text(encoding="utf-8") == "the previous table\n"
    assert write_table([row], table) == table.read_text(encoding="utf-8")
    assert "| Base | 9.50 | 1.00 |  | 1.50 | 20.0 |" in table.read_text(encoding="utf-8")


# -- generated data sets: a file of the same name already in --out -------------------------------------------
DATA_SETS = [  # (command, a file it writes)
    (["data", "synthetic", "--train", "5", "--dev", "3", "--test", "3", "--names", "20"], "train.src"),
    (["data", "agreement", "--train", "5", "--test-per-bucket", "2", "--max-modifiers", "1"], "train.tsv"),
]


@pytest.mark.parametrize("argv,name", DATA_SETS, ids=["synthetic", "agreement"])
def test_a_data_set_never_overwrites_other_files_without_force(argv, name, tmp_path):
    """They replaced a user's file of the same name (e.g. a real train.src) without a word."""
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("my own corpus\n", encoding="utf-8")
    assert_fails(tmp_path, [*argv, "--out", str(out)], (str(out / name), "--force"))
    assert (out / name).read_text(encoding="utf-8") == "my own corpus\n"
    assert [p.name for p in out.iterdir()] == [name]  # refused before anything was written

    assert run_cli([*argv, "--out", str(out), "--force"])[0] == 0
    built = {p.name: p.read_bytes() for p in out.iterdir()}
    assert built[name] != b"my own corpus\n" and len(built) > 1
    stamp = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    status, _, err = run_cli([*argv, "--out", str(out)])  # the same build again: nothing to do
    assert status == 0, err
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamp
    assert {p.name: p.read_bytes() for p in out.iterdir()} == built
    assert_fails(tmp_path, [*argv, "--out", str(out), "--seed", "2"], ("--force",))  # another build
    assert {p.name: p.read_bytes() for p in out.iterdir()} == built


# -- two outputs of one command: both or neither -------------------------------------------------------------
def _disk_full_for(monkeypatch, module, name: str) -> None:
    """``open`` in ``module`` as on a disk that fills while the temporary file of output ``name``
    is written (the file exists, its first write fails); everything else opens as usual."""
    import builtins

    real_open = builtins.open

    class Full(io.BytesIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fake_open(file, mode="r", *args, **kwargs):
        if "w" not in mode or Path(file).name != f".{name}.tmp":
            return real_open(file, mode, *args, **kwargs)
        real_open(file, mode, *args, **kwargs).close()
        return Full()

    monkeypatch.setattr(module, "open", fake_open, raising=False)


@pytest.mark.parametrize("old", [False, True], ids=["new-files", "old-files"])
def test_translate_writes_output_and_alignments_or_neither(old, tmp_path, tiny_run, monkeypatch):
    """The translation stayed behind (replacing the old one) when --alignments failed."""
    from attnmt.data import corpus

    good = good_files(tmp_path)
    hyp, align = tmp_path / "hyp", tmp_path / "hyp.align"
    if old:
        hyp.write_text("old translation\n", encoding="utf-8")
        align.write_text("0-0\n", encoding="utf-8")
    _disk_full_for(monkeypatch, corpus, align.name)
    assert_fails(tmp_path, ["translate", "--model", str(tiny_run), "-i", str(good["en"]), "-o", str(hyp),
                            "--alignments", str(align)], (f"{align}: cannot be written", "No space"))
    assert (hyp.read_text(encoding="utf-8") if old else hyp.exists()) == ("old translation\n" if old else False)
    monkeypatch.undo()  # the same command on a working disk writes both
    status, _, err = run_cli(["translate", "--model", str(tiny_run), "-i", str(good["en"]), "-o", str(hyp),
                              "--alignments", str(align)])
    assert status == 0, err
    assert len(hyp.read_text().splitlines()) == len(align.read_text().splitlines()) == 3


@pytest.mark.parametrize("old", [False, True], ids=["new-files", "old-files"])
def test_ngram_build_writes_binary_and_arpa_or_neither(old, tmp_path, monkeypatch):
    """The binary model stayed behind (replacing the old one) when writing --arpa failed."""
    import random

    from attnmt.ngram import arpa

    rng, words = random.Random(0), [f"w{i}" for i in range(200)]
    text_in = tmp_path / "text"  # Zipf-like words: the discounts can be estimated (no warning)
    text_in.write_text("".join(" ".join(rng.choices(words, [1 / (i + 1) for i in range(200)], k=8)) + "\n"
                               for _ in range(300)), encoding="utf-8")
    binary, text = tmp_path / "m.ngram", tmp_path / "m.arpa"
    if old:
        binary.write_bytes(b"old model")
        text.write_bytes(b"old arpa")
    _disk_full_for(monkeypatch, arpa, text.name)
    assert_fails(tmp_path, ["ngram", "build", "--order", "2", "--input", str(text_in), "--binary", str(binary),
                            "--arpa", str(text), "--temp", str(tmp_path)], (f"{text}: cannot be written", "No space"))
    assert (binary.read_bytes() if old else binary.exists()) == (b"old model" if old else False)
    assert not old or text.read_bytes() == b"old arpa"
    monkeypatch.undo()
    status, _, err = run_cli(["ngram", "build", "--order", "2", "--input", str(text_in), "--binary",
                              str(binary), "--arpa", str(text), "--temp", str(tmp_path)])
    assert status == 0, err
    assert binary.read_bytes() != b"old model" and text.read_text().startswith("\\data\\")


@pytest.mark.parametrize("old", [False, True], ids=["new-files", "old-files"])
@pytest.mark.parametrize("command", ["heatmap", "curves"])
def test_analyse_writes_figure_and_csv_or_neither(command, old, tmp_path, tiny_run, monkeypatch):
    """The figure stayed behind (replacing the old one) when writing --csv failed."""
    from attnmt.data import corpus

    png, csv = tmp_path / "fig.png", tmp_path / "fig.csv"
    given = {"heatmap": ["--model", str(tiny_run), "--input", "a cat"], "curves": ["--run", str(tiny_run)]}
    argv = ["analyse", command, *given[command], "--out", str(png), "--csv", str(csv)]
    if old:
        png.write_bytes(b"old figure")
        csv.write_bytes(b"old csv")
    _disk_full_for(monkeypatch, corpus, csv.name)
    assert_fails(tmp_path, argv, (f"{csv}: cannot be written", "No space"))
    assert (png.read_bytes() if old else png.exists()) == (b"old figure" if old else False)
    assert not old or csv.read_bytes() == b"old csv"
    monkeypatch.undo()  # the same command on a working disk writes both
    status, _, err = run_cli(argv)
    assert status == 0, err
    assert png.read_bytes().startswith(b"\x89PNG") and len(csv.read_text(encoding="utf-8").splitlines()) > 1
