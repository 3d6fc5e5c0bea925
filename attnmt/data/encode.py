"""A split encoded by worker processes, chunk by chunk, and merged into its arrays
(data/prepare.py's step 3).

Each worker reads a chunk of whole lines of both files (data/sources.py), checks them, drops the
pairs the filters remove, encodes the rest with the tokenizers saved in the work folder and writes
the chunk's ids, lengths (and text) as raw shard files. The parent merges the shards in corpus
order into ``{split}.{side}.{ids,off,len}.npy`` by streaming them behind an ``.npy`` header, so
neither side holds more than a chunk in memory. Workers are started with ``spawn`` (no copy of a
trainer's threads or CUDA state) and die with their parent.
"""

from __future__ import annotations

import ctypes
import itertools
import multiprocessing
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnmt.data import sources as S
from attnmt.data.ragged import write_npy_header
from attnmt.errors import UserError

REASONS = ("keep", "empty", "identical", "too_long", "ratio")


@dataclass
class Job:
    """One chunk of one corpus of one split."""

    work: str
    split: str
    corpus: int
    chunk: int
    task: str
    paths: tuple[str, ...]
    ranges: tuple[tuple[int, int], ...]  # (start, stop) bytes in each file
    first_line: int
    tsv: bool
    lowercase: bool
    dtype: str
    len_dtype: str
    max_len: int
    max_ratio: float
    drop_identical: bool
    keep_text: bool

    @property
    def shard(self) -> str:
        return str(Path(self.work) / "shards" / f"{self.split}.{self.corpus:04d}.{self.chunk:06d}")


_TOKENIZERS: dict = {}


def _tokenizer(work: str, side: str, lowercase: bool):
    from attnmt.data.vocab import load_tokenizer

    key = (work, side, lowercase)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = load_tokenizer(work, side, lowercase)
    return _TOKENIZERS[key]


def encode_chunk(job: Job) -> dict:
    """The worker: one chunk → shard files; returns counts (or the error, as text: a UserError
    crosses the process boundary as its message)."""
    try:
        return _encode(job)
    except UserError as err:
        return {"error": str(err)}


def _read(job: Job) -> tuple[list[str], list[str] | None, int]:
    bom = job.first_line == 1
    if job.task == "lm":
        (a, b), = job.ranges
        lines = S.decode_lines(S.read_range(job.paths[0], a, b), job.paths[0], job.first_line, bom)
        return lines, None, len(lines)
    if job.tsv:
        (a, b), = job.ranges
        lines = S.decode_lines(S.read_range(job.paths[0], a, b), job.paths[0], job.first_line, bom)
        src, tgt, _ = S.split_pairs(lines, job.paths[0], job.first_line)
        return src, tgt, len(lines)
    sides = [S.decode_lines(S.read_range(p, a, b), p, job.first_line, bom)
             for p, (a, b) in zip(job.paths, job.ranges)]
    if len(sides[0]) != len(sides[1]):  # the index found the same count: a file changed since
        raise UserError(f"changed while being read ({len(sides[0])} vs {len(sides[1])} lines from "
                        f"line {job.first_line})", job.paths[0])
    return sides[0], sides[1], len(sides[0])


def _encode(job: Job) -> dict:
    first, second, read = _read(job)
    first = [x.strip() for x in first]
    reason = np.zeros(read, np.uint8)
    if second is None:
        texts = {"tgt": first}
        reason[[k for k, x in enumerate(first) if not x]] = 1
    else:
        second = [x.strip() for x in second]
        texts = {"src": first, "tgt": second}
        reason[[k for k, (s, t) in enumerate(zip(first, second)) if not s or not t]] = 1
        if job.drop_identical:
            same = [k for k, (s, t) in enumerate(zip(first, second)) if s == t and reason[k] == 0]
            reason[same] = 2
    todo = np.flatnonzero(reason == 0)
    ids, lengths = {}, {}
    for side, lines in texts.items():
        tok = _tokenizer(job.work, side, job.lowercase)
        ids[side] = tok.encode_many([lines[k] for k in todo.tolist()])
        lengths[side] = np.fromiter(map(len, ids[side]), np.int64, count=len(todo))
    sub = np.zeros(len(todo), np.uint8)  # why each encoded pair goes (0: it stays)
    for side in texts:
        sub[lengths[side] == 0] = 1
    if second is not None:
        ls, lt = lengths["src"], lengths["tgt"]
        if job.max_len > 0:
            sub[(sub == 0) & ((ls > job.max_len) | (lt > job.max_len))] = 3
        if job.max_ratio > 0:
            longer, shorter = np.maximum(ls, lt), np.maximum(np.minimum(ls, lt), 1)
            sub[(sub == 0) & (longer > job.max_ratio * shorter)] = 4
    reason[todo] = sub
    candidate = sub == 0
    keep = todo[candidate]
    out = {"read": read, "pairs": int(len(keep)), "tokens": {},
           "removed": {name: int(np.count_nonzero(reason == k)) for k, name in enumerate(REASONS) if k}}
    for side, lines in texts.items():
        kept_ids = list(itertools.compress(ids[side], candidate.tolist()))
        kept_len = lengths[side][candidate]
        total = int(kept_len.sum())
        np.fromiter(itertools.chain.from_iterable(kept_ids), job.dtype, count=total).tofile(f"{job.shard}.{side}.ids")
        kept_len.astype(job.len_dtype).tofile(f"{job.shard}.{side}.len")
        out["tokens"][side] = total
        if job.keep_text:
            text = [lines[k] for k in keep.tolist()]
            data = [line.encode("utf-8") for line in text]
            with open(f"{job.shard}.{side}.txt", "wb") as f:
                f.write(b"".join(x + b"\n" for x in data))
            np.fromiter((len(x) + 1 for x in data), np.int64, count=len(data)).tofile(f"{job.shard}.{side}.tlen")
    return out


