"""ARPA and binary round trips, KenLM compatibility, malformed files, the CLI."""

import gzip

import numpy as np
import pytest
import torch

from attnmt.cli.main import main
from attnmt.errors import UserError
from attnmt.ngram import NgramLM, load_ngram


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(11)
    probs = 1.0 / np.arange(1, 41)
    probs /= probs.sum()
    lines = [" ".join(f"w{i}" for i in rng.choice(40, size=rng.integers(0, 12), p=probs))
             for _ in range(500)]
    path = tmp_path_factory.mktemp("arpa") / "train.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def lm(corpus):
    return NgramLM.estimate_text(corpus, order=4)


def same_tables(a, b):
    assert a.vocab == b.vocab
    for ta, tb in zip(a.tables, b.tables):
        assert np.array_equal(ta.word, tb.word) and np.array_equal(ta.prefix, tb.prefix)
        assert np.array_equal(ta.logp, tb.logp) and np.array_equal(ta.logb, tb.logb)


def test_arpa_and_binary_round_trip(lm, tmp_path):
    lm.to_arpa(tmp_path / "m.arpa")
    lm.to_arpa(tmp_path / "m.arpa.gz")
    lm.save(tmp_path / "m.ngram")
    for name in ("m.arpa", "m.arpa.gz", "m.ngram"):
        same_tables(lm, load_ngram(tmp_path / name))
    ctx = torch.tensor([[2, 5, 6], [7, 8, 9]])
    assert torch.equal(load_ngram(tmp_path / "m.ngram").next_token_logprobs(ctx),
                       lm.next_token_logprobs(ctx))


TEST_SENTENCES = ["w0 w1 w2", "w3 unseen w0 w0", "", "w1 w1 w1 w1 w1 w1", "w39 w38 w2 w5"]


def test_kenlm_gives_identical_scores_on_our_arpa(lm, tmp_path):
    kenlm = pytest.importorskip("kenlm")
    lm.to_arpa(tmp_path / "m.arpa")
    ken = kenlm.Model(str(tmp_path / "m.arpa"))
    for s in TEST_SENTENCES:
        ours = lm.full_scores(s)
        theirs = list(ken.full_scores(s))
        assert len(ours) == len(theirs)
        for (p, n, oov), (kp, kn, koov) in zip(ours, theirs):
            assert p == pytest.approx(kp, abs=1e-5) and n == kn and oov == koov
        assert lm.score_sentence(s, bos=False, eos=False) == pytest.approx(
            ken.score(s, bos=False, eos=False), abs=1e-5)


# An ARPA as lmplz writes it (lmplz -o 3 --discount_fallback on "a b c / a b / b c a / c c c a b").
KENLM_ARPA = """\\data\\
ngram 1=6
ngram 2=5
ngram 3=2

\\1-grams:
-1.0413927\t<unk>\t0
0\t<s>\t-0.30103
-0.49732465\t</s>\t0
-0.74036264\ta\t-0.30103
-0.74036264\tb\t-0.30103
-0.64345264\tc\t-0.30103

\\2-grams:
-0.4871055\ta </s>\t0
-0.53624266\t<s> a\t-0.30103
-0.3723859\ta b\t-0.30103
-0.3497219\tb c\t-0.30103
-0.5035736\tc c\t-0.30103

\\3-grams:
-0.14744607\t<s> a b
-0.4087667\ta b c

\\end\\
"""


