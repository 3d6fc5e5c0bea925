"""A config's data section as the trainer's data: tokenizers, the memory-mapped training split,
an epoch's batches, and the small dev set.

Translation and LM data is always a prepared corpus (data/prepare.py): ``data.prepared`` names
one, otherwise rank 0 prepares ``data.train``/``data.dev`` into ``RUN/data`` with the same code
(kept as it is on ``--resume``) while the other ranks wait. The run keeps copies of its
tokenizers (``RUN/src.spm.model`` ...), which translate reads.

``TrainSet`` is the training split as training sees it: which sentences an epoch uses (those
within ``data.max_len``; several corpora by weight), its batches (data/batching.py, a function
of (train.seed, epoch)), and each batch's tensors, gathered from the mapped arrays. With
``data.spm_alpha`` a batch's sentences are segmented anew from their kept text, seeded by
(train.seed, epoch, batch); a sampled segmentation over ``data.max_len`` falls back to the
sentence's best one, so the sentences of an epoch do not depend on the sampling.
"""

from __future__ import annotations

import filecmp
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnmt.config import Config
from attnmt.data.batching import Batch, Batches, collate_rows, epoch_batches
from attnmt.data.prepare import PrepareSpec, prepare, read_manifest
from attnmt.data.sources import parse_sources
from attnmt.data.prepared import PreparedCorpus, PreparedSplit, open_prepared
from attnmt.data.ragged import Ragged
from attnmt.data.vocab import PAD, Tokenizer, load_tokenizer
from attnmt.errors import UserError

RUN_CORPUS = "data"  # RUN/data: data.train prepared for this run


