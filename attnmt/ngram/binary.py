"""attnmt's n-gram binary format: a safetensors file of the sorted per-order arrays.

Tensors ``K.prefix`` (int64), ``K.word`` (int32), ``K.logp``, ``K.logb`` (float32, log10) for
every order K, and ``vocab`` (uint8: the words joined by newlines); metadata ``format``,
``version``, ``order`` and ``info`` (JSON). The file is written as a stream, one column block at a
time (the header only needs the lengths), so a model larger than memory can be saved; the 64-bit
columns come first and the header is padded to 8 bytes, so every column is aligned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from attnmt.data.corpus import atomic_path
from attnmt.errors import UserError
from attnmt.files import open_regular

FORMAT = "attnmt-ngram"
VERSION = 1
_NAMES = {np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.float32): "F32",
          np.dtype(np.uint8): "U8"}
COLUMNS = (("prefix", np.int64), ("word", np.int32), ("logp", np.float32),
           ("logb", np.float32))


def write_binary(path: str | os.PathLike, vocab: list[str], source, info: dict,
                 block: int = 1 << 22) -> None:
    """Write ``source`` (:mod:`attnmt.ngram.tables`) atomically to ``path``."""
    if any("\n" in w for w in vocab):
        raise UserError("a vocabulary entry contains a newline", str(path))
    vocab_bytes = np.frombuffer("\n".join(vocab).encode("utf-8"), np.uint8)
    entries = []  # (name, dtype, length, order, column)
    for col, dtype in COLUMNS:  # all int64 columns first: every column stays aligned
        for k in range(1, source.order + 1):
            entries.append((f"{k}.{col}", np.dtype(dtype), source.size(k), k, col))
    entries.append(("vocab", np.dtype(np.uint8), len(vocab_bytes), 0, None))
    header: dict = {"__metadata__": {"format": FORMAT, "version": str(VERSION),
                                     "order": str(source.order), "info": json.dumps(info)}}
    offset = 0
    for name, dtype, n, _, _ in entries:
        header[name] = {"dtype": _NAMES[dtype], "shape": [n],
                        "data_offsets": [offset, offset + n * dtype.itemsize]}
        offset += n * dtype.itemsize
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:  # no half-written file on any error
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for _, dtype, n, k, col in entries:
            if col is None:
                f.write(memoryview(vocab_bytes))
                continue
            for start in range(0, n, block):
                part = source.column(k, col, start, min(n, start + block))
                f.write(memoryview(np.ascontiguousarray(part, dtype=dtype)).cast("B"))


def read_binary(path: str | os.PathLike) -> tuple[list[str], list, dict]:
    """(vocab, per-order OrderTables, info) of a binary file, each column read straight into its
    array (no memory map, no second copy: loading needs the file's size in memory, no more)."""
    from attnmt.ngram.estimate import OrderTable

    path = Path(path)
    with open_regular(path, "n-gram model file") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            n = int.from_bytes(f.read(8), "little")
            if not 0 < n <= min(size - 8, 100 << 20):
                raise ValueError("bad header length")
            header = json.loads(f.read(n))
            meta = header.pop("__metadata__", None) or {}
        except (ValueError, UnicodeDecodeError) as err:
            raise UserError(f"cannot read n-gram binary ({err})", str(path)) from None
        if meta.get("format") != FORMAT:
            raise UserError(f"not an {FORMAT} binary file", str(path))
        try:
            if int(meta.get("version", 0)) > VERSION:
                raise UserError(f"{FORMAT} version {meta['version']} is newer than this attnmt "
                                "understands", str(path))
            order = int(meta["order"])
            info = json.loads(meta.get("info", "{}"))

            def column(name: str, dtype) -> np.ndarray:
                entry = header[name]
                begin, end = entry["data_offsets"]
                stored = {v: k for k, v in _NAMES.items()}[entry["dtype"]]
                count = (end - begin) // stored.itemsize
                if entry["shape"] != [count] or not 0 <= begin <= end <= size - 8 - n:
                    raise ValueError(f"bad shape or offsets of {name}")
                f.seek(8 + n + begin)
                data = np.fromfile(f, stored, count)
                if len(data) != count:
                    raise ValueError(f"{name} is truncated")
                return data if stored == np.dtype(dtype) else data.astype(dtype)

            vocab = column("vocab", np.uint8).tobytes().decode("utf-8").split("\n")
            tables = [OrderTable(*(column(f"{k}.{c}", dt) for c, dt in
                                   (("word", np.int32), ("prefix", np.int64),
                                    ("logp", np.float32), ("logb", np.float32))))
                      for k in range(1, order + 1)]
        except UserError:
            raise
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as err:
            raise UserError(f"cannot read n-gram binary ({err})", str(path)) from None
    return vocab, tables, info
