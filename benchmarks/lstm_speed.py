"""Training and beam-search speed of the Luong LSTM model, against OpenNMT-py on the same model.

A tool for finding hot spots, not the speed claim. It measures the model's compute alone, in one
process: synthetic batches of uniform lengths, OpenNMT-py's model called without its trainer, data
pipeline or checkpointing, per-thread CPU time on one thread. Its ratios have disagreed with the
end-to-end race by a wide margin (1.2x here while the race gave 0.74x). The claim is
``benchmarks/peer_race.py``: each toolkit's own trainer and translator on the Bible, same budget.

Both sides run the same network (2-layer LSTM encoder, 2-layer input-feeding LSTM decoder,
global attention ``general`` or ``dot``, tanh(W_c[c_t; h_t]), softmax output over 8000 words,
hidden = embed = 256, dropout 0.2) with the SAME weights: ours is built and initialised
uniformly in [-0.1, 0.1], then every tensor is copied into OpenNMT-py's NMTModel (built by its own
``build_base_model`` from its own options), so both compute the same function (checked below:
teacher-forced logits agree to float rounding, beam outputs agree).

    train   forward (teacher forcing) + loss + backward + gradient-norm clipping (5) + Adam step on
            batches of 64 synthetic pairs, source and target lengths uniform in 25..35, dropout on.
            Ours: Seq2Seq.token_loss (the output layer on non-padding positions only) +
            clip_grad_norm_ + torch.optim.Adam, as Trainer.train_step does for a plain Seq2Seq.
            Theirs: NMTModel.forward + onmt.utils.loss.LossCompute (CrossEntropyLoss, sum) +
            onmt.utils.Optimizer (Adam, max_grad_norm 5), as onmt.trainer does per batch.
            Reported in target tokens (</s> included, padding not) per second.
    beam    beam 5, batches of 32 sentences, eval mode, n-best 1, length normalisation
            log p / |y| (ours: length_penalty 1; theirs: -length_penalty avg, alpha 1), maximum
            length 1.5·|x| + 5 (ours: per sentence, ceil; theirs: per batch, 1.5·S_max + 5).
            Ours: attnmt.decode.search.beam_search. Theirs: onmt.translate.Translator
            .translate_batch (BeamSearch + GNMTGlobalScorer). Sentences per second.

The untrained weights give near-uniform output distributions, so </s> rarely wins and both
searches mostly run to the length limit: the step counts match and the comparison is of the work
per step (both numbers of decoder steps are reported). Each side's model is copied before training
so the two trainings start from the same weights.

Time: the calling thread's CPU time (``time.thread_time``) with torch.set_num_threads(1), so that
waiting for a core on a shared machine is not counted; wall time is reported too. The two sides
alternate (ours, theirs, ours, theirs, ...) for --rounds rounds; the medians and the ratio of the
medians are reported. Prints one JSON line, then a one-line summary.

    pip install --no-deps OpenNMT-py==3.5.1 && pip install configargparse
    python benchmarks/lstm_speed.py                     # general score, 5 rounds
    python benchmarks/lstm_speed.py --score dot --rounds 7

OpenNMT-py's package imports tokenisation / data-transform libraries (pyonmttok, spacy,
ahocorasick, rapidfuzz, fasttext) that its model, loss and translation code never call; when they
are not installed they are replaced by empty stand-in modules before importing onmt.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import statistics
import sys
import time
import types

import torch

from attnmt.config import ModelConfig
from attnmt.data.batching import Batch, collate
from attnmt.data.vocab import BOS, EOS, PAD, UNK
from attnmt.decode.search import beam_search
from attnmt.models.seq2seq import Seq2Seq

ONMT_UNUSED_DEPS = ("pyonmttok", "spacy", "ahocorasick", "rapidfuzz", "fasttext")


# -- data ---------------------------------------------------------------------------------------
def synthetic_batches(n: int, batch: int, vocab: int, lo: int, hi: int, seed: int) -> list[Batch]:
    """n batches of random token ids, source and target lengths uniform in [lo, hi]."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src, tgt = [], []
        for _ in range(batch):
            s, t = torch.randint(lo, hi + 1, (2,), generator=g).tolist()
            src.append(torch.randint(4, vocab, (s,), generator=g).tolist())
            tgt.append(torch.randint(4, vocab, (t,), generator=g).tolist())
        out.append(collate(src, tgt, list(range(batch))))
    return out


