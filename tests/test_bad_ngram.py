"""The malformed-input zoo, n-gram models: truncated, garbled and inconsistent ARPA files, gzipped
ARPA and binary models, through every command that loads one, and a bad n-gram path in a config.
Each case ends with exit status 2 and one line ``attnmt: error: ...`` naming the file: see
tests/test_bad_input.py."""

from __future__ import annotations

import gzip

import pytest

from bad_input_zoo import assert_fails, copy_corpus, good_files, run_cli, train_argv


# -- n-gram models (ARPA, gzipped ARPA, binary) -------------------------------------------------------------
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
    good = good_files(tmp_path)
    good["run"] = tiny_run
    path = tmp_path / ("m.arpa.gz" if name.startswith("gz") else "m.arpa")
    words: tuple[str, ...] = ()
    if name == "directory":
        path.mkdir()
    elif name != "missing":
        data, words = next((d, w) for n, d, w in _arpa_bads(tiny_arpa.read_bytes()) if n == name)
        path.write_bytes(data)
    assert_fails(tmp_path, argv(path, good), (str(path), *words), stdin=b"the cat\n")


def test_ngram_of_another_vocabulary_says_where_it_differs(tmp_path, tiny_run, tiny_arpa):
    """Equal sizes read 'vocabulary (29 entries) is not the run's target vocabulary (29 entries)'."""
    good = good_files(tmp_path)
    assert_fails(tmp_path, ["translate", "--model", str(tiny_run), "-i", str(good["en"]), "--ngram",
                            str(tiny_arpa), "--alpha", "0.1"],
                 (str(tiny_arpa), "is not the run's target vocabulary (id ", "--vocab-from"))
    assert_fails(tmp_path, ["ngram", "ppl", "--model", str(tmp_path), "--input", str(good["es"])],
                 (str(tmp_path), "is a directory"))


def test_bad_ngram_path_in_config(tmp_path, tiny_corpus):
    c = copy_corpus(tmp_path, tiny_corpus)
    arpa = tmp_path / "m.arpa"
    arpa.write_bytes(b"garbage\n")
    assert_fails(tmp_path, train_argv(tmp_path, c, "--set", f"ngram.path={arpa}"), (str(arpa),))
    assert_fails(tmp_path, train_argv(tmp_path, c, "--set", f"ngram.path={tmp_path / 'none.arpa'}"),
                 ("none.arpa",))


# -- binary models whose numbers are damaged: each was a perplexity (nan, or of n-grams a lookup cannot find),
#    exit 0 -------------------------------------------------------------------------------------------------------
def _nan(a):
    a[3] = float("nan")


def _positive(a):
    a[3] = 0.5


def _swap(a):
    a[[0, 1]] = a[[1, 0]]


BAD_BINARY_VALUES = [
    ("logp-nan", "2.logp", _nan, "log-probabilities"),
    ("logp-positive", "3.logp", _positive, "log-probabilities"),
    ("backoff-nan", "1.logb", _nan, "backoffs"),
    ("unsorted", "2.word", _swap, "not sorted"),
    ("unigram-ids", "1.word", _swap, "unigram table"),
]


@pytest.mark.parametrize("name,column,damage,words", BAD_BINARY_VALUES, ids=[b[0] for b in BAD_BINARY_VALUES])
def test_damaged_binary_values(name, column, damage, words, tmp_path, tiny_arpa):
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    from attnmt.ngram.model import NgramLM

    good, bad = tmp_path / "good.ngram", tmp_path / "bad.ngram"
    NgramLM.from_arpa(tiny_arpa).save(good)
    arrays = load_file(str(good))
    with safe_open(str(good), "np") as f:
        meta = f.metadata()
    damage(arrays[column])
    save_file(arrays, str(bad), metadata=meta)
    text = good_files(tmp_path)["es"]
    status, out, err = run_cli(["ngram", "ppl", "--model", str(good), "--input", str(text)])
    assert status == 0 and "nan" not in out, err  # the undamaged copy loads
    assert_fails(tmp_path, ["ngram", "ppl", "--model", str(bad), "--input", str(text)],
                 (str(bad), "corrupt n-gram binary", words))
