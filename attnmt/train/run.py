"""Starting a training run: the run directory and its lock, a new run or ``--resume``, and what a
failed start leaves behind.

    attnmt train CONFIG.yaml --out RUN [--set section.key=value ...] [--resume] [--init-from RUN]

``run_training`` checks ``--out`` (a new or empty directory, or one that train wrote), reads the
config (the run's own on resume; a CONFIG given with ``--resume`` must agree with it), builds the
``Trainer`` (train/training.py) and trains. A start that fails removes what it wrote.
"""

from __future__ import annotations

import os
import shutil
from contextlib import nullcontext
from pathlib import Path

from attnmt.config import Config, load_config, save_config
from attnmt.errors import UserError
from attnmt.runs.lock import LOCK_NAME, RunLock
from attnmt.train.training import Trainer


def run_training(config_path: str | None, run_dir: str, overrides: list[str], resume: bool,
                 init_from: str | None = None, init_optimizer: bool = False) -> dict:
    """Train CONFIG into ``run_dir`` (or continue it: ``resume``). ``init_from``: RUN[:CKPT] whose
    weights and vocabularies a new run starts from (ignored once the run has a checkpoint).
    Rank 0 holds the run's lock (runs/lock.py) from before it reads or writes anything in the run
    until training ends, so a second ``train`` of the same run, started alongside or with
    --resume, fails at once."""
    run = Path(run_dir)
    if run.exists() and not run.is_dir():
        raise UserError("--out must be a run directory, not a file", run_dir)
    existed = run.exists()
    fresh = not existed or not any(run.iterdir())  # a failed start may remove what it wrote
    main = int(os.environ.get("RANK", "0")) == 0  # DDP: only rank 0 writes, only rank 0 locks
    lock = RunLock(run) if main else nullcontext()
    try:
        lock.__enter__()
    except BaseException:  # refused: another process trains this run; what it wrote is its own
        if main and not existed and run.is_dir() and not any(run.iterdir()):
            run.rmdir()
        raise
    try:
        try:
            trainer = _start(config_path, run, overrides, resume, init_from, init_optimizer)
        except BaseException:
            if main and fresh and run.is_dir():
                _clear(run, remove=not existed)
            raise
        return trainer.train()
    finally:
        lock.__exit__(None, None, None)


def _has_checkpoint(run: Path) -> bool:
    return (run / "checkpoints" / "LAST").exists()


# what train writes in a run directory: --out may hold these (a run that was started), nothing else
_RUN_NAMES = {"config.yaml", "log.jsonl", "labels.txt", "checkpoints", "tensorboard", "data", LOCK_NAME,
              *(f"{side}{ext}" for side in ("src", "tgt") for ext in (".vocab", ".spm.model", ".spm.vocab"))}


def _check_out(run: Path, config_path: str | None, resume: bool) -> None:
    """A new run must not overwrite what train did not write: the CONFIG it was given (the
    user's file, comments and all, as RUN/config.yaml) or any file of another kind in --out."""
    saved = run / "config.yaml"
    if config_path is not None and not resume and _same_file(config_path, saved):
        raise UserError(f"is the run's own config file, which train writes; copy it out of {run} "
                        "or give another --out", config_path)
    if resume or _has_checkpoint(run) or not run.is_dir():
        return
    for child in sorted(run.iterdir()):
        name = child.name
        if name in _RUN_NAMES or name.endswith(".tmp") or (name.startswith("ngram.train") and name.endswith(".bin")):
            continue
        raise UserError(f"--out holds {name}, which train did not write; give a new or empty run "
                        "directory", str(run))


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _start(config_path: str | None, run: Path, overrides: list[str], resume: bool,
           init_from: str | None, init_optimizer: bool) -> Trainer:
    """The trainer of the run, its config written (the run's lock held)."""
    run_dir = str(run)
    saved = run / "config.yaml"
    has_ckpt = _has_checkpoint(run)
    if has_ckpt and not resume:
        raise UserError("run directory already has checkpoints; pass --resume or use a new --out", run_dir)
    _check_out(run, config_path, resume)
    if resume and (has_ckpt or config_path is None):
        # without a checkpoint (killed before the first) the run starts again from its config
        if not saved.is_file():
            raise UserError("nothing to resume (no checkpoint, no config.yaml); give a CONFIG", run_dir)
        cfg = load_config(saved, overrides)
        if config_path is not None:  # resuming reads the run's config: CONFIG must not say otherwise
            _check_same_config(load_config(config_path, overrides), cfg, config_path, saved)
    elif config_path is None:
        raise UserError("a CONFIG file is needed to start a new run")
    else:
        cfg = load_config(config_path, overrides)
    trainer = Trainer(cfg, run, resume=resume, init_from=init_from, init_optimizer=init_optimizer)
    if trainer.dist.main and (not has_ckpt or overrides):
        save_config(cfg, saved)  # once training starts; on resume e.g. a longer budget
    return trainer


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _check_same_config(given: Config, kept: Config, given_path: str, kept_path: Path) -> None:
    """A CONFIG given with --resume must be the run's (both with the same --set): a changed file
    was silently ignored, the run continuing with its old settings and exiting 0."""
    a, b = _flat(given.to_dict()), _flat(kept.to_dict())
    diff = [k for k in a if a[k] != b.get(k)]
    if diff:
        more = f" (and {len(diff) - 1} more)" if len(diff) > 1 else ""
        raise UserError(f"differs from {kept_path}: {diff[0]} is {a[diff[0]]!r} here, {b.get(diff[0])!r} "
                        f"in the run{more}; --resume continues the run's own config: leave CONFIG out, "
                        "or change a setting with --set", given_path)


def _clear(run: Path, remove: bool) -> None:
    """Undo a failed start: the run directory this call created, or the contents it gave an
    empty one (tokenizers, an estimated n-gram model)."""
    if remove:
        shutil.rmtree(run, ignore_errors=True)
        return
    for child in run.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