def test_reads_kenlm_arpa(tmp_path):
    path = tmp_path / "k.arpa"
    path.write_text(KENLM_ARPA)
    lm = load_ngram(path)
    assert lm.order == 3 and lm.vocab[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    # By hand: p(c | a b) stored; p(a | b c) backs off: b(b c) + b(c) + p(a).
    assert lm.full_scores("a b c")[2][0] == pytest.approx(-0.4087667, abs=1e-6)
    assert lm.full_scores("b c a", eos=False)[2][0] == pytest.approx(
        -0.30103 - 0.30103 - 0.74036264, abs=1e-6)
    kenlm = pytest.importorskip("kenlm")
    ken = kenlm.Model(str(path))
    for s in ["a b c", "c c a b", "b x a", ""]:
        assert lm.score_sentence(s) == pytest.approx(ken.score(s), abs=1e-5)


@pytest.mark.parametrize("edit,line,message", [
    (lambda t: t.replace("ngram 2=5", "ngram 2=6"), 20, "has 5 entries but .* declares 6"),
    (lambda t: t.replace("-0.3723859\ta b", "-0.37x\ta b"), 17, "bad log probability"),
    (lambda t: t.replace("\\3-grams:", "\\4-grams:"), 21, r"expected the \\3-grams: section"),
    (lambda t: t.replace("\\end\\\n", ""), 24, r"expected \\end\\"),
    (lambda t: t.replace("<s> a b", "<s> a q"), 22, "'q' is not among the 1-grams"),
    (lambda t: t.replace("a b c\n", "c b c\n"), 23, "context 'c b' is not among the 2-grams"),
    (lambda t: t.replace("ngram 2=5", "ngram 2=five"), 3, "bad count line"),
    (lambda t: t.replace("\\data\\", "data"), 25, r"no \\data\\ section"),
    (lambda t: t.replace("-0.5035736\tc c\t", "-0.5035736\tc c\tnan"), 19, "bad backoff"),
])
def test_malformed_arpa_names_file_and_line(tmp_path, edit, line, message):
    path = tmp_path / "bad.arpa"
    path.write_text(edit(KENLM_ARPA))
    with pytest.raises(UserError, match=rf"bad\.arpa:{line}: .*{message}"):
        load_ngram(path)


def test_gzipped_and_binary_errors(tmp_path):
    gz = tmp_path / "k.arpa.gz"
    with gzip.open(gz, "wt") as f:
        f.write(KENLM_ARPA)
    assert load_ngram(gz).order == 3
    (tmp_path / "kenlm.bin").write_bytes(b"mmap lm http://kheafield.com/code format version 5")
    with pytest.raises(UserError, match="KenLM binary"):
        load_ngram(tmp_path / "kenlm.bin")
    with pytest.raises(UserError, match="not found"):
        load_ngram(tmp_path / "missing.arpa")


def test_blank_lines_are_skipped_by_the_buffer_and_counted(tmp_path, monkeypatch):
    """A .gz of a million blank lines (1 MB; 432 MB of them took minutes, a Python line each) is
    refused naming its last line, with a few hundred line reads; blank lines around the sections
    of a good file change nothing, and errors after them name the right line."""
    from attnmt.ngram import arpa

    calls = [0]
    next_line = arpa._Lines.next

    def counted(self):
        calls[0] += 1
        return next_line(self)

    monkeypatch.setattr(arpa._Lines, "next", counted)
    monkeypatch.setenv("ATTNMT_MAX_ARCHIVE_RATIO", "100000")  # let the whole file decompress
    blank = tmp_path / "blank.arpa.gz"
    blank.write_bytes(gzip.compress(b"\n" * 1_000_000 + b" \t \n" * 1000))
    with pytest.raises(UserError, match=r"blank\.arpa\.gz:1001000: not an ARPA file: no \\data\\"):
        load_ngram(blank)
    assert calls[0] < 1000

    padded = KENLM_ARPA.replace("\\data\\", "\n\n  \n\\data\\", 1).replace("\\2-grams:", "\n \n\\2-grams:")
    gz = tmp_path / "padded.arpa.gz"
    gz.write_bytes(gzip.compress((padded + "\n" * 5000).encode()))
    plain = load_ngram(_write_arpa(tmp_path, KENLM_ARPA))
    got = load_ngram(gz)
    assert got.order == plain.order and got.vocab == plain.vocab
    sentence = " ".join(plain.vocab[4:8])
    assert got.perplexity([sentence])["ppl"] == pytest.approx(plain.perplexity([sentence])["ppl"])
    gz.write_bytes(gzip.compress((padded + "\n" * 5000 + "junk\n").encode()))
    lines = padded.count("\n") + 5001
    with pytest.raises(UserError, match=rf"padded\.arpa\.gz:{lines}: text after"):
        load_ngram(gz)


def _write_arpa(tmp_path, text: str):
    path = tmp_path / "plain.arpa"
    path.write_text(text, encoding="utf-8")
    return path


def test_cli_build_ppl_query(corpus, tmp_path, capsys, monkeypatch):
    import io
    import json

    arpa, binary = tmp_path / "c.arpa", tmp_path / "c.ngram"
    assert main(["ngram", "build", "--order", "3", "--input", str(corpus), "--arpa", str(arpa),
                 "--binary", str(binary)]) == 0
    assert main(["ngram", "ppl", "--model", str(binary), "--input", str(corpus), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    direct = load_ngram(arpa).perplexity(corpus.read_text().split("\n")[:-1])
    assert res["ppl"] == pytest.approx(direct["ppl"], rel=1e-6)
    monkeypatch.setattr("sys.stdin", io.StringIO("w0 w1\nw2 zzz\n"))
    assert main(["ngram", "query", "--model", str(arpa)]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    assert len(out) == 3 and out[1].endswith("OOV: 1") and out[2].startswith("Total:")
    # Bad input is one line on stderr and exit status 2.
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xfe\n")
    assert main(["ngram", "build", "--input", str(bad), "--arpa", str(arpa)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"attnmt: error: {bad}:2: invalid UTF-8 (invalid start byte)"
    assert main(["ngram", "build", "--order", "0", "--input", str(corpus), "--arpa",
                 str(arpa)]) == 2


def test_cli_build_with_a_runs_target_vocabulary(tmp_path):
    from attnmt.data.vocab import UNK, WordTokenizer

    tok = WordTokenizer.build(["the cat sat .", "the dog sat !"], max_size=8)
    tok.save(tmp_path, "tgt")
    text = tmp_path / "t.txt"
    text.write_text("the cat sat .\nthe dog ran !\n")
    out = tmp_path / "m.ngram"
    assert main(["ngram", "build", "--order", "3", "--input", str(text), "--vocab-from",
                 str(tmp_path), "--binary", str(out)]) == 0
    lm = load_ngram(out)
    # Ids line up with the tokenizer's: one column per vocabulary entry, "ran" counted as <unk>.
    assert lm.vocab == tok.tokens and lm.vocab_size == len(tok)
    dist = lm.next_token_logprobs(torch.tensor([tok.encode("the dog")]))
    assert dist.shape == (1, len(tok))
    assert int(dist[0].argmax()) == UNK


def test_corrupt_binary_and_unwritable_vocab(lm, tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    lm.save(tmp_path / "m.ngram")
    arrays = load_file(str(tmp_path / "m.ngram"))
    with safe_open(str(tmp_path / "m.ngram"), "np") as f:
        meta = f.metadata()
    arrays["2.prefix"] = arrays["2.prefix"] + 10_000
    save_file(arrays, str(tmp_path / "bad.ngram"), metadata=meta)
    with pytest.raises(UserError, match="bad.ngram: corrupt n-gram binary"):
        load_ngram(tmp_path / "bad.ngram")
    spaced = NgramLM.estimate([[4, 5]], vocab=["<pad>", "<unk>", "<s>", "</s>", "a b", "c"],
                              order=2)
    with pytest.raises(UserError, match="contains whitespace"):
        spaced.to_arpa(tmp_path / "s.arpa")
    spaced.save(tmp_path / "s.ngram")
    assert load_ngram(tmp_path / "s.ngram").vocab[4] == "a b"
