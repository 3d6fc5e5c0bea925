"""Turn a config's data section into tokenizers and token-id datasets for the trainer.

Tokenizers are trained on the training data the first time a run starts and saved in the run
directory; a resumed run (or another data-parallel rank) loads them from there. With
``data.spm_alpha`` the training text is kept and ``resample`` encodes it anew each epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from attnmt.config import Config
from attnmt.data.batching import encode_corpus, filter_by_length
from attnmt.data.corpus import read_lines, read_parallel
from attnmt.data.vocab import SentencePieceTokenizer, Tokenizer, WordTokenizer, load_tokenizer
from attnmt.errors import UserError


@dataclass
class TaskData:
    src_tok: Tokenizer | None
    tgt_tok: Tokenizer
    train_src: list[list[int]]
    train_tgt: list[list[int]]
    dev_src: list[list[int]] = field(default_factory=list)
    dev_tgt: list[list[int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # translate: the dev text (lower-cased if the run is), what BLEU/chrF validation translates
    dev_src_text: list[str] = field(default_factory=list)
    dev_tgt_text: list[str] = field(default_factory=list)
    # data.spm_alpha: the training text (source lines empty for an LM) that ``resample`` encodes
    train_src_text: list[str] = field(default_factory=list)
    train_tgt_text: list[str] = field(default_factory=list)
    sampled_epoch: int = 0  # the epoch train_src/train_tgt were sampled for (0: not sampled)


def resample(data: TaskData, cfg: Config, epoch: int) -> float | None:
    """Subword regularisation (``data.spm_alpha``): replace the training ids by a new sampled
    segmentation of the kept training text, the same on every rank and after --resume for a
    given (train.seed, epoch). Pairs over data.max_len after sampling are left out this epoch.
    Dev ids are never touched. Returns the seconds it took (None: nothing to do); single-threaded
    sampling costs about 4 s per side for the Bible's 28k verses (unigram 4k)."""
    import time

    d = cfg.data
    if d.spm_alpha <= 0 or data.sampled_epoch == epoch:
        return None
    start = time.perf_counter()
    seed = (cfg.train.seed * 1_000_003 + epoch) % (2**31)
    tgt = data.tgt_tok.encode_sampled(data.train_tgt_text, d.spm_alpha, seed)
    if cfg.task == "lm":
        data.train_tgt = [seq[: d.max_len] for seq in tgt]
        data.sampled_epoch = epoch
        return time.perf_counter() - start
    src = data.src_tok.encode_sampled(data.train_src_text, d.spm_alpha, seed + 1)
    if d.reverse_source:
        src = [seq[::-1] for seq in src]
    data.train_src, data.train_tgt, _ = filter_by_length(src, tgt, d.max_len)
    data.sampled_epoch = epoch
    return time.perf_counter() - start


def build_tokenizer(kind: str, lines: list[str], size: int, lang: str, prefix: Path,
                    lowercase: bool = False) -> Tokenizer:
    if kind == "word":
        return WordTokenizer.build(lines, max_size=size, lang=lang, lowercase=lowercase)
    if kind in ("bpe", "unigram"):
        return SentencePieceTokenizer.build(lines, prefix, vocab_size=size, model_type=kind,
                                            lowercase=lowercase)
    raise UserError(f"data.tokenizer must be word, bpe or unigram, not {kind!r}")


def _tokenizer(cfg: Config, run_dir: Path, side: str, lines: list[str], create: bool) -> Tokenizer | None:
    if not create:  # loaded by the caller after sync(): rank 0 may not have saved it yet
        return None
    d = cfg.data
    given = d.src_spm if side == "src" else d.tgt_spm
    if given:
        tok = SentencePieceTokenizer.load_checked(given, d.lowercase)
        tok.save(run_dir, side)
        return tok
    size = d.src_vocab_size if side == "src" else d.tgt_vocab_size
    lang = d.src if side == "src" else d.tgt
    tok = build_tokenizer(d.tokenizer, lines, size, lang, run_dir / f"{side}.spm", d.lowercase)
    tok.save(run_dir, side)
    return tok


def _lm_lines(path: str, domains: list[str], cfg: Config) -> tuple[list[str], list[int | None]]:
    """An LM's non-empty lines and each one's domain index (None without ngram.domains, whose
    "{domain}" in ``path`` names one file per domain)."""
    if not domains:
        lines = [x for x in read_lines(path) if x.strip()]
        return lines, [None] * len(lines)
    lines, index = [], []
    for k, name in enumerate(domains):
        part = [x for x in read_lines(path.replace("{domain}", name)) if x.strip()]
        lines += part
        index += [k] * len(part)
    return lines, index


def _domain_source(k: int | None) -> list[int]:
    """An LM reads no source; with ngram.domains its one "source token" is the sentence's domain
    index, which the NgramRes head reads to pick that domain's n-gram (ngram/residual.py)."""
    return [] if k is None else [k]


