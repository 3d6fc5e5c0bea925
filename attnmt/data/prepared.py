"""Reading a prepared corpus (data/prepare.py writes it): the manifest, checked, and each split's
arrays memory-mapped (data/ragged.py).

    corpus = open_prepared("data/bible-prep")
    train = corpus.split("train")            # train.src / train.tgt: Ragged, train.corpora: ranges
    train.lines("tgt", np.array([0, 5]))     # kept text (dev; train with --keep-text)
    corpus.tokenizer("tgt", lowercase)

A folder that is not a finished preparation (no manifest, another format or version, an array
missing or of the wrong size) is a one-line error naming it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnmt.data.prepare import FORMAT, MANIFEST, VERSION
from attnmt.data.ragged import Ragged
from attnmt.errors import UserError


@dataclass
class CorpusRange:
    """One corpus of a split: its sentences are ``start .. start + pairs``."""

    name: str
    weight: float
    start: int
    pairs: int


class PreparedSplit:
    def __init__(self, root: Path, name: str, info: dict, sides: tuple[str, ...]):
        self.name = name
        self.sides = {side: Ragged.open(root / f"{name}.{side}") for side in sides}
        self.corpora = [CorpusRange(c["name"], float(c["weight"]), int(c["start"]), int(c["pairs"]))
                        for c in info["corpora"]]
        self.has_text = bool(info.get("text"))
        self._root = root
        self._text: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        n = int(info["pairs"])
        for side, ragged in self.sides.items():
            tokens = int(info["tokens"][side])
            if len(ragged) != n or len(ragged.offsets) != n + 1 or len(ragged.ids) != tokens:
                raise UserError(f"{name}.{side} arrays do not match the manifest's counts (an "
                                "incomplete copy?)", str(root))

    @property
    def src(self) -> Ragged | None:
        return self.sides.get("src")

    @property
    def tgt(self) -> Ragged:
        return self.sides["tgt"]

    def __len__(self) -> int:
        return len(self.tgt)

    def corpus_of(self, index: np.ndarray) -> np.ndarray:
        """The corpus number of each sentence of ``index``."""
        starts = np.array([c.start for c in self.corpora], np.int64)
        return np.searchsorted(starts, np.asarray(index, np.int64), side="right") - 1

    def lines(self, side: str, index: np.ndarray) -> list[str]:
        """The kept text of sentences ``index``."""
        if not self.has_text:
            raise UserError(f"the {self.name} split keeps no text (prepare it with --keep-text)",
                            str(self._root))
        if side not in self._text:
            data = np.memmap(self._root / f"{self.name}.{side}.txt", np.uint8, mode="r") \
                if os.path.getsize(self._root / f"{self.name}.{side}.txt") else np.zeros(0, np.uint8)
            offsets = np.load(self._root / f"{self.name}.{side}.toff.npy", mmap_mode="r")
            self._text[side] = (data, offsets)
        data, offsets = self._text[side]
        out = []
        for i in np.asarray(index, np.int64).tolist():
            out.append(bytes(data[offsets[i] : offsets[i + 1] - 1]).decode("utf-8"))
        return out

    def all_lines(self, side: str) -> list[str]:
        return self.lines(side, np.arange(len(self)))

    def release(self) -> None:
        for ragged in self.sides.values():
            ragged.release()


class PreparedCorpus:
    def __init__(self, root: Path, manifest: dict):
        self.root, self.manifest = root, manifest
        self.task: str = manifest["task"]
        self.sides: tuple[str, ...] = ("tgt",) if self.task == "lm" else ("src", "tgt")
        self._splits: dict[str, PreparedSplit] = {}

    def split(self, name: str) -> PreparedSplit | None:
        info = self.manifest["splits"].get(name)
        if info is None:
            return None
        if name not in self._splits:
            try:
                self._splits[name] = PreparedSplit(self.root, name, info, self.sides)
            except (OSError, ValueError, KeyError) as err:
                raise UserError(f"the {name} split cannot be read ({type(err).__name__}: "
                                f"{str(err).splitlines()[0] if str(err) else ''})", str(self.root)) from None
        return self._splits[name]

    def tokenizer(self, side: str, lowercase: bool):
        from attnmt.data.vocab import load_tokenizer

        return load_tokenizer(self.root, side, lowercase)

    @property
    def lowercase(self) -> bool:
        return bool(self.manifest["settings"].get("lowercase"))


def open_prepared(path: str | os.PathLike) -> PreparedCorpus:
    root = Path(path)
    if not root.is_dir():
        raise UserError("no such prepared corpus (a folder made by attnmt data prepare)", str(root))
    try:
        with open(root / MANIFEST, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise UserError("is not a prepared corpus: no manifest.json (an interrupted preparation? "
                        "run attnmt data prepare again)", str(root)) from None
    except (OSError, ValueError) as err:
        raise UserError(f"manifest.json cannot be read ({err})", str(root)) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError("manifest.json is not an attnmt prepared corpus's", str(root))
    if manifest.get("version") != VERSION:
        raise UserError(f"prepared with format version {manifest.get('version')}; this attnmt "
                        f"reads version {VERSION}: prepare it again", str(root))
    return PreparedCorpus(root, manifest)
