"""Corpus metrics: detokenised and tokenised BLEU agree on what is better, and the deliberately
tokenised variant does not trip sacrebleu's 'forgot to detokenize' warning."""

import logging

from attnmt.eval.scoring import bleu, score_all, tokenized_bleu


def _corpus(n: int = 120) -> tuple[list[str], list[str]]:
    refs = [f"Y el hombre {i} dijo: vamos a la casa." for i in range(n)]
    return [r.replace("casa", "tierra") for r in refs], refs


def test_perfect_hypotheses_score_100_and_worse_ones_less():
    hyps, refs = _corpus()
    assert bleu(refs, refs)["bleu"] == 100.0
    assert tokenized_bleu(refs, refs, "es") == 100.0
    assert bleu(hyps, refs)["bleu"] < 100.0
    assert tokenized_bleu(hyps, refs, "es") < 100.0


def test_tokenized_bleu_does_not_warn_about_tokenized_periods(caplog):
    hyps, refs = _corpus()
    with caplog.at_level(logging.WARNING):
        out = score_all(hyps, refs, "es")
    assert out["sentences"] == len(hyps)
    assert "tokenized period" not in caplog.text
