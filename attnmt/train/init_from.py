"""Fine-tuning: a new run that starts from another run's weights (``attnmt train --init-from RUN[:CKPT]``).

    attnmt train configs/x.yaml --out runs/ft --init-from runs/base            # its BEST
    attnmt train configs/x.yaml --out runs/ft --init-from runs/base:step-4000  # or last, or 4000

The new run copies the source run's tokenizers (and labels) and starts from the weights that
checkpoint is used with (its EMA weights when it has them, runs/checkpoint.weights_path), with a
fresh optimizer, step 0 and its own schedule unless ``--init-optimizer`` also takes the
optimizer state (Adam's moments or nothing for SGD) from there. The configs must describe the same
model and vocabulary: a differing key is a one-line error naming it (``ARCHITECTURE_FREE`` lists
the model keys that may differ). Only safetensors and the weights-only trainer state are read,
nothing that could run code. With --resume a run that has a checkpoint continues from its own
checkpoint and --init-from is ignored.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import torch

from attnmt.config import Config, load_config
from attnmt.errors import UserError
from attnmt.runs.checkpoint import find_checkpoint, load_trainer_state, load_weights, weights_path
from attnmt.runs.loader import load_weights_into

ARCHITECTURE_FREE = {"dropout"}  # model keys a fine-tuning run may change (no shape or meaning)
# the data keys that decide the vocabularies and what the encoder reads
VOCABULARY_KEYS = ("tokenizer", "src_vocab_size", "tgt_vocab_size", "src_spm", "tgt_spm",
                   "reverse_source", "lowercase")
RUN_FILES = ("src.vocab", "src.spm.model", "src.spm.vocab", "tgt.vocab", "tgt.spm.model",
             "tgt.spm.vocab", "labels.txt")
_CHECKPOINT = re.compile(r"best|last|step-\d+|\d+")


def parse_spec(spec: str) -> tuple[Path, str]:
    """``RUN`` or ``RUN:CKPT`` (best, last, step-N or N) -> (run directory, checkpoint name)."""
    run, sep, which = spec.rpartition(":")
    if not sep or not _CHECKPOINT.fullmatch(which) or not run:
        run, which = spec, "best"
    if which.isdigit():
        which = f"step-{int(which):08d}"
    path = Path(run)
    if not (path / "config.yaml").is_file():
        raise UserError("--init-from: not a training run directory (no config.yaml)", run)
    return path, which


def source_config(run: Path) -> Config:
    return load_config(run / "config.yaml")


def check_compatible(cfg: Config, source: Config, run: Path) -> None:
    """The first key where ``cfg`` would build another model or vocabulary than ``source``."""
    if cfg.task != source.task:
        raise UserError(f"--init-from: task is {cfg.task!r} here, {source.task!r} in the run", str(run))
    # every key of the model's sections (model, and any per-family section beside it), the
    # vocabulary keys of data; train and ngram settings are the new run's own
    sections = [f.name for f in dataclasses.fields(cfg) if dataclasses.is_dataclass(getattr(cfg, f.name))
                and f.name not in ("data", "train", "ngram")]
    for section, keys in [*((name, None) for name in sections), ("data", VOCABULARY_KEYS)]:
        # (as saved: a Transformer variant's options are a section of model, in either config or both)
        mine, theirs = cfg.to_dict()[section], source.to_dict()[section]
        for key in keys or {**mine, **theirs}:
            if section != "data" and key in ARCHITECTURE_FREE:
                continue
            if mine.get(key) != theirs.get(key):
                raise UserError(f"--init-from: {section}.{key} is {mine.get(key)!r} here, {theirs.get(key)!r} in the "
                                "run (fine-tuning keeps the model and its vocabularies)", str(run))


def copy_vocabularies(source: Path, run_dir: Path) -> None:
    """The source run's tokenizer and label files into the new run directory."""
    for name in RUN_FILES:
        if (source / name).is_file():
            tmp = run_dir / f".{name}.tmp"
            shutil.copyfile(source / name, tmp)
            tmp.replace(run_dir / name)


def load_initial(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, source: Path,
                 which: str, same_optimizer: bool) -> str:
    """Load the weights of checkpoint ``which`` of ``source`` into ``model`` and, if ``optimizer``
    is given, its optimizer state (``same_optimizer``: train.optimizer agrees); returns the file
    the weights came from, for the log."""
    ckpt = find_checkpoint(source, which)
    path = weights_path(ckpt)
    load_weights_into(model, load_weights(path), str(path))
    if optimizer is not None:
        if not same_optimizer:
            raise UserError("--init-optimizer: train.optimizer differs from the run's (its state does "
                            "not fit)", str(source))
        state = load_trainer_state(ckpt)
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            raise UserError(f"--init-optimizer: the optimizer state does not fit ({type(err).__name__})",
                            str(ckpt / "trainer.pt")) from None
    return str(path)