# -- OpenNMT-py ---------------------------------------------------------------------------------
def import_onmt():
    for name in ONMT_UNUSED_DEPS:
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules[name] = _Stub(name)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import onmt
        import onmt.opts
        import onmt.translate
        import onmt.utils.loss
        import onmt.utils.optimizers
        from onmt.model_builder import build_base_model  # noqa: F401
    return onmt


class _Stub(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Stub(f"{self.__name__}.{attr}")


class _Vocab:
    """The slice of pyonmttok.Vocab that OpenNMT-py's model builder and Translator use, with
    attnmt's special ids so that both sides read the same batches."""

    def __init__(self, size: int):
        self.size = size
        self.ids = {"<blank>": PAD, "<unk>": UNK, "<s>": BOS, "</s>": EOS}

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, token: str) -> int:
        return self.ids.get(token, UNK)

    lookup_token = __getitem__


def onmt_options(onmt, a: argparse.Namespace) -> argparse.Namespace:
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    onmt.opts.model_opts(parser)
    onmt.opts._add_train_general_opts(parser)
    argv = [
        "-encoder_type", "rnn", "-decoder_type", "rnn", "-rnn_type", "LSTM",
        "-layers", str(a.layers), "-hidden_size", str(a.hidden), "-word_vec_size", str(a.embed),
        "-global_attention", a.score, "-input_feed", "1", "-dropout", str(a.dropout),
        "-optim", "adam", "-max_grad_norm", str(a.clip),
    ]  # fmt: skip
    opt = parser.parse_args(argv)
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    return opt


def build_onmt(onmt, a: argparse.Namespace, ours: Seq2Seq):
    """OpenNMT-py's NMTModel for the same config, holding a copy of our weights."""
    from onmt.model_builder import build_base_model

    vocabs = {"src": _Vocab(a.vocab), "tgt": _Vocab(a.vocab), "decoder_start_token": "<s>"}
    model = build_base_model(onmt_options(onmt, a), vocabs)
    p = dict(ours.named_parameters())
    mapping = {
        "encoder.embeddings.make_embedding.emb_luts.0.weight": p["encoder.embedding.weight"],
        "decoder.embeddings.make_embedding.emb_luts.0.weight": p["decoder.embedding.weight"],
        "decoder.attn.linear_out.weight": p["decoder.W_c.weight"],  # both act on [c_t; h_t]
        "generator.weight": p["decoder.W_s.weight"],
        "generator.bias": p["decoder.W_s.bias"],
    }
    if a.score == "general":  # theirs: (W h_t)·h̄_s, ours: h_t·(W_a h̄_s), so W = W_aᵀ
        mapping["decoder.attn.linear_in.weight"] = p["decoder.attention.score.W_a.weight"].t()
    for layer in range(a.layers):
        for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            mapping[f"encoder.rnn.{kind}_l{layer}"] = p[f"encoder.rnn.{kind}_l{layer}"]
            mapping[f"decoder.rnn.layers.{layer}.{kind}"] = p[f"decoder.rnn.{kind}_l{layer}"]
    theirs = dict(model.named_parameters())
    if set(theirs) != set(mapping):
        raise RuntimeError(f"parameter names differ: {sorted(set(theirs) ^ set(mapping))}")
    with torch.no_grad():
        for name, value in mapping.items():
            theirs[name].copy_(value)
    return model, vocabs


def onmt_batch(b: Batch, with_target: bool = True) -> dict:
    """OpenNMT-py's batch layout: (B, len, 1) ids; tgt = [<s>, y.., </s>], padded."""
    batch = {"src": b.src.unsqueeze(-1), "srclen": b.src_lengths}
    if with_target:
        batch["tgt"] = torch.cat([b.tgt_in[:, :1], b.tgt_out], dim=1).unsqueeze(-1)
    return batch


