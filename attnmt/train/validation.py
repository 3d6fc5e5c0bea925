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
from dataclasses import dataclass

import sacrebleu
import torch

from attnmt.config import Config
from attnmt.decode.translate import Translation, Translator

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
    score = round(metric.corpus_score(hyps, [references]).score, 2)
    return {t.valid_metric: score, "signature": str(metric.get_signature()), "sentences": len(sources),
            "beam": t.valid_beam}
