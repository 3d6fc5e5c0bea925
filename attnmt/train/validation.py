"""Validation by ``train.valid_metric``: which dev result is best, and when patience runs out.

    ppl          dev perplexity by teacher forcing (lower is better; every task)
    bleu, chrf   the dev sources translated by greedy search (``train.valid_beam`` > 1: beam
                 search), detokenised, scored against the dev references by sacrebleu (higher is
                 better; translation runs only). ``train.valid_max_sentences`` > 0 translates the
                 first N dev sentences only, to bound what a validation costs.

The trainer computes ppl at every validation and, for bleu/chrf, the score and its sacrebleu
signature too; ``Tracker`` keeps the best value of the chosen metric and counts the validations
since it last improved (``train.patience`` of them stop the run).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import sacrebleu
import torch

from attnmt.config import Config
from attnmt.data.batching import iterate_batches, make_batches
from attnmt.decode.translate import Translation, Translator
from attnmt.models.common import token_loss

EXAMPLES = 3  # dev sentences whose attention TensorBoard draws at each validation

HIGHER_IS_BETTER = {"ppl": False, "bleu": True, "chrf": True}
# sacrebleu's default metrics, as attnmt score reports them (eval/scoring.py; train may not import eval)
SACREBLEU = {"bleu": sacrebleu.BLEU, "chrf": sacrebleu.CHRF}


def worst(metric: str) -> float:
    """The value every real result beats."""
    return -math.inf if HIGHER_IS_BETTER[metric] else math.inf


def better(metric: str, new: float, old: float) -> bool:
    """Strictly better: a tie is no improvement (patience counts it). NaN is never better."""
    if new != new:
        return False
    return new > old if HIGHER_IS_BETTER[metric] else new < old


@dataclass
class Tracker:
    """The best value of ``metric`` so far and the validations since it improved."""

    metric: str
    best: float
    since_best: int = 0

    @classmethod
    def fresh(cls, metric: str) -> Tracker:
        return cls(metric, worst(metric))

    def observe(self, value: float) -> bool:
        """Record one validation's value; True if it is the new best."""
        if better(self.metric, value, self.best):
            self.best, self.since_best = value, 0
            return True
        self.since_best += 1
        return False

    def patience_spent(self, patience: int) -> bool:
        return patience > 0 and self.since_best >= patience


@torch.no_grad()
def perplexity(model, src, tgt, device, batch_tokens: int = 4000, autocast=nullcontext) -> dict:
    """Perplexity of a translation/LM model on token-id data (teacher forcing, </s> scored).
    A model class with its own ``evaluate`` (the classifier) is validated by that instead."""
    model.eval()
    total, tokens = 0.0, 0
    own = getattr(model, "token_loss", None)  # no logits for padding, a block of rows at a time
    for batch in iterate_batches(src, tgt, make_batches(src, tgt, batch_tokens, "tokens", shuffle=False)):
        batch = batch.to(device)
        with autocast():
            if own is not None:
                total += float(own(batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out))
            else:
                logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
                total += float(token_loss(logits, batch.tgt_out))
        tokens += batch.target_tokens
    model.train()
    return {"loss": total / max(tokens, 1), "ppl": math.exp(min(total / max(tokens, 1), 50)), "tokens": tokens}


def evaluate_dev(model: torch.nn.Module, cfg: Config, data, device: torch.device, autocast=nullcontext,
                 tensorboard=None, step: int = 0) -> dict:
    """ppl by teacher forcing (a model's own ``evaluate``: the classifier), the dev BLEU/chrF of
    train.valid_metric, and TensorBoard's attention pictures, of the weights in the model.
    ``data``: the trainer's (train/data.TaskData)."""
    evaluate = getattr(type(model), "evaluate", None) or perplexity
    result = evaluate(model, data.dev_src, data.dev_tgt, device, autocast=autocast)
    if cfg.train.valid_metric != "ppl":
        # searched in float32, as translate does: the score is the one users will see
        result.update(dev_score(model, cfg, data.src_tok, data.tgt_tok, device,
                                           data.dev_src_text, data.dev_tgt_text))
    if tensorboard is not None and data.dev_src_text:
        examples = translate_lines(model, cfg, data.src_tok, data.tgt_tok, device,
                                   data.dev_src_text[:EXAMPLES], beam=1, with_attention=True)
        tensorboard.attention(step, examples)
    return result


def console_line(step: int, epoch: int, result: dict, tracker: Tracker, patience: int, best_step: int) -> str:
    """What a validation says on the console: the step, dev ppl (and the metric), the best so far
    and the patience left."""
    metric = tracker.metric
    parts = [f"valid step {step} (epoch {epoch}): dev ppl {result['ppl']:.2f}"]
    if metric != "ppl":
        parts.append(f"{metric} {result[metric]:.2f}")
    best = "new best" if tracker.since_best == 0 else f"best {tracker.best:.2f} at step {best_step}"
    parts.append(best)
    if patience > 0:
        parts.append(f"patience {max(patience - tracker.since_best, 0)} of {patience} left")
    return ", ".join(parts)


def translate_lines(model: torch.nn.Module, cfg: Config, src_tok, tgt_tok, device: torch.device,
                    sources: list[str], beam: int, with_attention: bool = False) -> list:
    """The best Translation of each of ``sources`` by the model as it is (eval mode meanwhile)."""
    was_training = model.training
    model.eval()
    try:
        translator = Translator(model, cfg, src_tok, tgt_tok, device)
        # at_cap="keep": an early model that babbles to the length cap still gets a score
        # precision=None: the model as training left it, whatever the CPU (no bfloat16 switch)
        results = translator.translate(sources, beam=beam, nbest=1, batch_size=64,
                                       with_attention=with_attention, at_cap="keep", precision=None)
    finally:
        model.train(was_training)
    return [r[0] if r else Translation("", 0.0, [], []) for r in results]  # [] : a blank line


def dev_score(model: torch.nn.Module, cfg: Config, src_tok, tgt_tok, device: torch.device,
              sources: list[str], references: list[str]) -> dict:
    """{metric: score, "signature": sacrebleu's, "sentences": n, "beam": b} of the dev set (its
    first ``train.valid_max_sentences`` pairs when that is set) for train.valid_metric bleu/chrf."""
    t = cfg.train
    n = t.valid_max_sentences or len(sources)
    sources, references = sources[:n], references[:n]
    hyps = [r.text for r in translate_lines(model, cfg, src_tok, tgt_tok, device, sources, t.valid_beam)]
    metric = SACREBLEU[t.valid_metric]()
    score = metric.corpus_score(hyps, [references]).score  # compared unrounded: a 0.004 gain is one
    return {t.valid_metric: score, "signature": str(metric.get_signature()), "sentences": len(sources),
            "beam": t.valid_beam}
