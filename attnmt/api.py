"""Use a trained run from Python (README.md, "Use from Python").

    import attnmt
    model = attnmt.load("runs/demo")                       # BEST checkpoint; a GPU when present
    best = model.translate(["In the beginning God created the heavens."], beam=5)[0]
    best.text, best.score, best.alignment                   # alignment: (source word, output word)
    model.translate(["In the beginning God created the heavens."], prefix=["En el principio"],
                    constraints=[["los cielos"]])               # forced start, phrases that must appear
    model.translate(lines, sample="topk=10", seed=1)         # a sample per line (back-translation)
    model.score(["En el principio creó Dios los cielos."],
                sources=["In the beginning God created the heavens."])   # {"ppl": ..., ...}

It is the library behind the commands: ``attnmt.runs.loader.load_run`` loads the run,
``attnmt.decode.translate.Translator`` translates, ``attnmt.eval.perplexity`` scores.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

from attnmt.data.labels import encode_inputs
from attnmt.decode.options import SearchOptions
from attnmt.decode.translate import Translation, Translator
from attnmt.errors import UserError
from attnmt.eval.classify import predict
from attnmt.eval.perplexity import configured_setting, encode_texts, perplexities, sentence_scores
from attnmt.runs.loader import Run, load_run


def _lines(value: str | Sequence[str] | None, name: str) -> list[str] | None:
    """``value`` as a list of lines: a str is one line (not one line per character)."""
    if value is None or isinstance(value, str):
        return None if value is None else [value]
    if not isinstance(value, Sequence) or not all(isinstance(x, str) for x in value):
        raise UserError(f"{name} must be a string or a list of strings, got {type(value).__name__}")
    return list(value)


class Model:
    """A loaded run: ``translate`` (translate runs), ``score`` (perplexity: translate and lm runs),
    ``classify`` (classify runs). ``run`` holds the model, config and tokenizers."""

    def __init__(self, run: Run):
        self.run = run
        self.task = run.cfg.task
        self._translator = Translator.of(run) if self.task == "translate" else None

    def _need(self, *tasks: str) -> None:
        if self.task not in tasks:
            raise UserError(f"a {self.task!r} run cannot do this (needs task {' or '.join(tasks)})", self.run.name)

    def translate(self, lines: str | Sequence[str], options: SearchOptions | None = None, *,
                  prefix: list[str] | None = None, constraints: list[list[str]] | None = None,
                  **changes) -> list[Translation] | list[list[Translation]]:
        """The best translation of each line: ``.text``, ``.score`` (log-probability / length^α),
        ``.alignment`` (source word, output word) pairs and ``.attention`` (output × source pieces;
        empty for models without attention). Blank lines give empty translations. A str is one
        line (a list of one Translation comes back).

        ``options``: a ``SearchOptions`` (default: ``SearchOptions()``, the defaults ``attnmt
        translate`` and ``attnmt serve`` use too, with attention; ``.precision`` of each result
        says which precision the search ran in); keywords such as ``beam=5``,
        ``sample="topk=10"``, ``seed=1`` replace its fields (attnmt/decode/options.py lists them and
        their bounds; a bad value is a UserError). ``nbest=N`` > 1: per line a list of its N best
        (the first is the 1-best that ``nbest=1`` returns; a blank line: an empty list).
        ``prefix``: per line, target text the output starts with; ``constraints``: per line,
        target phrases it must contain."""
        self._need("translate")
        lines = _lines(lines, "lines")
        prefix = _lines(prefix, "prefix")
        options = options or SearchOptions(with_attention=True)
        results = self._translator.translate(lines, options, prefixes=prefix, constraints=constraints,
                                             prefix_source="prefix", constraint_source="constraints",
                                             **changes)
        if changes.get("nbest", options.nbest) > 1:
            return results
        blank = Translation("", 0.0, [], [], precision=self._translator.precision)
        return [hyps[0] if hyps else blank for hyps in results]

    def score(self, texts: list[str], sources: list[str] | None = None, batch_tokens: int = 3000,
              per_sentence: bool = False) -> dict | list[dict]:
        """Perplexity of ``texts`` (given ``sources``, one per text, for a translation run), teacher
        forced with </s>: {"ppl" (per piece), "word_ppl", "logprob", "tokens", "words", "sentences"}.
        Pairs or lines with an empty side are skipped. ``per_sentence``: a list instead, one row
        per text: {"line", "logprob" (natural log, </s> included), "tokens", "words", "ppl",
        "word_ppl"} (None scores, 0 counts for a skipped text); their logprobs sum to the total's."""
        self._need("translate", "lm")
        texts, sources = _lines(texts, "texts"), _lines(sources, "sources")
        if self._translator is not None:  # a search's bfloat16 or int8 products are not a score's
            self._translator.prepare(SearchOptions(precision="float32"))
        if self.task == "translate" and (sources is None or len(sources) != len(texts)):
            raise UserError("a translation run scores texts given their sources: one source per text")
        if per_sentence:
            return sentence_scores(self.run, sources if self.task == "translate" else None, texts, batch_tokens)
        src, tgt, words = encode_texts(self.run, sources if self.task == "translate" else None, texts)
        if not tgt:
            raise UserError("no sentences to score")
        row = perplexities(self.run.network, self.run.ngram, [configured_setting(self.run.ngram_head)],
                           src, tgt, words, self.run.device, batch_tokens)[0]
        return {k: row[k] for k in ("ppl", "word_ppl", "logprob", "tokens", "words", "sentences")}

    def classify(self, lines: list[str]) -> list[str]:
        """The predicted label of each line (a classify run)."""
        self._need("classify")
        lines = _lines(lines, "lines")
        ids = encode_inputs(self.run.src_tok, lines, self.run.cfg.data.max_len)
        return [self.run.tgt_tok.piece(c) for c in predict(self.run.model, ids, self.run.device)]


def load(run_dir: str | Path, checkpoint: str = "best", device: str = "auto",
         raw_weights: bool = False) -> Model:
    """Load a training run directory (checkpoint: best, last or step-NNNNNNNN; device: auto, cpu,
    cuda, cuda:N). A run trained with train.ema loads its EMA weights unless ``raw_weights``
    (``model.run.weights`` names the file)."""
    run = load_run(run_dir, checkpoint, device, raw_weights=raw_weights)
    note = run.raw_weights_note()
    if note:
        warnings.warn(note, UserWarning, stacklevel=2)
    return Model(run)
