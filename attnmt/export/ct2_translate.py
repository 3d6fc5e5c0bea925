"""Translating with a directory ``attnmt export --format ctranslate2`` wrote: ``attnmt translate
--engine ctranslate2``. Text in, text out through the run's own tokenizers; no PyTorch (its
import alone costs a second or two of a command's start).

CTranslate2 runs fastest on a CPU as one single-threaded translator replica per core, each
taking small batches (``inter_threads`` = cores, ``intra_threads`` = 1, batches of 16 sentences):
a search step of one sentence batch has too little work to split over cores, while replicas
searching different batches keep every core busy (issue 58's trial on 2 cores, the race's d 256
int8 Transformer, 1,340 lines at beam 5: 9.4-10.0 s, against 14.4-18.6 s for one two-threaded
replica on batches of 64 and 18.2-20.4 s for this command before; benchmarks/ct2_engine.py
measures the command against CTranslate2 called directly).
``layout`` picks that from the cores this process may use; each part can be set instead
(``--inter-threads``, ``--intra-threads``, ``--batch-size``). On a GPU one replica takes larger
batches.

The batches are attnmt's: lines sorted by length (longest first), cut into ``max_batch_size``
lines, each with its own length limit min(max_len_cap, ⌈max_len_ratio · its longest source⌉ +
10) pieces, all queued at once (``asynchronous``) so the replicas take them as they come free.
``prefixes`` go to CTranslate2's ``target_prefix`` (each output starts with its pieces),
``nbest`` to ``num_hypotheses`` (its best ``nbest`` hypotheses, best first, with scores).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from attnmt.data.vocab import load_tokenizer
from attnmt.errors import UserError

INFO = "attnmt.json"
INSTALL = "pip install 'attnmt[ctranslate2]' (or pip install 'ctranslate2>=4,<5')"
CPU_BATCH = 16  # sentences per batch of a single-threaded replica on a CPU
GPU_BATCH = 64


def ctranslate2_module():
    """The ``ctranslate2`` package, or a one-line error saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(f"CTranslate2 is not installed: {INSTALL}") from None
    return ctranslate2


