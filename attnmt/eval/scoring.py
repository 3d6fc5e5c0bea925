"""Corpus-level translation metrics via sacrebleu.

- ``bleu``: sacrebleu's standard detokenised BLEU (13a tokenisation) with its signature.
- ``tokenized_bleu``: both sides Moses-tokenised, then BLEU without further tokenisation — the
  multi-bleu.perl style the paper reports, for comparison with its numbers.
- ``chrf``: character n-gram F-score.
"""

from __future__ import annotations

from functools import lru_cache

import sacrebleu

from attnmt.errors import UserError


def moses_languages() -> list[str]:
    """The codes ``tokenized_bleu`` can use: sacremoses' languages with a list of non-breaking
    prefixes, and ja/ko/cjk, which change what counts as a letter. Any other code gets the
    English rules without a word, so a typo (``--lang sp``) would score with the wrong ones."""
    from sacremoses.corpus import NonbreakingPrefixes

    return sorted(set(NonbreakingPrefixes().available_langs.values()) | {"ja", "ko", "cjk"})


DEFAULT_LANG = "en"  # the tokenised BLEU's rules when no language is given (score without --lang)


def bleu_lang(code: str) -> str:
    """The language for the tokenised BLEU of a corpus whose target files end in ``.code``: the
    code itself if the Moses tokenizer has rules for it, else :data:`DEFAULT_LANG`, as ``score``
    without --lang. A suffix need not be a language (``tgt`` of ``attnmt data synthetic``), and
    sacremoses would give such a code partly other rules than English without a word."""
    return code if code in moses_languages() else DEFAULT_LANG


def check_lang(lang: str) -> str:
    """``lang`` if the Moses tokenizer has rules for it, else a one-line error naming --lang."""
    known = moses_languages()
    if lang not in known:
        raise UserError(f"--lang {lang!r}: the tokenised BLEU has no Moses tokenizer rules for it; "
                        f"use one of {' '.join(known)}")
    return lang


@lru_cache(maxsize=4)
def _moses(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def bleu(hyps: list[str], refs: list[str]) -> dict:
    metric = sacrebleu.BLEU()
    result = metric.corpus_score(hyps, [refs])
    return {"bleu": round(result.score, 2), "signature": str(metric.get_signature())}


def tokenized_bleu(hyps: list[str], refs: list[str], lang: str = "en") -> float:
    tok = _moses(lang)
    h = [tok.tokenize(x, escape=False, return_str=True) for x in hyps]
    r = [tok.tokenize(x, escape=False, return_str=True) for x in refs]
    # force: the lines are tokenised on purpose, so sacrebleu's "forgot to detokenize?" check
    # (100+ lines ending in " .") would only be noise here.
    return round(sacrebleu.corpus_bleu(h, [r], tokenize="none", force=True).score, 2)


def chrf(hyps: list[str], refs: list[str]) -> float:
    return round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)


def score_all(hyps: list[str], refs: list[str], lang: str = "en") -> dict:
    out = bleu(hyps, refs)
    out["bleu_tok"] = tokenized_bleu(hyps, refs, lang)
    out["chrf"] = chrf(hyps, refs)
    out["sentences"] = len(hyps)
    return out


def score_files(hyp_path: str, ref_path: str, lang: str = "en") -> dict:
    """``score_all`` of two files with one sentence a line (their line counts must agree)."""
    from attnmt.data.corpus import read_lines

    check_lang(lang)  # before the files are read
    refs, hyps = read_lines(ref_path), read_lines(hyp_path)
    if len(hyps) != len(refs):
        raise UserError(f"line counts differ: {hyp_path} has {len(hyps)} lines, {ref_path} has {len(refs)}")
    if not any(r.strip() for r in refs):  # BLEU against nothing is no score
        raise UserError("no reference sentences to score against (the file is empty or blank)", ref_path)
    return score_all(hyps, refs, lang)