def _die_with_parent() -> None:
    """A worker ends when the preparation does (kill -9 included): Linux's parent-death signal."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_jobs(jobs: list[Job], workers: int, progress: bool):
    """Each job's result, in order: in this process for one job or one worker, else in a pool."""
    from tqdm import tqdm

    workers = min(workers or os.cpu_count() or 1, len(jobs))
    bar = tqdm(total=len(jobs), unit="chunk", disable=not progress, mininterval=1.0, leave=False)
    try:
        if workers <= 1:
            for job in jobs:
                yield encode_chunk(job)
                bar.update(1)
            return
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(workers, initializer=_die_with_parent) as pool:
            for result in pool.imap(encode_chunk, jobs):
                yield result
                bar.update(1)
    finally:
        bar.close()


def encode_split(spec, split: str, corpora: list[S.CorpusSource], indexes, work: Path,
                 dtype: np.dtype, progress: bool) -> dict:
    """Encode one split (module docstring); returns its manifest entry."""
    train = split == "train"
    max_len = spec.max_len if train and spec.task != "lm" else 0
    len_dtype = np.uint16 if 0 < max_len < 1 << 16 else np.uint32
    keep_text = spec.keep_text or not train
    (work / "shards").mkdir(exist_ok=True)
    jobs = []
    for k, (source, files) in enumerate(zip(corpora, indexes)):
        chunks = [S.chunk_ranges(f) for f in files]
        for c, parts in enumerate(zip(*chunks)):
            jobs.append(Job(str(work), split, k, c, spec.task, source.paths,
                            tuple((a, b) for _, a, b in parts), parts[0][0], source.tsv,
                            spec.lowercase, np.dtype(dtype).name, np.dtype(len_dtype).name, max_len,
                            spec.max_ratio if train else 0.0, spec.drop_identical and train, keep_text))
    info = {"read": 0, "pairs": 0, "removed": {name: 0 for name in REASONS[1:]},
            "tokens": {side: 0 for side in spec.sides()}, "text": keep_text, "corpora": []}
    per_corpus = [{"name": c.name, "weight": c.weight, "start": 0, "pairs": 0, "read": 0} for c in corpora]
    for job, result in zip(jobs, run_jobs(jobs, spec.workers, progress)):
        if "error" in result:
            raise UserError(result["error"])
        info["read"] += result["read"]
        info["pairs"] += result["pairs"]
        per_corpus[job.corpus]["read"] += result["read"]
        per_corpus[job.corpus]["pairs"] += result["pairs"]
        for name, n in result["removed"].items():
            info["removed"][name] += n
        for side, n in result["tokens"].items():
            info["tokens"][side] += n
    start = 0
    for entry in per_corpus:
        entry["start"], start = start, start + entry["pairs"]
    info["corpora"] = per_corpus
    shards = [job.shard for job in jobs]
    for side in spec.sides():
        _merge(work / f"{split}.{side}", shards, side, dtype, len_dtype, info["pairs"], info["tokens"][side],
               keep_text)
    shutil.rmtree(work / "shards")
    return info


def _merge(prefix: Path, shards: list[str], side: str, dtype, len_dtype, n: int, tokens: int,
           text: bool) -> None:
    """The shards of one side as its .npy arrays (and text), streamed."""
    with open(f"{prefix}.ids.npy", "wb") as ids, open(f"{prefix}.len.npy", "wb") as lens, \
            open(f"{prefix}.off.npy", "wb") as offs:
        write_npy_header(ids, dtype, tokens)
        write_npy_header(lens, len_dtype, n)
        write_npy_header(offs, np.int64, n + 1)
        np.zeros(1, np.int64).tofile(offs)
        base = 0
        for shard in shards:
            _append(ids, f"{shard}.{side}.ids")
            part = np.fromfile(f"{shard}.{side}.len", len_dtype)
            part.tofile(lens)
            (base + np.cumsum(part, dtype=np.int64)).tofile(offs)
            base += int(part.sum(dtype=np.int64))
    if not text:
        return
    with open(f"{prefix}.txt", "wb") as txt, open(f"{prefix}.toff.npy", "wb") as toff:
        write_npy_header(toff, np.int64, n + 1)
        np.zeros(1, np.int64).tofile(toff)
        base = 0
        for shard in shards:
            _append(txt, f"{shard}.{side}.txt")
            part = np.fromfile(f"{shard}.{side}.tlen", np.int64)
            (base + np.cumsum(part)).tofile(toff)
            base += int(part.sum())


def _append(dest, path: str) -> None:
    with open(path, "rb") as f:
        shutil.copyfileobj(f, dest, 1 << 22)
    os.unlink(path)
