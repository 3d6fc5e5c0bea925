"""NgramRes (Li et al. 2022): the residual head, Prob-Inter, annealing, plug and play, training."""

from __future__ import annotations

import json
import random
import signal

import pytest
import torch

from attnmt.config import Config, ModelConfig
from attnmt.data.vocab import BOS, PAD
from attnmt.decode.search import beam_search, greedy_search
from attnmt.errors import UserError
from attnmt.models.lm import LSTMLM, sample
from attnmt.models.seq2seq import Seq2Seq
from attnmt.ngram.model import NEG, NgramLM
from attnmt.ngram.residual import (
    NgramResidual,
    annealed_alpha,
    check_vocab,
    checkpoint_step,
    combine,
    override,
    unwrap,
)

V = 14  # 4 specials + 10 words (ids 4..13)
WORDS = list(range(4, V))


def rule_a(a: int, b: int) -> int:
    """Next word as a function of the previous TWO words: a trigram determines it, a bigram not."""
    return 4 + (a + 3 * b) % 10


def rule_b(a: int, b: int) -> int:
    return 4 + (7 * a + b + 5) % 10


def rule_corpus(rule, n: int = 300, length: int = 30, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = [rng.choice(WORDS), rng.choice(WORDS)]
        while len(s) < length:
            s.append(rule(s[-2], s[-1]))
        out.append(s)
    return out


@pytest.fixture(scope="module")
def ngram_a() -> NgramLM:
    return NgramLM.estimate(rule_corpus(rule_a), V, order=3)


@pytest.fixture(scope="module")
def ngram_b() -> NgramLM:
    return NgramLM.estimate(rule_corpus(rule_b, seed=1), V, order=3)


def lstm_lm(seed: int = 0) -> LSTMLM:
    torch.manual_seed(seed)
    cfg = ModelConfig(layers=2, hidden=16, embed=16, dropout=0.0)
    return LSTMLM(cfg, V, init_uniform=0.1).eval()


def seq2seq(seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    cfg = ModelConfig(layers=1, hidden=16, embed=16, dropout=0.0, attention="global", score="general")
    return Seq2Seq(cfg, 12, V, init_uniform=0.1).eval()


def lm_batch(B: int = 3, T: int = 7, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tgt = torch.randint(4, V, (B, T), generator=g)
    tgt_in = torch.cat([torch.full((B, 1), BOS), tgt[:, :-1]], dim=1)
    tgt_in[0, 5:] = PAD  # a shorter sentence in the batch
    return torch.zeros((B, 0), dtype=torch.long), torch.zeros(B, dtype=torch.long), tgt_in


def src_batch(B: int = 3, S: int = 5, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 12, (B, S), generator=g)
    lengths = torch.tensor([S, S - 1, S - 2][:B])
    for b in range(B):
        src[b, lengths[b]:] = PAD
    return src, lengths


def stepwise(model, src, lengths, tgt_in) -> torch.Tensor:
    """Scores of every position by step-by-step decoding along tgt_in: (B, T, V)."""
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    out = []
    for t in range(tgt_in.size(1)):
        scores, state, _ = model.step(tgt_in[:, : t + 1], state, enc, False)
        out.append(scores)
    return torch.stack(out, dim=1)


# -- the combination ------------------------------------------------------------------------------
def test_alpha_zero_is_the_plain_model_exactly(ngram_a):
    for make, (src, lengths) in ((lstm_lm, lm_batch()[:2]), (seq2seq, src_batch())):
        plain = make()
        wrapped = NgramResidual(make(), ngram_a, alpha=0.0)
        _, _, tgt_in = lm_batch()
        assert torch.equal(plain(src, lengths, tgt_in)[0], wrapped(src, lengths, tgt_in)[0])
        assert torch.equal(stepwise(plain, src, lengths, tgt_in), stepwise(wrapped, src, lengths, tgt_in))
        g_plain, g_wrap = greedy_search(plain, src, lengths), greedy_search(wrapped, src, lengths)
        assert [h[0].tokens for h in g_plain] == [h[0].tokens for h in g_wrap]
        b_plain, b_wrap = beam_search(plain, src, lengths, 3), beam_search(wrapped, src, lengths, 3)
        assert [(h[0].tokens, h[0].logprob) for h in b_plain] == [(h[0].tokens, h[0].logprob) for h in b_wrap]


def test_residual_is_logits_plus_alpha_logp_and_normalised(ngram_a):
    src, lengths, tgt_in = lm_batch()
    plain = lstm_lm()
    wrapped = NgramResidual(lstm_lm(), ngram_a, alpha=0.3)
    logits = plain(src, lengths, tgt_in)[0]
    combined = wrapped(src, lengths, tgt_in)[0]
    ng = ngram_a.sequence_logprobs(tgt_in)
    torch.testing.assert_close(combined, logits + 0.3 * ng)
    logp = torch.log_softmax(combined, dim=-1)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(tgt_in.shape))
    # eq. 11: the n-gram acts as a weight P_ng^α on exp(φ), renormalised
    p = ng.exp() ** 0.3 * logits.exp()
    torch.testing.assert_close(logp.exp(), p / p.sum(-1, keepdim=True), rtol=1e-4, atol=1e-6)


def test_prob_inter_is_normalised_mixture(ngram_a):
    src, lengths, tgt_in = lm_batch()
    plain = lstm_lm()
    inter = NgramResidual(lstm_lm(), ngram_a, mode="interp", lam=0.7)
    out = inter(src, lengths, tgt_in)[0]
    torch.testing.assert_close(torch.logsumexp(out, -1), torch.zeros(tgt_in.shape), atol=1e-5, rtol=0)
    expected = 0.7 * torch.softmax(plain(src, lengths, tgt_in)[0], -1) + 0.3 * ngram_a.sequence_logprobs(tgt_in).exp()
    torch.testing.assert_close(out.exp(), expected, atol=1e-6, rtol=1e-5)
    # log-probabilities pass the search's log_softmax unchanged
    torch.testing.assert_close(torch.log_softmax(out, -1), out, atol=1e-5, rtol=0)
    step = stepwise(inter, src, lengths, tgt_in)
    torch.testing.assert_close(torch.logsumexp(step, -1), torch.zeros(tgt_in.shape), atol=1e-5, rtol=0)
    # λ = 1 is the neural model, λ = 0 the n-gram model
    logits = plain(src, lengths, tgt_in)[0]
    ng = ngram_a.sequence_logprobs(tgt_in)
    torch.testing.assert_close(combine(logits, ng, "interp", 0, 1.0), torch.log_softmax(logits, -1))
    torch.testing.assert_close(combine(logits, ng, "interp", 0, 0.0), ng)


def test_ngram_term_uses_the_right_context_at_every_position(ngram_a):
    """rule_a makes the next word a function of the previous two; with a zero network and a large
    α, the combined argmax must follow the rule at every position with two words of context, in
    teacher forcing and in step-by-step decoding."""
    model = lstm_lm()
    with torch.no_grad():
        model.output.weight.zero_()
        model.output.bias.zero_()
    wrapped = NgramResidual(model, ngram_a, alpha=20.0)
    sents = rule_corpus(rule_a, n=4, length=8, seed=7)
    tgt_in = torch.tensor([[BOS] + s[:-1] for s in sents])
    src, lengths = torch.zeros((4, 0), dtype=torch.long), torch.zeros(4, dtype=torch.long)
    for scores in (wrapped(src, lengths, tgt_in)[0], stepwise(wrapped, src, lengths, tgt_in)):
        pred = scores.argmax(-1)
        for b, s in enumerate(sents):
            for t in range(2, len(s)):  # position t of tgt_in (history <s> s_0..s_{t-1}) predicts s_t
                assert int(pred[b, t]) == rule_a(s[t - 2], s[t - 1]) == s[t]
    # and each row is exactly the n-gram's distribution for that row's history
    ng = ngram_a.sequence_logprobs(tgt_in)
    for t in range(tgt_in.size(1)):
        torch.testing.assert_close(ng[:, t], ngram_a.next_token_logprobs(tgt_in[:, : t + 1]))


class RecordingNgram:
    """A fake order-3 model that predicts (a + 3b) and records the contexts it is asked about."""

    order = 3
    vocab_size = V

    def __init__(self):
        self._device = torch.device("cpu")
        self.contexts: list[list[list[int]]] = []

    def to(self, device):
        self._device = torch.device(device)
        return self

    def next_token_logprobs(self, ctx: torch.Tensor) -> torch.Tensor:
        self.contexts.append(ctx.tolist())
        out = torch.full((ctx.size(0), V), NEG)
        a = ctx[:, -2] if ctx.size(1) > 1 else torch.full((ctx.size(0),), BOS)
        out[torch.arange(ctx.size(0)), 4 + (a + 3 * ctx[:, -1]) % 10] = 0.0
        return out


def test_step_passes_the_last_n_minus_1_tokens():
    fake = RecordingNgram()
    wrapped = NgramResidual(lstm_lm(), fake, alpha=1.0)
    src, lengths, tgt_in = lm_batch(B=2, T=5)
    tgt_in[0, 5:] = PAD
    stepwise(wrapped, src, lengths, tgt_in)
    assert len(fake.contexts) == 5
    for t, ctx in enumerate(fake.contexts):
        assert ctx == tgt_in[:, max(0, t - 1) : t + 1].tolist()


def test_teacher_forcing_equals_step_by_step_with_the_residual(ngram_a):
    src, lengths, tgt_in = lm_batch()
    models = [(NgramResidual(lstm_lm(), ngram_a, alpha=0.5), (src, lengths))]
    models.append((NgramResidual(seq2seq(), ngram_a, alpha=0.5), src_batch()))
    try:
        from attnmt.models.transformer import Transformer, TransformerLM

        cfg = ModelConfig(type="transformer", layers=2, hidden=16, heads=2, ff=32, dropout=0.0)
        torch.manual_seed(0)
        models.append((NgramResidual(TransformerLM(cfg, V).eval(), ngram_a, alpha=0.5), (src, lengths)))
        models.append((NgramResidual(Transformer(cfg, 12, V).eval(), ngram_a, alpha=0.5), src_batch()))
    except ImportError:  # the Transformer is optional here
        pass
    for wrapped, (s, n) in models:
        forced = wrapped(s, n, tgt_in)[0]
        torch.testing.assert_close(stepwise(wrapped, s, n, tgt_in), forced, atol=2e-4, rtol=1e-4)


def test_swapping_the_ngram_changes_predictions_not_parameters(ngram_a, ngram_b):
    model = NgramResidual(lstm_lm(), ngram_a, alpha=20.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    src, lengths = torch.zeros((6, 0), dtype=torch.long), torch.zeros(6, dtype=torch.long)
    out_a = [h[0].tokens for h in greedy_search(model, src, lengths, max_len_extra=8)]
    model.set_ngram(ngram_b)
    out_b = [h[0].tokens for h in greedy_search(model, src, lengths, max_len_extra=8)]
    assert out_a != out_b
    # teacher-forced on the same words, each n-gram imposes its own rule from position 2 on
    words = rule_corpus(rule_a, n=1, length=8, seed=3)[0]
    tgt_in = torch.tensor([[BOS] + words[:-1]])
    for lm, rule in ((ngram_a, rule_a), (ngram_b, rule_b)):
        model.set_ngram(lm)
        pred = model(src[:1], lengths[:1], tgt_in)[0].argmax(-1)[0].tolist()
        assert all(pred[t] == rule(words[t - 2], words[t - 1]) for t in range(2, len(words)))
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_state_dict_is_the_plain_models(ngram_a):
    plain = lstm_lm(seed=3)
    wrapped = NgramResidual(lstm_lm(seed=4), ngram_a, alpha=0.2)
    assert wrapped.state_dict().keys() == plain.state_dict().keys()
    wrapped.load_state_dict(plain.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(wrapped.parameters(), plain.parameters()))
    assert sum(p.numel() for p in wrapped.parameters()) == sum(p.numel() for p in plain.parameters())
    assert unwrap(wrapped) is wrapped.model and wrapped.has_attention is False


def test_annealing_reaches_zero_at_step_k(ngram_a):
    assert annealed_alpha(0.4, 100, 0) == 0.4
    assert annealed_alpha(0.4, 100, 50) == pytest.approx(0.2)
    assert annealed_alpha(0.4, 100, 99) > 0
    assert annealed_alpha(0.4, 100, 100) == 0.0 and annealed_alpha(0.4, 100, 500) == 0.0
    assert annealed_alpha(0.4, 0, 10**6) == 0.4
    step = {"s": 0}
    wrapped = NgramResidual(lstm_lm(), ngram_a, alpha=0.4, anneal_steps=10, step_fn=lambda: step["s"])
    plain = lstm_lm()
    src, lengths, tgt_in = lm_batch()
    assert not torch.equal(wrapped(src, lengths, tgt_in)[0], plain(src, lengths, tgt_in)[0])
    step["s"] = 10
    assert wrapped.alpha == 0.0
    assert torch.equal(wrapped(src, lengths, tgt_in)[0], plain(src, lengths, tgt_in)[0])


def test_sampling_follows_a_dominant_ngram(ngram_a):
    model = lstm_lm()
    wrapped = NgramResidual(model, ngram_a, alpha=50.0)
    g = torch.Generator().manual_seed(0)
    seqs = sample(wrapped, 12, max_len=9, generator=g)
    assert sum(len(seq) >= 4 for seq in seqs) >= 3
    for seq in seqs:  # from two words of context on, the trigram rule decides every word
        assert all(seq[t] == rule_a(seq[t - 2], seq[t - 1]) for t in range(2, len(seq)))


def test_user_errors(ngram_a):
    with pytest.raises(UserError, match="mode"):
        NgramResidual(lstm_lm(), ngram_a, mode="mix")
    with pytest.raises(UserError, match="alpha"):
        NgramResidual(lstm_lm(), ngram_a, alpha=-1)
    with pytest.raises(UserError, match="lam"):
        NgramResidual(lstm_lm(), ngram_a, mode="interp", lam=1.5)

    class Tok:
        def __len__(self):
            return V + 1

        def piece(self, i):
            return f"w{i}"

    with pytest.raises(UserError, match="vocab-from"):
        check_vocab(ngram_a, Tok(), "x.bin")
    with pytest.raises(UserError, match="--ngram"):
        override(lstm_lm(), Config(), Tok(), alpha=0.5)
    assert checkpoint_step("run/checkpoints/step-00001200") == 1200


# -- end to end: train with the n-gram, checkpoints, load, plug and play, eval -------------------
def _write_lm_corpus(d, rule, n, seed):
    lines = [" ".join(f"w{x}" for x in s) for s in rule_corpus(rule, n=n, length=10, seed=seed)]
    (d / "text.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return d / "text.txt"


def _train(config, run, overrides=()):
    from attnmt.train.run import run_training

    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run_training(str(config), str(run), list(overrides), resume=False)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)


LM_CONFIG = """\
task: lm
data: {{train: {train}, dev: {dev}, tokenizer: word, tgt_vocab_size: 100, max_len: 20}}
model: {{type: lstm, layers: 1, hidden: 16, embed: 16, dropout: 0.0}}
train: {{optimizer: adam, lr: 0.02, warmup: 1, epochs: 50, max_steps: 12, batch_size: 32,
        init_uniform: 0.1, device: cpu, threads: 1, log_every: 100, valid_every: 6}}
ngram: {{path: train, order: 3, alpha: 0.5, anneal_steps: {k}}}
"""


def test_training_with_the_residual_end_to_end(tmp_path, capsys):
    from attnmt.cli.main import main
    from attnmt.runs.checkpoint import find_checkpoint, load_weights
    from attnmt.runs.loader import load_run

    d = tmp_path / "data"
    (d / "b").mkdir(parents=True)
    d.mkdir(exist_ok=True)
    train = _write_lm_corpus(d, rule_a, 200, 0)
    dev = d / "dev.txt"
    dev.write_text("".join(" ".join(f"w{x}" for x in s) + "\n" for s in rule_corpus(rule_a, 20, length=10, seed=5)))
    other = _write_lm_corpus(d / "b", rule_b, 200, 1)
    config = tmp_path / "lm.yaml"
    config.write_text(LM_CONFIG.format(train=train, dev=dev, k=12))
    run = tmp_path / "run"
    summary = _train(config, run)
    assert summary["step"] == 12
    assert (run / "ngram.train.bin").is_file()
    # the checkpoint holds the neural weights only, and loads into the plain model
    weights = load_weights(find_checkpoint(run, "last") / "model.safetensors")
    loaded = load_run(run, "last", "cpu")
    model, cfg, tgt_tok = loaded.model, loaded.cfg, loaded.tgt_tok
    assert isinstance(model, NgramResidual) and model.alpha == 0.0  # annealed to 0 at step 12 = K
    assert weights.keys() == model.model.state_dict().keys()
    assert all(torch.equal(weights[k], v) for k, v in model.model.state_dict().items())

    # eval: the configured setting (α annealed to 0) equals α = 0 in a grid, and the n-gram alone
    assert main(["eval", "--model", str(run), "--checkpoint", "last", "--input", str(dev), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["results"][0]
    assert plain["setting"] == "neural" and plain["tokens"] == 20 * 11 and plain["words"] == 20 * 10
    assert plain["word_ppl"] == pytest.approx(plain["ppl"])  # word tokenizer, one token per word
    assert main(["eval", "--model", str(run), "--checkpoint", "last", "--input", str(dev),
                 "--alpha", "0,1,3", "--lambda", "0.5", "--ngram-only", "--json"]) == 0
    rows = {r["setting"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert rows["neural"]["ppl"] == pytest.approx(plain["ppl"])
    assert rows["ngram"]["ppl"] < 3.0  # the rule is deterministic after two words
    assert rows["ngramres alpha=3"]["ppl"] < rows["neural"]["ppl"]

    # plug and play: an n-gram of another "domain" over the same vocabulary, no retraining
    from attnmt.data.batching import encode_corpus
    from attnmt.data.corpus import read_lines
    from attnmt.ngram.residual import build_train_ngram

    ids = encode_corpus(tgt_tok, read_lines(str(other)))
    build_train_ngram(ids, tgt_tok, 3, tmp_path / "b.bin")
    dev_b = d / "b" / "dev.txt"
    dev_b.write_text("".join(" ".join(f"w{x}" for x in s) + "\n" for s in rule_corpus(rule_b, 20, length=10, seed=6)))
    args = ["eval", "--model", str(run), "--checkpoint", "last", "--input", str(dev_b), "--alpha", "2", "--json"]
    assert main(args) == 0
    own = json.loads(capsys.readouterr().out)["results"][0]["ppl"]
    assert main(args + ["--ngram", str(tmp_path / "b.bin")]) == 0
    swapped = json.loads(capsys.readouterr().out)["results"][0]["ppl"]
    assert swapped < own
    after = load_weights(find_checkpoint(run, "last") / "model.safetensors")
    assert all(torch.equal(after[k], weights[k]) for k in weights)
    # --tune-on picks the best grid value on a separate tuning file and reports it on the input
    tune_b = d / "b" / "tune.txt"
    tune_b.write_text("".join(" ".join(f"w{x}" for x in s) + "\n" for s in rule_corpus(rule_b, 20, length=10, seed=7)))
    grid = ["eval", "--model", str(run), "--checkpoint", "last", "--input", str(dev_b), "--alpha", "0,2",
            "--ngram", str(tmp_path / "b.bin")]
    assert main(grid + ["--tune-on", str(tune_b), "--json"]) == 0
    tuned = json.loads(capsys.readouterr().out)
    assert tuned["best"] == "ngramres alpha=2" and "best_on_test" not in tuned
    # never on the test input: a grid alone picks nothing; --pick-on-test labels its choice
    assert main(grid + ["--json"]) == 0
    plain_grid = json.loads(capsys.readouterr().out)
    assert plain_grid["best"] is None and "best_on_test" not in plain_grid and len(plain_grid["results"]) == 2
    assert main(grid) == 0
    assert "best" not in capsys.readouterr().out
    assert main(grid + ["--pick-on-test", "--json"]) == 0
    on_test = json.loads(capsys.readouterr().out)
    assert on_test["best"] is None and on_test["best_on_test"] == "ngramres alpha=2"
    assert main(grid + ["--pick-on-test"]) == 0
    assert "alpha=2" in (text := capsys.readouterr().out) and "tuned on test" in text
    assert main(grid + ["--tune-on", str(dev_b)]) == 2  # the same file is not a separate tuning set
    assert "different file" in capsys.readouterr().err
    assert main(grid + ["--tune-on", str(tune_b), "--pick-on-test"]) == 2
    # errors are one-line user errors
    assert main(["eval", "--model", str(run), "--input", str(dev), "--alpha", "x"]) == 2
    model_b = override(unwrap(model), cfg, tgt_tok, str(tmp_path / "b.bin"), alpha=0.5)
    assert isinstance(model_b, NgramResidual) and model_b.alpha == 0.5


def test_translation_with_the_residual(tiny_corpus, tmp_path, capsys):
    """Decoder-side NgramRes on the tiny translation task; translate --ngram swaps the n-gram."""
    from attnmt.cli.main import main

    run = tmp_path / "run"
    _train(tiny_corpus.config, run, ["ngram.path=train", "ngram.alpha=0.3", "train.max_steps=8",
                                     "train.epochs=1"])
    assert (run / "ngram.train.bin").is_file()
    from attnmt.decode.translate import Translator

    tr = Translator.from_run(run, "last", "cpu")
    assert isinstance(tr.model, NgramResidual) and tr.model.alpha == pytest.approx(0.3)
    src = tiny_corpus.directory / "dev.en"
    out1, out2 = tmp_path / "o1", tmp_path / "o2"
    assert main(["translate", "--model", str(run), "--checkpoint", "last", "--input", str(src),
                 "--output", str(out1), "--beam", "2", "--device", "cpu"]) == 0
    assert main(["translate", "--model", str(run), "--checkpoint", "last", "--input", str(src),
                 "--output", str(out2), "--beam", "2", "--device", "cpu", "--alpha", "0"]) == 0
    assert len(out1.read_text().splitlines()) == len(out2.read_text().splitlines()) == 64
    # attnmt eval on a parallel corpus: α = 0.3 as trained, α = 0 the decoder alone
    assert main(["eval", "--model", str(run), "--checkpoint", "last", "--input",
                 str(tiny_corpus.directory / "dev"), "--alpha", "0,0.3", "--json"]) == 0
    rows = {r["setting"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert rows.keys() == {"neural", "ngramres alpha=0.3"}
    assert rows["neural"]["ppl"] != rows["ngramres alpha=0.3"]["ppl"]
    bad = tmp_path / "bad.bin"
    NgramLM.estimate([[4, 5, 6]], V, order=2).save(bad)
    assert main(["translate", "--model", str(run), "--checkpoint", "last", "--input", str(src),
                 "--ngram", str(bad), "--device", "cpu"]) == 2



def test_domain_ngrams_score_each_sentence_with_its_own(ngram_a, ngram_b):
    """A batch carrying domain indices as its one source token: row k uses n-gram k."""
    model = NgramResidual(lstm_lm(), ngram_a, alpha=1.0)
    model.domain_ngrams = [ngram_a, ngram_b]
    _, _, tgt_in = lm_batch(B=4)
    domain = torch.tensor([[1], [0], [1], [0]])
    with torch.no_grad():
        mixed, _ = model(domain, torch.ones(4, dtype=torch.long), tgt_in)
        model.set_ngram(ngram_a)
        only_a, _ = model(domain[:, :0], torch.zeros(4, dtype=torch.long), tgt_in)  # no index: self.ngram
        model.set_ngram(ngram_b)
        only_b, _ = model(domain[:, :0], torch.zeros(4, dtype=torch.long), tgt_in)
    torch.testing.assert_close(mixed[[1, 3]], only_a[[1, 3]])
    torch.testing.assert_close(mixed[[0, 2]], only_b[[0, 2]])
    assert not torch.allclose(only_a, only_b)


DOMAIN_CONFIG = """\
task: lm
data: {{train: "{d}/{{domain}}/text.txt", dev: "{d}/{{domain}}/dev.txt", tokenizer: word, tgt_vocab_size: 100, max_len: 20}}
model: {{type: lstm, layers: 1, hidden: 16, embed: 16, dropout: 0.0}}
train: {{optimizer: adam, lr: 0.02, warmup: 1, epochs: 50, max_steps: 4, batch_size: 32,
        init_uniform: 0.1, device: cpu, threads: 1, log_every: 100, valid_every: 4}}
ngram: {{path: train, order: 3, alpha: 0.5, domains: "a b"}}
"""


def test_multi_domain_training_uses_each_domains_ngram(tmp_path):
    """ngram.domains (Li et al. 2022, section 5.2): one model, one n-gram per domain, estimated
    from that domain's text only; training and validation pick each sentence's own."""
    from attnmt.config import load_config
    from attnmt.ngram.model import load_ngram
    from attnmt.runs.loader import load_run

    d = tmp_path / "data"
    for name, rule, seed in (("a", rule_a, 0), ("b", rule_b, 1)):
        (d / name).mkdir(parents=True)
        _write_lm_corpus(d / name, rule, 100, seed)
        dev = [" ".join(f"w{x}" for x in s) for s in rule_corpus(rule, 10, length=10, seed=seed + 10)]
        (d / name / "dev.txt").write_text("".join(x + "\n" for x in dev))
    config = tmp_path / "lm.yaml"
    config.write_text(DOMAIN_CONFIG.format(d=d))
    run = tmp_path / "run"
    assert _train(config, run)["step"] == 4
    gram = {k: load_ngram(run / f"ngram.train.{k}.bin") for k in "ab"}
    loaded = load_run(run, "last", "cpu")
    assert isinstance(loaded.model, NgramResidual) and loaded.model.domain_ngrams
    # the run names its parts: the network under the head, the head, and the head's n-gram
    assert loaded.network is loaded.model.model and loaded.ngram_head is loaded.model
    assert loaded.ngram is loaded.model.ngram
    tok = loaded.tgt_tok
    text_a = [tok.encode(x) for x in (d / "a" / "dev.txt").read_text().splitlines()]
    # each n-gram knows its own rule only: domain a's text is far likelier under a's n-gram
    tgt = torch.tensor([[BOS] + s for s in text_a])
    gold = torch.tensor([s + [3] for s in text_a])
    logp = {k: float(g.sequence_logprobs(tgt).gather(-1, gold.unsqueeze(-1)).sum()) for k, g in gram.items()}
    assert logp["a"] > logp["b"] + 50
    # validation saw both domains: the log has a dev perplexity
    log = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
    assert any(r.get("event") == "valid" for r in log)
    # config errors name the key
    bad = tmp_path / "bad.yaml"
    bad.write_text(DOMAIN_CONFIG.format(d=d).replace('"{d}/{{domain}}/text.txt"'.format(d=d), f'"{d}/a/text.txt"'))
    with pytest.raises(UserError, match="data.train"):
        load_config(bad)
    with pytest.raises(UserError, match="ngram.domains"):
        load_config(config, ["task=translate"])