# -- the measured work --------------------------------------------------------------------------
def make_ours_train(model: Seq2Seq, a):
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def step(b: Batch) -> int:  # Trainer.train_step with one batch, loss per token
        opt.zero_grad(set_to_none=True)
        loss = model.token_loss(b.src, b.src_lengths, b.tgt_in, b.tgt_out)
        (loss / b.target_tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        return b.target_tokens

    return step


def make_onmt_train(onmt, model, a):
    criterion = torch.nn.CrossEntropyLoss(ignore_index=PAD, reduction="sum")
    loss_fn = onmt.utils.loss.LossCompute(criterion, model.generator)
    adam = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    optim = onmt.utils.optimizers.Optimizer(adam, 1e-4, max_grad_norm=a.clip)

    def step(b: Batch) -> int:  # onmt.trainer.Trainer._gradient_accumulation, one batch
        batch = onmt_batch(b)
        optim.zero_grad(set_to_none=True)
        dec_out, attns = model(batch["src"], batch["tgt"], batch["srclen"])
        loss, stats = loss_fn(batch, dec_out, attns)
        optim.backward(loss / stats.n_words)
        optim.step()
        return stats.n_words

    return step


def make_ours_beam(model: Seq2Seq, a):
    def run(b: Batch) -> tuple[list, int]:
        steps = [0]
        step = model.step

        def counting_step(*args, **kw):
            steps[0] += 1
            return step(*args, **kw)

        model.step = counting_step
        try:
            hyps = beam_search(model, b.src, b.src_lengths, beam_size=a.beam, length_penalty=1.0,
                               max_len_ratio=a.ratio, max_len_extra=a.extra)
        finally:
            del model.step
        return [h[0].tokens for h in hyps], steps[0]

    return run


def make_onmt_beam(onmt, model, vocabs, a):
    scorer = onmt.translate.GNMTGlobalScorer(alpha=1.0, beta=0.0, length_penalty="avg",
                                             coverage_penalty="none")
    translator = onmt.translate.Translator(
        model, vocabs, gpu=-1, n_best=1, beam_size=a.beam, max_length=10_000,
        max_length_ratio=a.ratio, global_scorer=scorer, report_score=False,
    )

    def run(b: Batch) -> tuple[list, int]:
        decoder = model.decoder
        steps = [0]
        forward = decoder.forward

        def counting_forward(*args, **kw):
            steps[0] += 1
            return forward(*args, **kw)

        decoder.forward = counting_forward
        try:
            out = translator.translate_batch(onmt_batch(b, with_target=False), attn_debug=False)
        finally:
            del decoder.forward
        return [[t for t in p[0].tolist() if t != EOS] for p in out["predictions"]], steps[0]

    return run


def timed(fn, *args):
    t0, w0 = time.thread_time(), time.perf_counter()
    out = fn(*args)
    return out, time.thread_time() - t0, time.perf_counter() - w0


# -- checks -------------------------------------------------------------------------------------
@torch.no_grad()
def check_same_function(ours: Seq2Seq, theirs, b: Batch) -> float:
    """Max |difference| of teacher-forced log-probabilities in eval mode."""
    ours.eval()
    theirs.eval()
    lp_ours = torch.log_softmax(ours(b.src, b.src_lengths, b.tgt_in)[0], -1)
    batch = onmt_batch(b)
    dec_out, _ = theirs(batch["src"], batch["tgt"], batch["srclen"])
    lp_theirs = torch.log_softmax(theirs.generator(dec_out), -1)
    mask = (b.tgt_out != PAD).unsqueeze(-1)
    return float(((lp_ours - lp_theirs).abs() * mask).max())


# -- main ---------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--score", choices=("general", "dot"), default="general")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--embed", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--clip", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=64, help="training batch (sentences)")
    ap.add_argument("--min-len", type=int, default=25)
    ap.add_argument("--max-len", type=int, default=35)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--beam-batch", type=int, default=32, help="sentences per beam-search batch")
    ap.add_argument("--ratio", type=float, default=1.5, help="max output length ratio")
    ap.add_argument("--extra", type=int, default=5, help="max output length: ratio·|x| + extra")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--train-steps", type=int, default=3, help="training steps per side per round")
    ap.add_argument("--beam-batches", type=int, default=1, help="beam batches per side per round")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", choices=("train", "beam"), default=None)
    a = ap.parse_args()
    if a.extra != 5:
        raise SystemExit("OpenNMT-py's length limit is ratio·|x| + 5; keep --extra 5")
    torch.set_num_threads(a.threads)
    onmt = import_onmt()

    torch.manual_seed(a.seed)
    cfg = ModelConfig(layers=a.layers, hidden=a.hidden, embed=a.embed, attention="global",
                      score=a.score, input_feed=True, dropout=a.dropout)
    ours = Seq2Seq(cfg, a.vocab, a.vocab, init_uniform=0.1)
    theirs, vocabs = build_onmt(onmt, a, ours)
    train_data = synthetic_batches(4, a.batch, a.vocab, a.min_len, a.max_len, a.seed)
    beam_data = synthetic_batches(4, a.beam_batch, a.vocab, a.min_len, a.max_len, a.seed + 1)
    max_diff = check_same_function(ours, theirs, train_data[0])

    result: dict = {
        "benchmark": "lstm_speed", "score": a.score, "layers": a.layers, "hidden": a.hidden,
        "embed": a.embed, "vocab": a.vocab, "threads": a.threads, "rounds": a.rounds,
        "torch": torch.__version__, "onmt": onmt.__version__, "logprob_max_diff": max_diff,
    }  # fmt: skip
    sides = {"ours": None, "onmt": None}
    if a.only in (None, "train"):
        ours_t, theirs_t = copy.deepcopy(ours).train(), copy.deepcopy(theirs).train()
        sides = {"ours": make_ours_train(ours_t, a), "onmt": make_onmt_train(onmt, theirs_t, a)}
        for fn in sides.values():  # warm-up (allocator, Adam state)
            fn(train_data[0])
        cpu = {k: [] for k in sides}
        wall = {k: [] for k in sides}
        i = 0
        for _ in range(a.rounds):
            for name, fn in sides.items():
                tokens = t_cpu = t_wall = 0.0
                for s in range(a.train_steps):
                    n, c, w = timed(fn, train_data[(i + s) % len(train_data)])
                    tokens, t_cpu, t_wall = tokens + n, t_cpu + c, t_wall + w
                cpu[name].append(tokens / t_cpu)
                wall[name].append(tokens / t_wall)
            i += a.train_steps
        result["train"] = _summary(cpu, wall, "tok_s")

    if a.only in (None, "beam"):
        ours.eval()
        theirs.eval()
        sides = {"ours": make_ours_beam(ours, a), "onmt": make_onmt_beam(onmt, theirs, vocabs, a)}
        outputs = {}
        for name, fn in sides.items():  # warm-up; also compares the outputs
            outputs[name] = fn(beam_data[0])
        # the length limits differ (ours per sentence, theirs per batch), so compare the best
        # outputs up to the shorter one's length; on an untrained model's near-uniform
        # distributions, rounding-level differences flip near-ties, and the beams then diverge
        pairs = list(zip(outputs["ours"][0], outputs["onmt"][0]))
        same = sum(x[: len(y)] == y[: len(x)] for x, y in pairs)
        prefix = statistics.mean(_common_prefix(x, y) / max(1, min(len(x), len(y))) for x, y in pairs)
        cpu = {k: [] for k in sides}
        wall = {k: [] for k in sides}
        steps = {k: [] for k in sides}
        i = 0
        for _ in range(a.rounds):
            for name, fn in sides.items():
                sents = t_cpu = t_wall = 0.0
                for s in range(a.beam_batches):
                    b = beam_data[(i + s) % len(beam_data)]
                    (_, n_steps), c, w = timed(fn, b)
                    sents, t_cpu, t_wall = sents + b.src.size(0), t_cpu + c, t_wall + w
                    steps[name].append(n_steps)
                cpu[name].append(sents / t_cpu)
                wall[name].append(sents / t_wall)
            i += a.beam_batches
        result["beam"] = _summary(cpu, wall, "sent_s")
        result["beam"]["decoder_steps_per_batch"] = {k: statistics.median(v) for k, v in steps.items()}
        result["beam"]["same_best_output_prefix"] = f"{same}/{len(pairs)}"
        result["beam"]["mean_common_prefix_fraction"] = round(prefix, 3)

    print(json.dumps(result))
    parts = []
    for kind, unit in (("train", "tok/s"), ("beam", "sent/s")):
        if kind in result:
            r = result[kind]
            parts.append(f"{kind}: ours {r['ours']:.0f} vs OpenNMT-py {r['onmt']:.0f} {unit} "
                         f"= {r['ratio']:.2f}x")
    print(f"lstm_speed ({a.score}, {a.layers}x{a.hidden}, 1 thread CPU time, median of "
          f"{a.rounds}): " + "; ".join(parts))


def _common_prefix(x: list, y: list) -> int:
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


def _summary(cpu: dict, wall: dict, unit: str) -> dict:
    med = {k: statistics.median(v) for k, v in cpu.items()}
    med_wall = {k: statistics.median(v) for k, v in wall.items()}
    return {
        "unit": unit, "ours": med["ours"], "onmt": med["onmt"], "ratio": med["ours"] / med["onmt"],
        "ours_wall": med_wall["ours"], "onmt_wall": med_wall["onmt"],
        "ratio_wall": med_wall["ours"] / med_wall["onmt"],
        "per_round": {k: [round(x, 1) for x in v] for k, v in cpu.items()},
    }


if __name__ == "__main__":
    main()