def prepare_data(
    cfg: Config, run_dir: Path, create_tokenizers: bool, sync: Callable[[], None] = lambda: None
) -> TaskData:
    """Read, tokenise and length-filter the training and dev data of ``cfg``.

    ``create_tokenizers``: train and save new tokenizers (first start, rank 0); otherwise load
    them from ``run_dir``. ``sync`` is called between the two (a barrier for data-parallel runs).
    """
    d = cfg.data
    if not d.train:
        raise UserError("data.train is not set in the config")
    if cfg.task == "translate":
        src_lines, tgt_lines, stats = read_parallel(d.train, d.src, d.tgt)
        src_tok = _tokenizer(cfg, run_dir, "src", src_lines, create_tokenizers)
        tgt_tok = _tokenizer(cfg, run_dir, "tgt", tgt_lines, create_tokenizers)
        sync()
        if not create_tokenizers:
            src_tok = load_tokenizer(run_dir, "src", d.lowercase)
            tgt_tok = load_tokenizer(run_dir, "tgt", d.lowercase)
        train_src = encode_corpus(src_tok, src_lines, d.reverse_source)
        train_tgt = encode_corpus(tgt_tok, tgt_lines)
        train_src, train_tgt, dropped = filter_by_length(train_src, train_tgt, d.max_len)
        data = TaskData(src_tok, tgt_tok, train_src, train_tgt)
        data.notes.append(f"train: {stats.summary()}; {dropped} pairs over {d.max_len} tokens")
        if d.spm_alpha > 0:
            data.train_src_text, data.train_tgt_text = src_lines, tgt_lines
        if d.dev:
            dsrc, dtgt, _ = read_parallel(d.dev, d.src, d.tgt)
            # BLEU validation compares with references cased as the run's outputs are
            data.dev_src_text = dsrc
            data.dev_tgt_text = [x.lower() for x in dtgt] if d.lowercase else dtgt
            data.dev_src = encode_corpus(src_tok, dsrc, d.reverse_source)
            data.dev_tgt = encode_corpus(tgt_tok, dtgt)
        return data
    if cfg.task == "lm":
        domains = cfg.ngram.domains.split()
        lines, line_domains = _lm_lines(d.train, domains, cfg)
        if not lines:
            raise UserError("training text has no non-empty lines", d.train)
        tgt_tok = _tokenizer(cfg, run_dir, "tgt", lines, create_tokenizers)
        sync()
        if not create_tokenizers:
            tgt_tok = load_tokenizer(run_dir, "tgt", d.lowercase)
        encoded = encode_corpus(tgt_tok, lines)
        kept = [(seq[: d.max_len], k) for seq, k in zip(encoded, line_domains) if seq]
        data = TaskData(None, tgt_tok, [_domain_source(k) for _, k in kept], [seq for seq, _ in kept])
        if d.spm_alpha > 0:  # the lines of the kept sequences, for resample
            data.train_tgt_text = [line for line, seq in zip(lines, encoded) if seq]
        if domains:
            counts = [sum(k == i for _, k in kept) for i in range(len(domains))]
            data.notes.append("domains: " + ", ".join(f"{n} {c}" for n, c in zip(domains, counts)))
        if d.dev:
            dev, dev_domains = _lm_lines(d.dev, domains, cfg)
            kept = [(seq, k) for seq, k in zip(encode_corpus(tgt_tok, dev), dev_domains) if seq]
            data.dev_tgt = [seq for seq, _ in kept]
            data.dev_src = [_domain_source(k) for _, k in kept]
        return data
    if cfg.task == "classify":
        return _prepare_classify(cfg, run_dir, create_tokenizers, sync)
    raise UserError(f"task {cfg.task!r} has no data loader")


def _prepare_classify(cfg: Config, run_dir: Path, create: bool, sync: Callable[[], None]) -> TaskData:
    """Texts -> source token ids (truncated to max_len, never empty); labels -> [class id]."""
    from attnmt.data.labels import LabelSet, encode_inputs, read_classification

    d = cfg.data
    texts, labels, _, where, numbers = read_classification(d.train, d.src, d.tgt)
    src_tok = _tokenizer(cfg, run_dir, "src", texts, create)
    label_set = LabelSet.build(labels)
    if create:
        label_set.save(run_dir)
    sync()
    if not create:
        src_tok, label_set = load_tokenizer(run_dir, "src", d.lowercase), LabelSet.load(run_dir)

    def encode(lines: list[str], tags: list[str], path: str, at: list[int]
               ) -> tuple[list[list[int]], list[list[int]]]:
        return (encode_inputs(src_tok, lines, d.max_len),
                [[label_set.encode(t, path, n)] for t, n in zip(tags, at)])

    data = TaskData(src_tok, label_set, *encode(texts, labels, where, numbers))
    data.notes.append(f"train: {len(texts)} sentences, {len(label_set)} classes ({', '.join(label_set.labels)})")
    if d.dev:
        dev_texts, dev_labels, _, dev_where, dev_numbers = read_classification(d.dev, d.src, d.tgt)
        data.dev_src, data.dev_tgt = encode(dev_texts, dev_labels, dev_where, dev_numbers)
    return data
