"""Modified Kneser-Ney estimation: hand-computed values, lmplz's values, normalisation, pruning."""

import math

import numpy as np
import pytest
import torch

from attnmt.data.vocab import BOS, EOS, PAD, UNK
from attnmt.errors import UserError
from attnmt.ngram import NgramLM


def write(tmp_path, text, name="corpus.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_bigram_matches_hand_computation(tmp_path):
    # Sentences: <s> a b </s> (twice), <s> b </s>.
    lm = NgramLM.estimate_text(write(tmp_path, "a b\na b\nb\n"), order=2)
    a, b = lm.index["a"], lm.index["b"]
    # Unigram adjusted counts a:1 b:2 </s>:1 -> counts-of-counts (2, 1, 0) -> fallback 0.5, 1, 1.5.
    # Bigram raw counts <s>a:2 ab:2 b</s>:3 <s>b:1 -> t = (1, 2, 1, 0), Y = 0.2,
    # D1 = 1 - 2*0.2*2 = 0.2, D2 = 2 - 3*0.2*1/2 = 1.7, D3+ = 3.
    assert lm.info["discount_fallback"] == [1]
    assert lm.info["discounts"][1] == pytest.approx([0.2, 1.7, 3.0])
    # p(w) = u(w) + gamma0/|V|, gamma0 = (0.5+1+0.5)/4, |V| = {<unk>, </s>, a, b}.
    uni = {a: 0.25, b: 0.375, EOS: 0.25, UNK: 0.125}
    for w, p in uni.items():
        assert 10 ** lm.logprob([], w) == pytest.approx(p, rel=1e-6)
    # Context <s>: a:2, b:1, denominator 3, gamma = (1.7 + 0.2)/3.
    g = 1.9 / 3
    expected = {a: (2 - 1.7) / 3 + g * 0.25, b: (1 - 0.2) / 3 + g * 0.375, EOS: g * 0.25,
                UNK: g * 0.125}
    for w, p in expected.items():
        assert 10 ** lm.logprob([BOS], w) == pytest.approx(p, rel=1e-6)
    # Context a: b:2 -> p(b|a) = 0.3/2 + (1.7/2) p(b); context b: </s>:3 -> all mass backs off.
    assert 10 ** lm.logprob([a], b) == pytest.approx(0.15 + 0.85 * 0.375, rel=1e-6)
    assert 10 ** lm.logprob([b], EOS) == pytest.approx(0.25, rel=1e-6)
    assert 10 ** lm.logprob([a], a) == pytest.approx(0.85 * 0.25, rel=1e-6)


# lmplz -o 3 --discount_fallback on this corpus printed these (log10) values.
LMPLZ_TINY = "a b c\na b\nb c a\n\nc c c a b\n"
LMPLZ_VALUES = {
    ("<unk>",): (-1.0413927, 0.0),
    ("a",): (-0.74036264, -0.30103),
    ("c",): (-0.64345264, -0.30103),
    ("</s>",): (-0.49732465, 0.0),
    ("<s>", "</s>"): (-0.58654785, 0.0),
    ("<s>", "b"): (-0.7191734, -0.30103),
    ("c", "c"): (-0.5035736, -0.30103),
    ("<s>", "a", "b"): (-0.14744607, None),
    ("c", "c", "c"): (-0.39059964, None),
    ("b", "c", "</s>"): (-0.42073622, None),
}


def test_matches_lmplz_on_tiny_corpus(tmp_path):
    lm = NgramLM.estimate_text(write(tmp_path, LMPLZ_TINY), order=3)
    assert lm.info["counts"][1:] == [11, 11]
    for words, (logp, logb) in LMPLZ_VALUES.items():
        ids = lm.ids(list(words))
        e = lm._find(ids)
        assert e >= 0, words
        table = lm.tables[len(words) - 1]
        assert table.logp[e] == pytest.approx(logp, abs=2e-6), words
        if logb is not None:
            assert table.logb[e] == pytest.approx(logb, abs=2e-6), words


def random_corpus(rng, n_sent=300, vocab=30):
    # Zipf-ish words so every order has counts of 1..4 (real discounts, no fallback needed).
    probs = 1.0 / np.arange(1, vocab + 1)
    probs /= probs.sum()
    lines = []
    for _ in range(n_sent):
        n = rng.integers(0, 12)
        lines.append(" ".join(f"w{i}" for i in rng.choice(vocab, size=n, p=probs)))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("order,prune", [(1, None), (2, None), (3, None), (4, [0, 0, 1]),
                                         (5, [0, 1, 1, 2])])
def test_every_context_sums_to_one(tmp_path, order, prune):
    rng = np.random.default_rng(order)
    lm = NgramLM.estimate_text(write(tmp_path, random_corpus(rng)), order=order, prune=prune)
    V = lm.vocab_size
    ctx = torch.from_numpy(rng.integers(4, V, size=(200, max(order - 1, 1))))
    ctx[:50, 0] = BOS
    ctx[50:60, : max(order - 2, 0)] = BOS  # left-padded short histories
    ctx[60:70, -1] = UNK
    dist = lm.next_token_logprobs(ctx)
    assert dist.shape == (200, V)
    assert torch.all(dist[:, [PAD, BOS]] == -1e4)
    keep = torch.ones(V, dtype=torch.bool)
    keep[[PAD, BOS]] = False
    total = dist[:, keep].double().exp().sum(-1)
    assert torch.allclose(total, torch.ones_like(total), atol=1e-5)


def test_pruning_drops_singletons_and_keeps_contexts(tmp_path):
    rng = np.random.default_rng(0)
    path = write(tmp_path, random_corpus(rng, 400))
    full = NgramLM.estimate_text(path, order=3)
    pruned = NgramLM.estimate_text(path, order=3, prune=[0, 0, 1])
    assert pruned.info["counts"][:2] == full.info["counts"][:2]
    assert pruned.info["counts"][2] < full.info["counts"][2]
    # Every surviving trigram's prefix bigram exists: loading the ARPA back checks that.
    pruned.to_arpa(tmp_path / "p.arpa")
    NgramLM.from_arpa(tmp_path / "p.arpa")
    with pytest.raises(UserError, match="non-decreasing"):
        NgramLM.estimate_text(path, order=3, prune=[0, 2, 1])


def test_token_ids_with_unseen_vocabulary_entries():
    # Vocabulary of 12 ids, only 4..7 and UNK occur: 8..11 get exactly <unk>'s share when UNK
    # is unseen in that context, and the distribution stays normalised over 1..11 minus <s>.
    sents = [[4, 5, 6], [4, 5, 7], [5, 6], [4, 1, 7], [6, 6, 5, 4]] * 3
    lm = NgramLM.estimate(sents, vocab=12, order=3)
    dist = lm.next_token_logprobs(torch.tensor([[BOS, 4], [5, 6], [BOS, BOS]]))
    assert torch.allclose(dist[:, 8:], dist[:, 8:9].expand(-1, 4))
    keep = [i for i in range(12) if i not in (PAD, BOS)]
    assert torch.allclose(dist[:, keep].double().exp().sum(-1), torch.ones(3, dtype=torch.double),
                          atol=1e-6)
    with pytest.raises(ValueError):
        NgramLM.estimate([[4, 12]], vocab=12, order=2)


def test_refuses_empty_corpus_and_bad_order(tmp_path):
    with pytest.raises(UserError, match="empty corpus"):
        NgramLM.estimate_text(write(tmp_path, ""), order=3)
    with pytest.raises(UserError, match="order must be >= 1"):
        NgramLM.estimate_text(write(tmp_path, "a b\n"), order=0)


def test_invalid_utf8_and_reserved_words_name_the_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good line\nstill good\nbad \xff byte\n")
    with pytest.raises(UserError, match=r"bad\.txt:3: invalid UTF-8"):
        NgramLM.estimate_text(path, order=2)
    with pytest.raises(UserError, match=r"c\.txt:2: <s> may not occur"):
        NgramLM.estimate_text(write(tmp_path, "a b\nc <s> d\n", "c.txt"), order=2)


def test_discount_failure_without_fallback(tmp_path):
    with pytest.raises(UserError, match="discounts"):
        NgramLM.estimate_text(write(tmp_path, "a b\n"), order=2, discount_fallback=None)


def test_perplexity_matches_sentence_scores(tmp_path):
    rng = np.random.default_rng(3)
    lm = NgramLM.estimate_text(write(tmp_path, random_corpus(rng)), order=3)
    test = ["w1 w2 w3", "w0 zzz w1", "", "w5 w5 w5 w5 w5"]
    res = lm.perplexity(test)
    total = sum(lm.score_sentence(s) for s in test)
    assert res["oov"] == 1 and res["words"] == 11 and res["sentences"] == 4
    assert res["logprob10"] == pytest.approx(total, abs=1e-4)
    assert res["ppl"] == pytest.approx(10 ** (-total / 15), rel=1e-5)
    no_eos = sum(lm.score_sentence(s, eos=True) - lm.full_scores(s)[-1][0] for s in test)
    assert res["ppl_no_eos"] == pytest.approx(10 ** (-no_eos / 11), rel=1e-5)
    assert math.isfinite(res["ppl_no_oov"])
