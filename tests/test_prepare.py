"""attnmt data prepare: a corpus encoded once into memory-mapped arrays (data/prepare.py), read
back (data/prepared.py), by worker processes in chunks or in one process alike; every filter's
count; atomic output; bad input as one line."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnmt.data import sources
from attnmt.data.prepare import PrepareSpec, prepare
from attnmt.data.prepared import open_prepared
from attnmt.data.sources import parse_sources
from attnmt.data.vocab import load_tokenizer
from attnmt.errors import UserError

WORDS = "the a cat dog house sees has wants red big small old white table book".split()


def write_pairs(prefix: Path, pairs: list[tuple[str, str]]) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    Path(f"{prefix}.es").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """200 ordinary pairs and, by construction: 7 with an empty side, 5 identical, 4 with a side
    over 12 words, 3 with a ratio over 3 (and within 12)."""
    rng = random.Random(4)
    root = tmp_path_factory.mktemp("prep")
    pairs = [(sentence(rng, rng.randint(3, 8)), sentence(rng, rng.randint(3, 8))) for _ in range(200)]
    special = ([("", "uno dos")] * 3 + [("one two", "  ")] * 4 + [("same text here", "same text here")] * 5
               + [(sentence(rng, 14), "corto y ya")] * 4 + [("a b", sentence(rng, 10))] * 3)
    for i, pair in enumerate(special):
        pairs.insert(7 * i + 3, pair)
    write_pairs(root / "train", pairs)
    write_pairs(root / "dev", pairs[:20])
    return root, pairs


def spec_for(root: Path, **kw) -> PrepareSpec:
    base = dict(train=parse_sources(str(root / "train"), "translate", "en", "es"),
                dev=parse_sources(str(root / "dev"), "translate", "en", "es"),
                tokenizer="word", src_vocab_size=100, tgt_vocab_size=100, workers=1)
    base.update(kw)
    return PrepareSpec(**base)


def test_every_filter_is_counted_and_the_arrays_hold_what_the_tokenizers_make(corpus, tmp_path):
    root, pairs = corpus
    manifest = prepare(spec_for(root, max_len=12, max_ratio=3.0, drop_identical=True), tmp_path / "p",
                       say=lambda line: None)
    train = manifest["splits"]["train"]
    assert train["read"] == len(pairs) == 219
    assert train["removed"] == {"empty": 7, "identical": 5, "too_long": 4, "ratio": 3}
    assert train["pairs"] == 200
    corpus_ = open_prepared(tmp_path / "p")
    split = corpus_.split("train")
    src_tok, tgt_tok = load_tokenizer(tmp_path / "p", "src"), load_tokenizer(tmp_path / "p", "tgt")
    assert split.src.ids.dtype == np.uint16 and split.src.lengths.dtype == np.uint16
    kept = [(s, t) for s, t in pairs if s.strip() and t.strip() and s != t
            and len(s.split()) <= 12 and len(t.split()) <= 12
            and max(len(s.split()), len(t.split())) <= 3 * min(len(s.split()), len(t.split()))]
    assert len(kept) == len(split) == 200
    for i in (0, 57, 199):
        assert split.src.row(i).tolist() == src_tok.encode(kept[i][0])
        assert split.tgt.row(i).tolist() == tgt_tok.encode(kept[i][1])
    assert manifest["splits"]["dev"]["removed"] == {"empty": 3, "identical": 0, "too_long": 0, "ratio": 0}
    assert corpus_.split("dev").all_lines("tgt")[0] == pairs[0][1]
    assert manifest["files"]["train"][0][0]["sha256"] and manifest["tokenizers"]["src"]["sample"]["method"] == "all lines"


def test_filters_are_off_unless_asked(corpus, tmp_path):
    root, _ = corpus
    manifest = prepare(spec_for(root), tmp_path / "p", say=lambda line: None)
    assert manifest["splits"]["train"]["removed"] == {"empty": 7, "identical": 0, "too_long": 0, "ratio": 0}


def test_workers_in_chunks_give_the_same_arrays_as_one_process(corpus, tmp_path, monkeypatch):
    root, _ = corpus
    one = prepare(spec_for(root, tokenizer="bpe", src_vocab_size=60, tgt_vocab_size=60, keep_text=True),
                  tmp_path / "one", say=lambda line: None)
    monkeypatch.setattr(sources, "CHUNK_LINES", 17)  # 14 chunks per file
    many = prepare(spec_for(root, tokenizer="bpe", src_vocab_size=60, tgt_vocab_size=60, keep_text=True,
                            workers=2), tmp_path / "many", say=lambda line: None)
    assert one["splits"] == many["splits"]
    for name in sorted(os.listdir(tmp_path / "one")):
        if name.endswith((".npy", ".txt")):  # a .model records its own path
            assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes(), name


def test_a_tsv_and_weights_are_corpora_in_order(corpus, tmp_path):
    root, pairs = corpus
    tsv = tmp_path / "extra.tsv"
    tsv.write_text("".join(f"k{i}\tthe cat {i}\tel gato {i}\n" for i in range(30)), encoding="utf-8")
    spec = spec_for(root, train=parse_sources(f"{root}/train {tsv}:2.5", "translate", "en", "es"))
    manifest = prepare(spec, tmp_path / "p", say=lambda line: None)
    corpora = manifest["splits"]["train"]["corpora"]
    assert [(c["weight"], c["start"], c["pairs"]) for c in corpora] == [(1.0, 0, 212), (2.5, 212, 30)]
    split = open_prepared(tmp_path / "p").split("train")
    assert split.corpus_of(np.array([0, 211, 212, 241])).tolist() == [0, 0, 1, 1]


def test_an_unchanged_preparation_is_kept_and_a_changed_one_needs_force(corpus, tmp_path):
    root, _ = corpus
    said: list[str] = []
    prepare(spec_for(root), tmp_path / "p", say=said.append)
    before = (tmp_path / "p" / "train.src.ids.npy").stat().st_mtime_ns
    prepare(spec_for(root), tmp_path / "p", say=said.append)
    assert "prepared already" in said[-1]
    assert (tmp_path / "p" / "train.src.ids.npy").stat().st_mtime_ns == before
    with pytest.raises(UserError, match="other settings .*--force"):
        prepare(spec_for(root, max_len=5), tmp_path / "p")
    prepare(spec_for(root, max_len=5), tmp_path / "p", force=True, say=said.append)
    assert open_prepared(tmp_path / "p").manifest["filters"]["max_len"] == 5
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="did not write"):
        prepare(spec_for(root), tmp_path / "mine", force=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def test_a_failed_preparation_leaves_nothing_that_looks_finished(corpus, tmp_path, monkeypatch):
    root, _ = corpus
    from attnmt.data import encode

    def broken(*args, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(encode, "_merge", broken)
    with pytest.raises(UserError, match="No space left on device"):
        prepare(spec_for(root), tmp_path / "p", say=lambda line: None)
    assert sorted(os.listdir(tmp_path)) == []  # no OUT, no partial folder


def _prepare_command(root: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "attnmt", "data", "prepare", "--train", str(root / "train"),
            "--dev", str(root / "dev"), "--tokenizer", "word", "--vocab-size", "100", "--out", str(out),
            *extra]


def test_kill_9_at_random_points_leaves_no_corpus_and_a_rerun_finishes(corpus, tmp_path):
    """kill -9 while preparing: no OUT (only a partial folder, which the next run removes)."""
    import signal
    import time

    root, _ = corpus
    out = tmp_path / "p"
    rng = random.Random(2)
    for _ in range(3):
        proc = subprocess.Popen(_prepare_command(root, out), stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if (out / "manifest.json").exists():  # it finished before the kill: the output is whole
            assert open_prepared(out).split("train") is not None
            break
        assert not out.exists()
    done = subprocess.run(_prepare_command(root, out, "--force"), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(open_prepared(out).split("train")) == 212
    assert [p.name for p in tmp_path.iterdir()] == ["p"]  # partial folders gone


@pytest.fixture
def small_disk(tmpfs):
    """A 32 KiB tmpfs (as root), for a full disk; skipped where mounting is not allowed."""
    return tmpfs("32k")


def test_a_full_disk_is_one_line_and_leaves_no_corpus(corpus, small_disk):
    root, _ = corpus
    done = subprocess.run(_prepare_command(root, small_disk / "p"), capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "No space left on device" in lines[0] and "Traceback" not in done.stderr
    assert os.listdir(small_disk) == []


@pytest.mark.parametrize("case, words", [
    ("counts", ("line counts differ",)),
    ("utf8", ("train.es:2:", "invalid UTF-8")),
    ("weight", ("weight",)),
    ("missing", ("train.en", "not found")),
])
def test_bad_corpora_are_one_line_errors(corpus, tmp_path, case, words):
    root, pairs = corpus
    bad = tmp_path / "bad"
    write_pairs(bad / "train", pairs[:10])
    train = str(bad / "train")
    if case == "counts":
        Path(f"{train}.es").write_text("uno\n")
    elif case == "utf8":
        Path(f"{train}.es").write_bytes(b"uno\nd\xffos\n")
    elif case == "weight":
        train += ":0"
    else:
        os.unlink(f"{train}.en")
    cmd = [sys.executable, "-m", "attnmt", "data", "prepare", "--train", train, "--out", str(tmp_path / "p")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not (tmp_path / "p").exists()


def test_a_large_corpus_trains_its_tokenizer_on_a_random_sample(corpus, tmp_path):
    root, _ = corpus
    manifest = prepare(spec_for(root, sample=50, tokenizer="bpe", src_vocab_size=40, tgt_vocab_size=40),
                       tmp_path / "p", say=lambda line: None)
    sample = manifest["tokenizers"]["src"]["sample"]
    assert sample["method"] == "random lines" and 40 <= sample["sentences"] <= 50
    assert manifest["splits"]["train"]["pairs"] == 212  # every pair still encoded


def test_the_manifest_is_plain_json_and_the_arrays_plain_npy(corpus, tmp_path):
    root, _ = corpus
    prepare(spec_for(root), tmp_path / "p", say=lambda line: None)
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert manifest["format"] == "attnmt-prepared"
    ids = np.load(tmp_path / "p" / "train.tgt.ids.npy", allow_pickle=False)
    offsets = np.load(tmp_path / "p" / "train.tgt.off.npy", allow_pickle=False)
    assert offsets[-1] == len(ids) == manifest["splits"]["train"]["tokens"]["tgt"]


def test_an_ngram_from_the_prepared_ids_is_the_one_from_the_text(corpus, tmp_path):
    """ngram build --prepared reads the ids, not the text again: the same model, byte for byte."""
    root, pairs = corpus
    text = tmp_path / "lm.txt"
    text.write_text("".join(t + "\n" for _, t in pairs if t.strip()), encoding="utf-8")
    spec = PrepareSpec(train=parse_sources(str(text), "lm", "en", "es"), task="lm", tokenizer="bpe",
                       tgt_vocab_size=50, workers=1)
    prepare(spec, tmp_path / "p", say=lambda line: None)
    from attnmt.ngram.arpa import write_arpa
    from attnmt.ngram.stream import estimate_stream

    def arpa(source, tokenizer, name):
        vocab, tables, info, cleanup = estimate_stream(source, order=3, tokenizer=tokenizer)
        try:
            write_arpa(tmp_path / name, vocab, tables)
        finally:
            cleanup()
        return (tmp_path / name).read_bytes()

    from attnmt.cli.ngram import prepared_targets

    tok = load_tokenizer(tmp_path / "p", "tgt")
    assert arpa(prepared_targets(str(tmp_path / "p")), None, "a.arpa") == arpa(str(text), tok, "b.arpa")
    done = subprocess.run([sys.executable, "-m", "attnmt", "ngram", "build", "--order", "3", "--prepared",
                           str(tmp_path / "p"), "--arpa", str(tmp_path / "c.arpa")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "c.arpa").read_bytes() == (tmp_path / "a.arpa").read_bytes()


def test_the_tokenizer_sample_is_capped_by_characters_and_the_manifest_says_so(corpus, tmp_path):
    """sentencepiece's trainer needs memory by the character: a seeded random subset within
    --sample-chars, the same every time."""
    root, _ = corpus
    runs = [prepare(spec_for(root, sample_chars=2000, tokenizer="bpe", src_vocab_size=40, tgt_vocab_size=40),
                    tmp_path / name, say=lambda line: None) for name in ("a", "b")]
    sample = runs[0]["tokenizers"]["src"]["sample"]
    assert sample["characters"] <= 2000 < sum(len(s) for s, t in corpus[1] if s.strip() and t.strip())
    assert "2,000 characters" in sample["method"] and sample["limit_chars"] == 2000
    assert (tmp_path / "a" / "train.src.ids.npy").read_bytes() == (tmp_path / "b" / "train.src.ids.npy").read_bytes()
    assert set(runs[0]["phase_seconds"]) == {"index", "tokenizers", "encode"}
