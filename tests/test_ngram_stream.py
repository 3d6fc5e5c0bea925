"""Streaming estimation == the in-memory estimator, byte for byte, on corpora that spill to disk."""

import numpy as np
import pytest

from attnmt.cli.main import main
from attnmt.errors import UserError
from attnmt.ngram import NgramLM, load_ngram
from attnmt.ngram import stream as stream_mod
from attnmt.ngram.arpa import write_arpa
from attnmt.ngram.external import Column, Columns, merge_runs
from attnmt.ngram.lines import format_g9
from attnmt.ngram.stream import estimate_stream, parse_memory


def zipf_text(rng, n_sent, vocab, max_len=14):
    probs = 1.0 / np.arange(1, vocab + 1)
    probs /= probs.sum()
    lines = []
    for _ in range(n_sent):
        n = rng.integers(0, max_len)
        lines.append(" ".join(f"w{i}" for i in rng.choice(vocab, size=n, p=probs)))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("stream") / "train.txt"
    path.write_text(zipf_text(np.random.default_rng(5), 700, 60))
    return path


def streamed_arpa(path, out, memory, **kwargs):
    vocab, tables, info, cleanup = estimate_stream(path, memory=memory, **kwargs)
    try:
        write_arpa(out, vocab, tables)
    finally:
        cleanup()
    return info


@pytest.mark.parametrize("order,prune", [(1, None), (2, None), (3, [0, 0, 1]), (4, [0, 1, 1, 2]),
                                         (5, None)])
def test_streaming_arpa_is_byte_identical(corpus, tmp_path, monkeypatch, order, prune):
    merges = []
    real_merge = stream_mod.merge_runs
    monkeypatch.setattr(stream_mod, "merge_runs",
                        lambda runs, *a, **k: (merges.append(len(runs)), real_merge(runs, *a, **k)))
    lm = NgramLM.estimate_text(corpus, order=order, prune=prune)
    lm.to_arpa(tmp_path / "memory.arpa")
    # ~4,800 tokens in chunks of ~100: dozens of sorted runs per order, merged from disk
    info = streamed_arpa(corpus, tmp_path / "stream.arpa", 12_000, order=order, prune=prune,
                         work_dir=tmp_path)
    assert (tmp_path / "stream.arpa").read_bytes() == (tmp_path / "memory.arpa").read_bytes()
    assert info == lm.info
    assert len(merges) == order - 1 and all(runs > 10 for runs in merges)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.arpa", "stream.arpa"]


def test_one_chunk_and_many_chunks_agree_with_a_tokenizer_vocabulary(tmp_path):
    class Pieces:  # a fixed vocabulary with ids absent from the text
        words = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(40)]

        def __len__(self):
            return len(self.words)

        def piece(self, i):
            return self.words[i]

        def encode(self, line):
            return [self.words.index(w) if w in self.words else 1 for w in line.split()]

    path = tmp_path / "t.txt"
    path.write_text(zipf_text(np.random.default_rng(2), 300, 50))
    lm = NgramLM.estimate_text(path, order=3, tokenizer=Pieces())
    write_arpa(tmp_path / "m.arpa", lm.vocab, lm.tables)
    for memory in (1 << 30, 10_000):
        streamed_arpa(path, tmp_path / "s.arpa", memory, order=3, tokenizer=Pieces())
        assert (tmp_path / "s.arpa").read_bytes() == (tmp_path / "m.arpa").read_bytes()


def test_cli_build_streams_and_writes_both_formats(corpus, tmp_path):
    lm = NgramLM.estimate_text(corpus, order=3)
    lm.to_arpa(tmp_path / "memory.arpa")
    code = main(["ngram", "build", "--order", "3", "--input", str(corpus), "--arpa",
                 str(tmp_path / "cli.arpa"), "--binary", str(tmp_path / "cli.ngram"),
                 "--memory", "64K", "--temp", str(tmp_path), "--no-progress"])
    assert code == 0
    assert (tmp_path / "cli.arpa").read_bytes() == (tmp_path / "memory.arpa").read_bytes()
    binary = load_ngram(tmp_path / "cli.ngram")
    for a, b in zip(binary.tables, lm.tables):
        assert np.array_equal(a.word, b.word) and np.array_equal(a.prefix, b.prefix)
        assert np.array_equal(a.logp, b.logp) and np.array_equal(a.logb, b.logb)
    assert binary.info == lm.info
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.arpa", "cli.ngram", "memory.arpa"]


