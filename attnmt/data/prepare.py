"""Preparing a corpus once: tokenizers from a bounded sample, every split encoded by worker
processes into flat memory-mappable arrays, a manifest, all of it or nothing.

    attnmt data prepare --train PREFIX[:WEIGHT] ... [--dev PREFIX] --out DIR
    attnmt train CONFIG                # data.train raw text: prepared into RUN/data by this code

``DIR`` holds (data/prepared.py reads it):

    manifest.json                    what was read (files, lines, SHA-256), the tokenizers and
                                     their sample, the filters and what each removed, the counts
    src.spm.model tgt.spm.model      the tokenizers (or src.vocab / tgt.vocab for words)
    {split}.{side}.ids.npy           every kept sentence's ids, concatenated (uint16 / uint32)
    {split}.{side}.off.npy           int64 offsets (n + 1); {split}.{side}.len.npy: lengths
    {split}.{side}.txt, .toff.npy    the kept lines and their byte offsets (dev always; train
                                     with --keep-text, which data.spm_alpha needs)

Filters, applied to the training split in this order (each pair counted under the first that
removes it): ``empty`` (a side blank, or no pieces), ``identical`` (source = target, opt-in),
``too_long`` (a side over ``max_len`` pieces; not for an LM, which training truncates) and
``ratio`` (the longer side over ``max_ratio`` times the shorter, opt-in). Dev data loses empty
pairs only.

The work happens in ``.DIR.partial-PID`` beside ``DIR`` and is renamed to ``DIR`` once the
manifest is written: a killed preparation leaves a partial folder that never looks finished
(the next preparation removes it), a full disk a one-line error and no ``DIR``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from attnmt.data import sources as S
from attnmt.data.ragged import id_dtype, write_npy_header
from attnmt.data.vocab import (SentencePieceTokenizer, Tokenizer, WordTokenizer, load_tokenizer,
                               read_vocab)
from attnmt.errors import UserError

FORMAT = "attnmt-prepared"
VERSION = 1
MANIFEST = "manifest.json"
SAMPLE = 2_000_000  # tokenizer training sentences per side
# ... and characters: sentencepiece's unigram trainer holds ~21 bytes per character of its input
# (its suffix array), so 64 M characters keep it near 1.4 GB whatever the sentences' length
SAMPLE_CHARS = 64_000_000
FILTERS = ("empty", "identical", "too_long", "ratio")


@dataclass
class PrepareSpec:
    """What a preparation does; ``settings()`` is what its manifest records and compares."""

    train: list[S.CorpusSource]
    dev: list[S.CorpusSource] = field(default_factory=list)
    task: str = "translate"  # translate | lm
    src: str = "en"
    tgt: str = "es"
    tokenizer: str = "unigram"  # word | bpe | unigram
    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    given: dict[str, str] = field(default_factory=dict)  # side -> a tokenizer file to use
    lowercase: bool = False
    max_len: int = 0  # 0: no length filter
    max_ratio: float = 0.0  # 0: no ratio filter
    drop_identical: bool = False
    sample: int = SAMPLE
    sample_chars: int = SAMPLE_CHARS
    seed: int = 1
    keep_text: bool = False
    workers: int = 0  # 0: one per core

    def sides(self) -> tuple[str, ...]:
        return ("tgt",) if self.task == "lm" else ("src", "tgt")

    def settings(self) -> dict:
        d = asdict(self)
        d.pop("workers")
        d["train"] = [_source_record(s) for s in self.train]
        d["dev"] = [_source_record(s) for s in self.dev]
        d["given"] = {side: _file_identity(p) for side, p in sorted(self.given.items())}
        return d


def _source_record(s: S.CorpusSource) -> dict:
    return {"name": s.name, "weight": s.weight, "files": [_file_identity(p) for p in s.paths]}


def _file_identity(path: str) -> dict:
    st = os.stat(path)
    return {"path": os.path.abspath(path), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


# -- the output folder ----------------------------------------------------------------------------
def read_manifest(out: Path) -> dict | None:
    try:
        with open(out / MANIFEST, encoding="utf-8") as f:
            man = json.load(f)
    except (OSError, ValueError):
        return None
    return man if isinstance(man, dict) and man.get("format") == FORMAT else None


def _claim(out: Path, force: bool) -> None:
    """``out`` may be written: absent, empty, or (with ``force``) an earlier preparation."""
    for stale in out.parent.glob(f".{out.name}.partial-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    if not out.exists():
        if not out.parent.is_dir():
            raise UserError(f"cannot be written: folder {out.parent} does not exist", str(out))
        return
    if not out.is_dir():
        raise UserError("--out is a file, not a folder", str(out))
    if not any(out.iterdir()):
        return
    if read_manifest(out) is None:
        raise UserError("--out holds files that prepare did not write; give a new or empty folder", str(out))
    if not force:
        raise UserError("--out holds a prepared corpus with other settings (--force replaces it)", str(out))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prepare(spec: PrepareSpec, out: str | os.PathLike, force: bool = False,
            say: Callable[[str], None] = lambda line: print(f"attnmt: {line}", file=sys.stderr),
            progress: bool = False) -> dict:
    """Prepare ``spec`` into ``out`` (module docstring); returns the manifest. A folder that
    already holds this preparation of unchanged files is kept as it is."""
    out = Path(out)
    done = read_manifest(out)
    if done is not None and done.get("settings") == _json(spec.settings()):
        say(f"prepare: {out} is prepared already (same files and settings)")
        return done
    _claim(out, force)
    work = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    start = time.perf_counter()
    try:
        work.mkdir()
        manifest = _prepare(spec, work, say, progress)
        manifest["seconds"] = round(time.perf_counter() - start, 1)
        with open(work / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _replace(work, out)
    except OSError as err:
        shutil.rmtree(work, ignore_errors=True)
        if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES):
            raise UserError(f"cannot be written ({err.strerror})", str(out)) from None
        raise
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest


def _replace(work: Path, out: Path) -> None:
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.rename(out, old)
    os.rename(work, out)
    shutil.rmtree(old, ignore_errors=True)


def _json(value):
    return json.loads(json.dumps(value))


# -- the steps ------------------------------------------------------------------------------------
def _prepare(spec: PrepareSpec, work: Path, say, progress: bool) -> dict:
    start = time.perf_counter()
    indexes = {split: [[S.index_file(p) for p in c.paths] for c in corpora]
               for split, corpora in (("train", spec.train), ("dev", spec.dev))}
    for corpora, files in zip((spec.train, spec.dev), indexes.values()):
        for c, idx in zip(corpora, files):
            if len(idx) == 2 and idx[0].lines != idx[1].lines:
                raise UserError(f"line counts differ: {idx[0].path} has {idx[0].lines} lines, "
                                f"{idx[1].path} has {idx[1].lines}")
    took = {"index": time.perf_counter()}
    sample_info = {side: train_tokenizer(spec, side, indexes["train"], work) for side in spec.sides()}
    took["tokenizers"] = time.perf_counter()
    toks = {side: load_tokenizer(work, side, spec.lowercase) for side in spec.sides()}
    dtype = id_dtype(max(len(t) for t in toks.values()))
    from attnmt.data.encode import encode_split  # the workers' side

    splits = {}
    for split, corpora in (("train", spec.train), ("dev", spec.dev)):
        if corpora:
            splits[split] = encode_split(spec, split, corpora, indexes[split], work, dtype, progress)
            say(_summary(split, splits[split], spec))
    if not splits["train"]["pairs"]:
        raise UserError("no training pair is left after the filters", spec.train[0].paths[0])
    took["encode"] = time.perf_counter()
    phases = {"index": round(took["index"] - start, 1),
              "tokenizers": round(took["tokenizers"] - took["index"], 1),
              "encode": round(took["encode"] - took["tokenizers"], 1)}
    return {
        "format": FORMAT, "version": VERSION, "task": spec.task, "src": spec.src, "tgt": spec.tgt,
        "dtype": dtype.name, "settings": _json(spec.settings()),
        "tokenizers": {side: {"kind": spec.tokenizer if side not in spec.given else "given",
                              "size": len(toks[side]), "sample": sample_info[side]}
                       for side in spec.sides()},
        "filters": {"max_len": spec.max_len, "max_ratio": spec.max_ratio,
                    "drop_identical": spec.drop_identical},
        "splits": splits, "phase_seconds": phases,
        "files": {split: [[i.record() for i in idx] for idx in indexes[split]] for split in indexes},
    }


def _summary(split: str, info: dict, spec: PrepareSpec) -> str:
    removed = info["removed"]
    why = {"empty": "empty", "identical": "identical source and target",
           "too_long": f"over {spec.max_len} pieces", "ratio": f"length ratio over {spec.max_ratio}"}
    parts = [f"{removed[k]:,} {why[k]}" for k in FILTERS if removed.get(k)]
    unit = "lines" if spec.task == "lm" else "pairs"
    return (f"prepare: {split} {info['read']:,} {unit} read, {info['pairs']:,} kept"
            + (f"; removed {', '.join(parts)}" if parts else "; none removed"))


def train_tokenizer(spec: PrepareSpec, side: str, indexes, work: Path) -> dict:
    """The ``side`` tokenizer, saved into ``work`` (given, or trained on the sample); returns
    what the manifest says of its sample."""
    given = spec.given.get(side)
    if given:
        if given.endswith(".vocab"):
            tokens, lang = read_vocab(Path(given))
            tok: Tokenizer = WordTokenizer(tokens, lang, spec.lowercase)
        else:
            tok = SentencePieceTokenizer.load_checked(given, spec.lowercase)
        tok.save(work, side)
        return {"given": os.path.abspath(given)}
    lines, how = tokenizer_sample(spec, side, indexes)
    if not lines:
        what = "training text has no non-empty lines" if spec.task == "lm" else \
            "corpus has no non-empty sentence pairs"
        raise UserError(what, spec.train[0].paths[0])
    size = spec.src_vocab_size if side == "src" else spec.tgt_vocab_size
    lang = spec.src if side == "src" else spec.tgt
    tok = build_tokenizer(spec.tokenizer, lines, size, lang, work / f"{side}.spm", spec.lowercase)
    tok.save(work, side)
    return {"sentences": len(lines), "characters": sum(map(len, lines)), "method": how,
            "limit": spec.sample, "limit_chars": spec.sample_chars, "seed": spec.seed}


def build_tokenizer(kind: str, lines: list[str], size: int, lang: str, prefix: Path,
                    lowercase: bool = False) -> Tokenizer:
    if kind == "word":
        return WordTokenizer.build(lines, max_size=size, lang=lang, lowercase=lowercase)
    if kind in ("bpe", "unigram"):
        return SentencePieceTokenizer.build(lines, prefix, vocab_size=size, model_type=kind,
                                            lowercase=lowercase)
    raise UserError(f"data.tokenizer must be word, bpe or unigram, not {kind!r}")


def tokenizer_sample(spec: PrepareSpec, side: str, indexes) -> tuple[list[str], str]:
    """The lines ``side``'s tokenizer learns from (data/sources.py's docstring) and how they
    were chosen: at most ``spec.sample`` of them, then a seeded random subset (in order) within
    ``spec.sample_chars`` characters."""
    lines, how = _sampled_lines(spec, side, indexes)
    total = sum(map(len, lines))
    if spec.sample_chars and total > spec.sample_chars:
        rng = np.random.default_rng([spec.seed, 7])
        order = rng.permutation(len(lines))
        within = np.cumsum(np.fromiter((len(lines[i]) for i in order), np.int64, count=len(order)))
        keep = np.sort(order[: int(np.searchsorted(within, spec.sample_chars, side="right"))])
        lines = [lines[i] for i in keep.tolist()]
        how += f", {spec.sample_chars:,} characters of them at random"
    return lines, how


def _sampled_lines(spec: PrepareSpec, side: str, indexes) -> tuple[list[str], str]:
    total = sum(idx[0].lines for idx in indexes)
    column = 0 if spec.task == "lm" or side == "src" else 1
    if total <= spec.sample:
        lines: list[str] = []
        for source in spec.train:
            first, second = S.read_pairs(source, spec.task)
            if second is None:
                lines += [x.strip() for x in first if x.strip()]
            else:
                lines += [(s if column == 0 else t).strip() for s, t in zip(first, second)
                          if s.strip() and t.strip()]
        return lines, "all lines"
    rng = np.random.default_rng([spec.seed, column])
    files = [idx[0] if source.tsv or len(idx) == 1 else idx[column]
             for source, idx in zip(spec.train, indexes)]
    sizes = np.array([f.size for f in files], np.float64)
    count = spec.sample
    if spec.sample_chars:  # about the lines the character cap keeps: their bytes (≥ characters)
        # say how many, a TSV line holding both sides
        chars = sum(f.size / (2 if source.tsv else 1) for f, source in zip(files, spec.train))
        count = min(count, int(1.2 * spec.sample_chars * total / max(chars, 1)) + 1)
    counts = rng.multinomial(count, sizes / sizes.sum())
    lines = []
    for source, count in zip(spec.train, counts.tolist()):
        if not count:
            continue
        if source.tsv:
            raw = S.sample_at_offsets(source.paths[0], count, rng)
            picked = [cols[-2 + column] if len(cols) >= 2 else "" for cols in (x.split("\t") for x in raw)]
        else:
            picked = S.sample_at_offsets(source.paths[0 if spec.task == "lm" else column], count, rng)
        lines += [x.strip() for x in picked if x.strip()]
    return lines, "random lines"