@dataclass
class TaskData:
    src_tok: Tokenizer | None
    tgt_tok: Tokenizer
    train: "TrainSet"
    dev_src: list[list[int]] = field(default_factory=list)
    dev_tgt: list[list[int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # translate: the dev text (lower-cased if the run is), what BLEU/chrF validation translates
    dev_src_text: list[str] = field(default_factory=list)
    dev_tgt_text: list[str] = field(default_factory=list)


class TrainSet:
    """The training split: sentences per epoch, batches, tensors (module docstring)."""

    def __init__(self, cfg: Config, src: Ragged | np.ndarray | None, tgt: Ragged,
                 split: PreparedSplit | None = None, tokenizers: tuple = (None, None),
                 prepared_max_len: int = 0):
        """``prepared_max_len``: the length filter the corpus was prepared with (0: none)."""
        self.cfg, self.src, self.tgt, self.split = cfg, src, tgt, split
        self.prepared_max_len = prepared_max_len
        self.src_tok, self.tgt_tok = tokenizers
        d = cfg.data
        self.lm = cfg.task == "lm"
        self.reverse = d.reverse_source and cfg.task == "translate"
        self.limit = d.max_len if self.lm else 0  # an LM's sentences are cut, not dropped
        self.kept = self._kept_mask()
        self._epoch: tuple[int, Batches] | None = None

    def _kept_mask(self) -> np.ndarray | None:
        """Sentences within data.max_len (translate), None when all are."""
        if self.cfg.task != "translate":
            return None
        limit = self.cfg.data.max_len
        if 0 < self.prepared_max_len <= limit:
            return None
        keep = np.ones(len(self.tgt), bool)
        for start in range(0, len(keep), 1 << 22):  # bounded temporaries
            stop = start + (1 << 22)
            keep[start:stop] = ((np.asarray(self.src.lengths[start:stop]) <= limit)
                                & (np.asarray(self.tgt.lengths[start:stop]) <= limit))
        return None if keep.all() else keep

    def __len__(self) -> int:
        return int(self.kept.sum()) if self.kept is not None else len(self.tgt)

    @property
    def dropped(self) -> int:
        return len(self.tgt) - len(self)

    # -- an epoch ------------------------------------------------------------------------------
    def items(self, epoch: int) -> np.ndarray | None:
        """This epoch's sentences (None: all, once): the kept ones, each corpus by its weight
        (whole copies, plus a seeded random share for a fraction)."""
        corpora = self.split.corpora if self.split is not None else []
        weighted = any(c.weight != 1.0 for c in corpora)
        if self.kept is None and not weighted:
            return None
        dtype = np.int32 if len(self.tgt) < 2**31 else np.int64
        if not weighted:
            return np.flatnonzero(self.kept).astype(dtype)
        rng = np.random.default_rng([self.cfg.train.seed, epoch, 1])
        parts = []
        for c in corpora:
            own = np.arange(c.start, c.start + c.pairs, dtype=dtype)
            if self.kept is not None:
                own = own[self.kept[c.start : c.start + c.pairs]]
            whole, frac = int(math.floor(c.weight)), c.weight - math.floor(c.weight)
            parts += [own] * whole
            if frac > 0 and len(own):
                parts.append(np.sort(rng.choice(own, size=int(round(frac * len(own))), replace=False)))
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        tgt = self.tgt.lengths
        if self.src is None:
            src = np.zeros(len(tgt), np.uint8)
        elif isinstance(self.src, np.ndarray):  # an LM's domain column: one id per sentence
            src = np.ones(len(tgt), np.uint8)
        else:
            src = self.src.lengths
        if self.limit:
            tgt = np.minimum(tgt, self.limit)
        return src, tgt

    def batches(self, epoch: int) -> Batches:
        """All batches of ``epoch`` (cached for the epoch)."""
        if self._epoch is None or self._epoch[0] != epoch:
            t = self.cfg.train
            src, tgt = self.lengths()
            batches = epoch_batches(src, tgt, t.batch_size, t.batch_by, True, t.seed, epoch,
                                    self.items(epoch), t.bucket_pool)
            self._epoch = (epoch, batches)
            self.release()
        return self._epoch[1]

    def collate(self, index: np.ndarray, epoch: int = 0, number: int = 0) -> Batch:
        """The tensors of sentences ``index``, batch ``number`` of ``epoch`` (its sampling seed).
        The mapped pages it read are let go at once: a read of a cached file maps the pages around
        it too (the kernel's fault-around), which would soon map the whole corpus."""
        d = self.cfg.data
        if d.spm_alpha > 0 and self.split is not None:
            batch = self._sampled(index, epoch, number)
        else:
            batch = collate_rows(self.src, self.tgt, index, self.reverse, self.limit)
        self.release()
        return batch

    def _sampled(self, index: np.ndarray, epoch: int, number: int) -> Batch:
        d, seed = self.cfg.data, self.cfg.train.seed
        base = ((seed * 1_000_003 + epoch) * 1_000_003 + number) % (2**31 - 2)
        rows = {}
        for k, (side, tok) in enumerate((("src", self.src_tok), ("tgt", self.tgt_tok))):
            ragged = self.split.sides.get(side)
            if ragged is None:
                continue
            sampled = tok.encode_sampled(self.split.lines(side, index), d.spm_alpha, base + k)
            best = [ragged.row(int(i)).tolist() for i in index]
            too_long = not self.lm
            rows[side] = [s if s and (not too_long or len(s) <= d.max_len) else b
                          for s, b in zip(sampled, best)]
        positions = np.arange(len(index))
        src = Ragged.from_lists(rows["src"]) if "src" in rows else (
            None if self.src is None else np.asarray(self.src[index]))
        batch = collate_rows(src, Ragged.from_lists(rows["tgt"]), positions, self.reverse, self.limit)
        batch.index = batch.index.new_tensor(np.asarray(index, np.int64))
        return batch

    def release(self) -> None:
        if self.split is not None:
            self.split.release()

    def targets_flat(self, corpus: int | None = None) -> np.ndarray:
        """The training targets (of corpus ``corpus``) as one flat ``<s> .. </s>`` int64 array
        (the n-gram estimator's input: ngram.path train)."""
        from attnmt.ngram.corpus import flat_from_ragged

        if corpus is None or self.split is None:
            return flat_from_ragged(self.tgt, 0, len(self.tgt), self.limit)
        c = self.split.corpora[corpus]
        return flat_from_ragged(self.tgt, c.start, c.start + c.pairs, self.limit)


# -- the corpus of a run ------------------------------------------------------------------------------
def spec_from_config(cfg: Config, given: dict[str, str] | None = None, corpora: bool = True) -> PrepareSpec:
    """The preparation of a config's data section (``attnmt train`` on raw text, ``attnmt data
    prepare --config``); ``given``: tokenizer files to use (a run's own); ``corpora`` False:
    the settings only (the corpora come from elsewhere)."""
    d = cfg.data
    domains = cfg.ngram.domains.split() or None
    train = parse_sources(d.train, cfg.task, d.src, d.tgt, domains, key="data.train") if corpora else []
    dev = parse_sources(d.dev, cfg.task, d.src, d.tgt, domains, key="data.dev") if corpora and d.dev else []
    files = {side: path for side, path in (("src", d.src_spm), ("tgt", d.tgt_spm)) if path}
    return PrepareSpec(
        train=train, dev=dev, task=cfg.task, src=d.src, tgt=d.tgt, tokenizer=d.tokenizer,
        src_vocab_size=d.src_vocab_size, tgt_vocab_size=d.tgt_vocab_size, given={**files, **(given or {})},
        lowercase=d.lowercase, max_len=d.max_len if cfg.task == "translate" else 0,
        max_ratio=d.max_ratio, drop_identical=d.drop_identical, sample=d.tokenizer_sample,
        sample_chars=d.tokenizer_sample_chars, seed=cfg.train.seed, keep_text=d.spm_alpha > 0)


def _tokenizer_file(folder: Path, side: str) -> Path | None:
    for name in (f"{side}.spm.model", f"{side}.vocab"):
        if (folder / name).is_file():
            return folder / name
    return None


def run_corpus(cfg: Config, run_dir: Path, main: bool, sync: Callable[[], None],
               say: Callable[[str], None]) -> PreparedCorpus:
    """The prepared corpus a run trains on: data.prepared, or data.train prepared into RUN/data
    by rank 0 (reused when it holds the same files and settings and the run's tokenizers)."""
    sides = ("tgt",) if cfg.task == "lm" else ("src", "tgt")
    if cfg.data.prepared:
        corpus = open_prepared(cfg.data.prepared)
        if main:
            say(f"{cfg.data.prepared} (prepared: data.train, data.dev and the tokenizer keys are its own)")
    else:
        if not cfg.data.train:
            raise UserError("data.train is not set in the config (nor data.prepared)")
        where = run_dir / RUN_CORPUS
        if main:
            run_dir.mkdir(parents=True, exist_ok=True)
            own = {side: str(f) for side in sides if (f := _tokenizer_file(run_dir, side)) is not None}
            spec = spec_from_config(cfg, own)
            done = read_manifest(where)
            if not (done and _same_preparation(done, spec, where, own)):
                prepare(spec, where, force=True, say=say)
        sync()
        corpus = open_prepared(where)
    if corpus.task != cfg.task:
        raise UserError(f"data.prepared: the corpus is for task {corpus.task}, the config's is {cfg.task}",
                        str(corpus.root))
    if cfg.task == "translate" and (corpus.manifest["src"], corpus.manifest["tgt"]) != (cfg.data.src, cfg.data.tgt):
        raise UserError(f"data.prepared: the corpus is {corpus.manifest['src']}-{corpus.manifest['tgt']}, "
                        f"data.src/data.tgt say {cfg.data.src}-{cfg.data.tgt}", str(corpus.root))
    if main:
        _adopt_tokenizers(corpus, run_dir, sides, cfg.data.lowercase)
    sync()
    return corpus


def _same_preparation(done: dict, spec: PrepareSpec, where: Path, own: dict[str, str]) -> bool:
    """RUN/data may be kept: the same settings but for the tokenizers the run gave (its own
    copies of the corpus's, on --resume), and those the same files."""
    want, have = spec.settings(), dict(done.get("settings", {}))
    want.pop("given"), have.pop("given", None)
    from attnmt.data.prepare import _json

    if _json(want) != have:
        return False
    return all(_tokenizer_file(where, side) is not None and filecmp.cmp(path, _tokenizer_file(where, side),
                                                                          shallow=False)
               for side, path in own.items())


def _adopt_tokenizers(corpus: PreparedCorpus, run_dir: Path, sides, lowercase: bool) -> None:
    """Copy the corpus's tokenizers into the run, or check that the run's (--resume,
    --init-from) are the same."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for side in sides:
        theirs = _tokenizer_file(corpus.root, side)
        mine = _tokenizer_file(run_dir, side)
        if theirs is None:
            raise UserError(f"no {side} tokenizer in the prepared corpus", str(corpus.root))
        if mine is None:
            corpus.tokenizer(side, lowercase).save(run_dir, side)
        elif mine.name != theirs.name or not filecmp.cmp(mine, theirs, shallow=False):
            raise UserError(f"the run's {side} tokenizer ({mine.name}) is not the prepared corpus's: "
                            "a run keeps its vocabulary (prepare the corpus with the run's tokenizers: "
                            f"--{side}-spm)", str(corpus.root))


def prepare_data(cfg: Config, run_dir: Path, main: bool = True, sync: Callable[[], None] = lambda: None
                 ) -> TaskData:
    """The trainer's data (module docstring): tokenizers, the training split, the dev set. What
    preparing said is in ``notes`` (the trainer shows them once training starts)."""
    if cfg.task == "classify":
        return _prepare_classify(cfg, run_dir, main, sync)
    if cfg.task not in ("translate", "lm"):
        raise UserError(f"task {cfg.task!r} has no data loader")
    said: list[str] = []  # data.prepared's note; preparing's own counts are in the train note
    corpus = run_corpus(cfg, run_dir, main, sync, lambda line: None if line.startswith("prepare:") else said.append(line))
    d = cfg.data
    src_tok = load_tokenizer(run_dir, "src", d.lowercase) if cfg.task == "translate" else None
    tgt_tok = load_tokenizer(run_dir, "tgt", d.lowercase)
    train = corpus.split("train")
    if d.spm_alpha > 0 and not train.has_text:
        raise UserError("data.spm_alpha samples from the training text, which this corpus does not "
                        "keep (prepare it with --keep-text)", str(corpus.root))
    domains = cfg.ngram.domains.split()
    if cfg.task == "lm":
        src = _domain_column(train) if domains else None
    else:
        src = train.src
    ts = TrainSet(cfg, src, train.tgt, train, (src_tok, tgt_tok), corpus.manifest["filters"]["max_len"])
    data = TaskData(src_tok, tgt_tok, ts, notes=said)
    info = corpus.manifest["splits"]["train"]
    unit = "lines" if cfg.task == "lm" else "pairs"
    removed = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in info["removed"].items() if n) or "none"
    data.notes.append(f"train: {info['read']} {unit} read, {info['pairs']} prepared (removed: {removed})"
                      + (f"; {ts.dropped} over data.max_len {d.max_len} left out" if ts.dropped else "")
                      + f"; {len(ts)} to train on")
    if any(c.weight != 1.0 for c in train.corpora):
        data.notes.append("corpora: " + ", ".join(f"{c.name} {c.pairs} ×{c.weight:g}" for c in train.corpora))
    if domains:
        data.notes.append("domains: " + ", ".join(f"{n} {c.pairs}" for n, c in zip(domains, train.corpora)))
    dev = corpus.split("dev")
    if dev is not None:
        data.notes.append(f"dev: {len(dev)} {unit}")
    if dev is not None and len(dev):
        reverse = d.reverse_source and cfg.task == "translate"
        data.dev_tgt = dev.tgt.to_lists()
        if cfg.task == "translate":
            data.dev_src = dev.src.to_lists(reverse)
            data.dev_src_text = dev.all_lines("src")
            # BLEU validation compares with references cased as the run's outputs are
            tgt_text = dev.all_lines("tgt")
            data.dev_tgt_text = [x.lower() for x in tgt_text] if d.lowercase else tgt_text
        else:
            column = _domain_column(dev) if domains else None
            data.dev_src = [[int(k)] for k in column] if column is not None else [[] for _ in data.dev_tgt]
    return data


def _domain_column(split: PreparedSplit) -> np.ndarray:
    """An LM's one "source token" per sentence with ngram.domains: its domain's index, which the
    NgramRes head reads to pick that domain's n-gram (ngram/residual.py)."""
    return split.corpus_of(np.arange(len(split))).astype(np.int64)


def _prepare_classify(cfg: Config, run_dir: Path, main: bool, sync: Callable[[], None]) -> TaskData:
    """Texts -> source token ids (truncated to max_len, never empty); labels -> [class id]. A
    classification set is small and read into memory."""
    from attnmt.data.labels import LabelSet, encode_inputs, read_classification
    from attnmt.data.prepare import build_tokenizer

    d = cfg.data
    texts, labels, _, where, numbers = read_classification(d.train, d.src, d.tgt)
    if main and _tokenizer_file(run_dir, "src") is None:  # a new run (not --resume, --init-from)
        if d.src_spm:
            from attnmt.data.vocab import SentencePieceTokenizer

            src_tok = SentencePieceTokenizer.load_checked(d.src_spm, d.lowercase)
        else:
            src_tok = build_tokenizer(d.tokenizer, texts, d.src_vocab_size, d.src, run_dir / "src.spm",
                                      d.lowercase)
        src_tok.save(run_dir, "src")
    if main and not (run_dir / "labels.txt").exists():
        LabelSet.build(labels).save(run_dir)
    sync()
    src_tok, label_set = load_tokenizer(run_dir, "src", d.lowercase), LabelSet.load(run_dir)

    def encode(lines: list[str], tags: list[str], path: str, at: list[int]
               ) -> tuple[list[list[int]], list[list[int]]]:
        return (encode_inputs(src_tok, lines, d.max_len),
                [[label_set.encode(t, path, n)] for t, n in zip(tags, at)])

    src, tgt = encode(texts, labels, where, numbers)
    data = TaskData(src_tok, label_set, TrainSet(cfg, Ragged.from_lists(src), Ragged.from_lists(tgt)))
    data.notes.append(f"train: {len(texts)} sentences, {len(label_set)} classes ({', '.join(label_set.labels)})")
    if d.dev:
        dev_texts, dev_labels, _, dev_where, dev_numbers = read_classification(d.dev, d.src, d.tgt)
        data.dev_src, data.dev_tgt = encode(dev_texts, dev_labels, dev_where, dev_numbers)
    return data
