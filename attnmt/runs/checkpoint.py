"""Checkpoints: crash-safe directories of safetensors weights plus training state.

Layout of a run directory::

    RUN/config.yaml  RUN/src.vocab|src.spm.model  RUN/tgt.vocab|tgt.spm.model  RUN/log.jsonl
    RUN/checkpoints/step-00001200/model.safetensors   weights (what translate/serve load)
    RUN/checkpoints/step-00001200/trainer.pt          optimizer, scheduler, RNG, progress
    RUN/checkpoints/step-00001200/ema.safetensors     train.ema: the averaged weights (what
                                                      translate/serve load when present)
    RUN/checkpoints/LAST, RUN/checkpoints/BEST         one line: the directory name

A checkpoint directory is written under a temporary name and renamed into place, and the pointer
files are replaced atomically, so a kill at any moment leaves either the old or the new checkpoint,
never a truncated one. The newest ``keep`` checkpoints (and BEST) are kept.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from safetensors.torch import load_file, save_file

from attnmt.errors import UserError
from attnmt.files import POINTER_BYTES, check_regular, read_small_bytes


def _write_pointer(path: Path, name: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


_STEP = re.compile(r"step-\d+")  # the only names a pointer or --checkpoint may give


def _pointer_name(path: Path) -> str:
    """The checkpoint name a pointer file holds ('' if it holds none: junk, a folder, ..)."""
    try:
        name = read_small_bytes(path, POINTER_BYTES, "checkpoint pointer").decode("utf-8", "replace").strip()
    except UserError:
        return ""
    return name if _STEP.fullmatch(name) else ""


def _read_pointer(path: Path) -> str | None:
    """The step a pointer names if it is a good one, else None (what saving and pruning need:
    they never fail on a damaged pointer, they replace it)."""
    if not path.exists():
        return None
    name = _pointer_name(path)
    return name if name and (path.parent / name).is_dir() else None


def _moved_aside(pointer: Path) -> Path | None:
    """The complete copy save_checkpoint moved aside while re-saving the step ``pointer`` names,
    if a kill interrupted it between its two renames."""
    if not pointer.exists():
        return None
    name = _pointer_name(pointer)
    for aside in sorted(pointer.parent.glob(f".{name}.old-*")) if name else []:
        if (aside / "model.safetensors").is_file():
            return aside
    return None


def step_inside(root: Path, name: str, where: str) -> Path:
    """``root/name`` if it is a checkpoint directory of this run: a step-N name, a real directory
    (not a symbolic link) whose resolved path lies in ``root``; else a one-line error naming
    ``where`` (the pointer file or the run)."""
    if not _STEP.fullmatch(name):
        raise UserError(f"holds {name[:40]!r}, not the name of a checkpoint (step-NNNNNNNN): no checkpoint "
                        "to load", where)
    path = root / name
    if path.is_symlink():
        raise UserError(f"names {name}, a symbolic link: no checkpoint inside the run (refused)", where)
    if not path.is_dir():
        raise UserError(f"names {name}, but there is no checkpoint {root / name}", where)
    resolved = path.resolve()
    if resolved.parent != root.resolve() or not resolved.is_relative_to(root.parent.resolve()):
        raise UserError(f"names {name}, which lies outside the run's checkpoints/ (refused)", where)
    return path


def _pointed(root: Path, which: str) -> Path | None:
    """The checkpoint the pointer ``which`` (LAST or BEST) names; None when there is no pointer
    file. A pointer that is not a small regular file naming a step of this run is an error, never
    a silent fallback to another checkpoint (a kill inside a re-save excepted: _moved_aside)."""
    pointer = root / which
    if not pointer.exists() and not pointer.is_symlink():
        return None
    where = str(pointer)
    name = read_small_bytes(pointer, POINTER_BYTES, "checkpoint pointer").decode("utf-8", "replace").strip()
    if _STEP.fullmatch(name) and not (root / name).exists():
        aside = _moved_aside(pointer)
        if aside is not None:
            return aside
    return step_inside(root, name, where)


def state_dict_for_saving(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Weights as contiguous CPU tensors; shared tensors are saved once per name."""
    model = getattr(model, "module", model)  # unwrap DDP
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    model: torch.nn.Module,
    trainer_state: dict[str, Any] | None,
    best: bool = False,
    keep: int = 5,
    extra_weights: dict[str, dict[str, torch.Tensor]] | None = None,
) -> Path:
    """Write checkpoint ``step``: the model's weights, the trainer state and ``extra_weights``
    (file name -> state dict, e.g. EMA_FILE), atomically; LAST (and with ``best`` BEST) name it."""
    ckpt_root = Path(run_dir) / "checkpoints"
    ckpt_root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:08d}"
    final = ckpt_root / name
    tmp = ckpt_root / f".{name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        save_file(state_dict_for_saving(model), str(tmp / "model.safetensors"))
        for file_name, weights in (extra_weights or {}).items():
            save_file(weights, str(tmp / file_name))
        if trainer_state is not None:
            torch.save(trainer_state, tmp / "trainer.pt")
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    except Exception as err:  # safetensors and torch.save report a full disk in their own types
        shutil.rmtree(tmp, ignore_errors=True)
        why = write_failure(err, ckpt_root)
        if why is None:
            raise
        raise UserError(f"checkpoint {name} cannot be written ({why}); LAST is still the one "
                        "before it (--resume continues from there once there is room)", str(ckpt_root)) from None
    if final.exists():
        # Re-saving a step (e.g. the final checkpoint right after an epoch-end one): move the old
        # directory aside with one atomic rename instead of deleting it in place, so a kill never
        # leaves LAST naming a half-deleted directory; find_checkpoint falls back to the moved-aside
        # copy if the kill lands between the two renames.
        aside = ckpt_root / f".{name}.old-{os.getpid()}"
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(final, aside)
        os.replace(tmp, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _write_pointer(ckpt_root / "LAST", name)
    if best:
        _write_pointer(ckpt_root / "BEST", name)
    _prune(ckpt_root, keep)
    return final


def write_failure(err: BaseException, where: Path) -> str | None:
    """Why writing under ``where`` failed, if the disk is the reason (full, read-only, no
    permission): the reason in words; None for any other error."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES,
                                                  errno.EFBIG, errno.EIO):
        return err.strerror or str(err)
    text = str(err)
    if "No space left" in text or "StorageFull" in text or "code: 28" in text:
        return "No space left on device"
    try:
        if shutil.disk_usage(where).free < 1 << 20:
            return "No space left on device"
    except OSError:
        pass
    return None


def _prune(ckpt_root: Path, keep: int) -> None:
    protected = {_read_pointer(ckpt_root / "LAST"), _read_pointer(ckpt_root / "BEST")}
    steps = sorted(p for p in ckpt_root.iterdir() if p.is_dir() and p.name.startswith("step-"))
    for old in steps[:-keep] if keep > 0 else []:
        if old.name not in protected:
            shutil.rmtree(old, ignore_errors=True)
    for pattern in (".step-*.tmp-*", ".step-*.old-*"):  # left by a killed writer
        for stale in ckpt_root.glob(pattern):
            if stale.is_dir() and not stale.name.endswith(f"-{os.getpid()}"):
                shutil.rmtree(stale, ignore_errors=True)


def run_files(run_dir: str | os.PathLike | None) -> list[Path]:
    """The files of a run directory that commands read (config, tokenizers, labels, log, every
    checkpoint file): an output given as one of them is refused (``check_output``'s inputs), as
    ``translate -o RUN/config.yaml`` would replace the run's config with translations."""
    if run_dir is None or not Path(run_dir).is_dir():
        return []
    from attnmt.ngram.residual import TRAIN_FILE  # the n-gram model a run estimated itself

    run = Path(run_dir)
    own = [run / n for n in ("config.yaml", "labels.txt", "log.jsonl", TRAIN_FILE)]
    own += [run / f"{side}{ext}" for side in ("src", "tgt") for ext in (".vocab", ".spm.model", ".spm.vocab")]
    found = [p for p in own if p.is_file()]
    if (run / "checkpoints").is_dir():
        found += [p for p in (run / "checkpoints").rglob("*") if p.is_file()]
    return found


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-"))


def find_checkpoint(run_dir: str | os.PathLike, which: str = "best") -> Path:
    """The checkpoint directory ``which`` ("best", "last" or a step directory name). "best" is
    LAST's checkpoint when the run has no BEST pointer (a run without a dev set); a pointer that
    exists but does not name a checkpoint of this run is an error."""
    root = Path(run_dir) / "checkpoints"
    if which in ("best", "last"):
        found = _pointed(root, which.upper())
        if found is None and which == "best":
            found = _pointed(root, "LAST")
        if found is None:
            raise UserError("no checkpoint found (is this a training run directory?)", str(run_dir))
        return found
    if not _STEP.fullmatch(which):
        raise UserError(f"--checkpoint must be best, last or step-NNNNNNNN, not {which!r}", str(run_dir))
    if not (root / which).is_dir() and not (root / which).is_symlink():
        raise UserError(f"no checkpoint {which!r}", str(run_dir))
    return step_inside(root, which, str(run_dir))


EMA_FILE = "ema.safetensors"  # train.ema's averaged weights, beside model.safetensors


def weights_path(ckpt_dir: Path, raw: bool = False) -> Path:
    """The weights a checkpoint is used with: the EMA weights when it has them (train.ema), the
    raw ``model.safetensors`` otherwise or when ``raw`` (translate --raw-weights)."""
    ema = ckpt_dir / EMA_FILE
    present = ema.exists() or ema.is_symlink()  # a FIFO or link there is refused by load_weights
    return ema if not raw and present else ckpt_dir / "model.safetensors"


def load_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    path = check_regular(path, "model weights file")  # safetensors would wait on a FIFO
    try:
        return load_file(path)
    except FileNotFoundError:
        raise UserError("model weights not found", path) from None
    except Exception as err:  # safetensors raises its own error types on corrupt files
        raise UserError(f"not a valid safetensors file ({str(err).splitlines()[0]})", path) from None


# what save_checkpoint's trainer state holds (training.Trainer._trainer_state), with its types
TRAINER_STATE = {"optimizer": dict, "step": int, "epoch": int, "batch_in_epoch": int,
                 "elapsed": (int, float), "best_ppl": (int, float), "rng": torch.Tensor}


def load_trainer_state(ckpt_dir: Path) -> dict[str, Any]:
    """The optimizer, progress and RNG state of a checkpoint. Read with ``weights_only=True``:
    tensors, numbers, strings and containers only, so a crafted ``trainer.pt`` cannot run code
    (a plain pickle would execute whatever its ``__reduce__`` names)."""
    path = ckpt_dir / "trainer.pt"
    if path.exists():
        check_regular(path, "trainer state file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError("checkpoint has no trainer state (cannot resume)", str(path)) from None
    except Exception as err:  # torch.load raises many types on corrupt or foreign files
        reason = str(err).strip().splitlines()[0][:120] if str(err).strip() else ""
        raise UserError(f"not a trainer state attnmt wrote ({type(err).__name__}"
                        f"{': ' + reason if reason else ''})", str(path)) from None
    if not isinstance(state, dict):
        raise UserError(f"not a trainer state attnmt wrote (a {type(state).__name__})", str(path))
    return state


def check_trainer_state(state: dict, path: Path) -> dict:
    """``state`` if it holds what resuming reads (``TRAINER_STATE``), else a one-line error."""
    for key, typ in TRAINER_STATE.items():
        if key not in state:
            raise UserError(f"trainer state lacks {key!r} (cannot resume)", str(path))
        if not isinstance(state[key], typ) or isinstance(state[key], bool):
            raise UserError(f"trainer state {key!r} has the wrong type "
                            f"({type(state[key]).__name__})", str(path))
    return state