def test_cli_build_errors(tmp_path, capsys):
    path = tmp_path / "c.txt"
    path.write_text("a b\n")
    assert main(["ngram", "build", "--input", str(path), "--arpa", str(tmp_path / "m.arpa"),
                 "--memory", "lots"]) == 2
    assert "bad memory size 'lots'" in capsys.readouterr().err
    empty = tmp_path / "e.txt"
    empty.write_text("")
    assert main(["ngram", "build", "--input", str(empty), "--arpa", str(tmp_path / "m.arpa"),
                 "--temp", str(tmp_path)]) == 2
    assert "empty corpus" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "e.txt"]  # nothing left over


def test_parse_memory():
    assert parse_memory("4G") == 4 << 30
    assert parse_memory("1.5m") == 3 << 19
    assert 0 < parse_memory("10%") < parse_memory("20%")
    assert parse_memory("100%") > parse_memory("99%")
    for bad in ("", "4X", "-1G", "1K", "0", "0%", "100.1%", "500%"):
        with pytest.raises(UserError):
            parse_memory(bad)


def test_format_g9_is_printf():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    values = np.concatenate([
        bits.view(np.float32),  # every exponent, nan and inf included
        -rng.random(100_000, dtype=np.float32) * 8,  # log10 probabilities
        np.float32([0.0, -0.0, 1.0, -1.0, 10.0, 1e-4, 1e-5, 9.99999944e-5, 123456789.0,
                    999999999.0, 1e9, 0.30103, -0.30103, -100.0, 3.4e38, 1e-45, np.inf,
                    -np.inf]),
    ])
    matrix, lengths, rows = format_g9(values)
    for i in range(len(values)):
        text = bytes(matrix[rows[i], : lengths[i]])
        assert text == ("%.9g" % float(values[i])).encode(), values[i]


def test_merge_runs(tmp_path):
    rng = np.random.default_rng(1)
    runs, expected = [], {}
    for r in range(5):
        keys = np.unique(rng.integers(0, 300, size=rng.integers(0, 120)))
        run = Columns(tmp_path / f"r{r}", {"key": np.int64, "count": np.int64,
                                            "suffix": np.int64})
        run.append(key=keys, count=np.ones(len(keys), np.int64), suffix=keys * 7)
        runs.append(run.finish())
        for k in keys.tolist():
            expected[k] = expected.get(k, 0) + 1
    out = Columns(tmp_path / "out", {"key": np.int64, "count": np.int64, "suffix": np.int64})
    maps = [Column(tmp_path / f"m{r}", np.int64) for r in range(5)]
    merge_runs(runs, out, maps, buffer=7)
    merged = out.read(0, len(out))
    assert merged["key"].tolist() == sorted(expected)
    assert merged["count"].tolist() == [expected[k] for k in sorted(expected)]
    assert np.array_equal(merged["suffix"], merged["key"] * 7)
    for run, m in zip(runs, maps):
        assert np.array_equal(merged["key"][m.read()], run["key"].read())


def reference_ids(text: str):
    """The reader's contract, spelled out: words split on space/tab/CR/NUL, ids by first
    occurrence after the specials, <unk> -> UNK, one <s> .. </s> per line."""
    from attnmt.data.vocab import BOS, EOS, SPECIALS, UNK
    from attnmt.ngram.corpus import split_words

    table = {w: i for i, w in enumerate(SPECIALS)}
    flat = []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    for line in lines:
        flat.append(BOS)
        for w in split_words(line):
            flat.append(UNK if w == "<unk>" else table.setdefault(w, len(table)))
        flat.append(EOS)
    return list(table), flat


@pytest.mark.parametrize("block_bytes", [16, 1 << 25])
def test_word_ids_match_the_reference(tmp_path, block_bytes):
    from attnmt.ngram.corpus import TextBlocks

    words = ["a", "abcdefgh", "abcdefghi", "ünïcödé", "日本語のテキスト", "<unk>", "x" * 40,
             "w1", "w10", "\u00a0nbsp"]
    rng = np.random.default_rng(4)
    lines = []
    for _ in range(200):
        n = rng.integers(0, 9)
        seps = rng.choice([" ", "  ", "\t", " \r ", "\0"], size=n + 1)
        lines.append("".join(s + w for s, w in zip(seps, rng.choice(words, size=n))) + seps[-1])
    for text in ("\n".join(lines) + "\n", "\n".join(lines), "\n\n" + "\n".join(lines) + "\n\n"):
        path = tmp_path / "t.txt"
        path.write_text(text, encoding="utf-8")
        reader = TextBlocks(path, block_bytes=block_bytes)
        flat = np.concatenate(list(reader.blocks())).tolist()
        vocab, expected = reference_ids(text)
        assert reader.vocab == vocab
        assert flat == expected