def cpu_cores() -> int:
    """The cores this process may run on (its affinity: a container's or taskset's share)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Layout:
    """How CTranslate2 spreads a job: replicas (``inter_threads``), threads per replica
    (``intra_threads``) and sentences per batch (``max_batch_size``)."""

    inter_threads: int
    intra_threads: int
    max_batch_size: int

    def describe(self) -> str:
        return (f"{self.inter_threads} replica{'s' if self.inter_threads != 1 else ''} x "
                f"{self.intra_threads} thread{'s' if self.intra_threads != 1 else ''}, "
                f"batches of {self.max_batch_size}")


def layout(device: str = "cpu", cores: int | None = None, inter_threads: int | None = None,
           intra_threads: int | None = None, max_batch_size: int | None = None) -> Layout:
    """The layout for ``device``: on a CPU one single-threaded replica per core (``cores``:
    ``cpu_cores()``) on batches of ``CPU_BATCH``; on a GPU one replica on batches of
    ``GPU_BATCH``. A part given (not None) replaces the default."""
    if device == "cuda":
        base = Layout(1, 1, GPU_BATCH)
    else:
        base = Layout(cores or cpu_cores(), 1, CPU_BATCH)
    for name, value in (("--inter-threads", inter_threads), ("--intra-threads", intra_threads),
                        ("--batch-size", max_batch_size)):
        if value is not None and value < 1:
            raise UserError(f"{name} must be at least 1, got {value}")
    return Layout(inter_threads or base.inter_threads, intra_threads or base.intra_threads,
                  max_batch_size or base.max_batch_size)


def read_info(model_dir: str | os.PathLike) -> dict:
    """The ``attnmt.json`` of an exported directory."""
    path = Path(model_dir) / INFO
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError("not an attnmt CTranslate2 export (no attnmt.json)", str(model_dir)) from None
    except (OSError, ValueError) as err:
        raise UserError(f"unreadable ({err})", str(path)) from None
    if not isinstance(info, dict) or info.get("format") != "ctranslate2":
        raise UserError("not an attnmt CTranslate2 export", str(path))
    return info


def engine_device(device: str) -> str:
    """CTranslate2's device for attnmt's name of it (auto, cpu, cuda, cuda:N): "cpu" or "cuda"."""
    if device == "auto":
        return "cuda" if ctranslate2_module().get_cuda_device_count() > 0 else "cpu"
    if device.startswith("cuda"):
        return "cuda"
    return device


@dataclass
class Hypothesis:
    text: str
    score: float  # CTranslate2's: log-probability / length^length_penalty


def translate(model_dir: str | os.PathLike, lines: list[str], beam: int = 5, nbest: int = 1,
              length_penalty: float = 1.0, max_len_ratio: float = 2.0, max_len_cap: int = 512,
              device: str = "auto", compute_type: str = "default", prefixes: list[str] | None = None,
              parts: Layout | None = None) -> list[list[Hypothesis]]:
    """Per line its ``nbest`` hypotheses, best first (a blank line: none), by CTranslate2 on the
    exported directory (module docstring); ``parts``: the layout (default: ``layout(device)``)."""
    ct2 = ctranslate2_module()
    info = read_info(model_dir)
    lower = bool(info.get("lowercase"))  # the run's data.lowercase: its tokenizers lower-case what they read
    src_tok, tgt_tok = load_tokenizer(model_dir, "src", lower), load_tokenizer(model_dir, "tgt", lower)
    kind = engine_device(device)
    parts = parts or layout(kind)
    index = int(device.partition(":")[2] or 0) if device.startswith("cuda") else 0
    try:
        translator = ct2.Translator(str(model_dir), device=kind, device_index=index, compute_type=compute_type,
                                    inter_threads=parts.inter_threads, intra_threads=parts.intra_threads)
    except (RuntimeError, ValueError) as err:  # a damaged model.bin, an unknown device or compute type
        raise UserError(f"CTranslate2 cannot load it ({str(err).splitlines()[0][:200]})", str(model_dir)) from None
    pieces = [src_tok.split(line) for line in lines]
    starts = [tgt_tok.split(p) if p and p.strip() else [] for p in (prefixes or [""] * len(lines))]
    order = sorted((i for i, p in enumerate(pieces) if p), key=lambda i: len(pieces[i]), reverse=True)
    chunks = [order[k : k + parts.max_batch_size] for k in range(0, len(order), parts.max_batch_size)]
    pending = []
    try:
        for chunk in chunks:  # every batch queued first: the replicas take them as they come free
            longest = max(len(pieces[i]) for i in chunk)
            limit = min(max_len_cap, math.ceil(max_len_ratio * longest) + 10)
            prefix = [starts[i] for i in chunk] if any(starts[i] for i in chunk) else None
            pending.append(translator.translate_batch(
                [pieces[i] for i in chunk], target_prefix=prefix, beam_size=beam, num_hypotheses=nbest,
                length_penalty=length_penalty, max_input_length=0, return_scores=True,
                max_decoding_length=max(limit, *(len(starts[i]) + 1 for i in chunk)), asynchronous=True))
        out: list[list[Hypothesis]] = [[] for _ in lines]
        for chunk, results in zip(chunks, pending):
            for i, result in zip(chunk, results):
                done = result.result()
                out[i] = [Hypothesis(tgt_tok.decode_pieces(h), float(s))
                          for h, s in zip(done.hypotheses, done.scores)]
    except (RuntimeError, ValueError) as err:  # e.g. a line longer than the position table
        raise UserError(f"CTranslate2 failed on a batch ({str(err).splitlines()[0][:200]})", str(model_dir)) from None
    return out
