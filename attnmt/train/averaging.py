"""Checkpoint averaging: the element-wise mean of a run's last N checkpoints as a new run.

    θ̄ = (1/N) Σ_{k=1..N} θ_k        (floating-point tensors; others are taken from the newest)

The result is a complete run directory (config, tokenizers, one checkpoint marked LAST and BEST)
that ``translate``, ``score`` and ``align`` load like any other run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from attnmt.errors import UserError
from attnmt.runs.checkpoint import list_checkpoints, load_weights, save_checkpoint
from attnmt.runs.loader import check_vocabulary_sizes, load_weights_into, model_for, read_run

_RUN_FILES = ("config.yaml", "src.vocab", "tgt.vocab", "src.spm.model", "tgt.spm.model",
              "src.spm.vocab", "tgt.spm.vocab", "labels.txt")


def average_state_dicts(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Mean of the floating-point tensors (accumulated in float64), the rest from the last dict."""
    keys = set(states[0])
    for s in states[1:]:
        if set(s) != keys:
            raise UserError("checkpoints hold different parameter names; cannot average them")
    out = {}
    for k, last in states[-1].items():
        if last.is_floating_point():
            total = sum(s[k].double() for s in states)
            out[k] = (total / len(states)).to(last.dtype)
        else:
            out[k] = last.clone()
    return out


def average_checkpoints(run_dir: str | os.PathLike, last: int, out_dir: str | os.PathLike) -> Path:
    """Average the ``last`` newest checkpoints of ``run_dir`` into the new run ``out_dir``."""
    run, out = Path(run_dir), Path(out_dir)
    cfg, src_tok, tgt = read_run(run)  # the run's config and tokenizers first: is it a run at all?
    model = model_for(cfg, src_tok, tgt)
    if out.exists() and not out.is_dir():
        raise UserError("--out must be a new run directory, not a file", str(out))
    ckpts = list_checkpoints(run)
    if not ckpts:
        raise UserError("no checkpoints found (is this a training run directory?)", str(run))
    if last < 1 or last > len(ckpts):
        raise UserError(f"--last must be between 1 and {len(ckpts)} (the checkpoints kept), got {last}", str(run))
    if (out / "checkpoints").exists():
        raise UserError("output directory already holds checkpoints; choose a new --out", str(out))
    if out.resolve() == run.resolve():
        raise UserError("--out must differ from --model", str(out))
    inside = next((a for a in (out.resolve(), *out.resolve().parents)
                   if a.name == "checkpoints" and (a.parent / "config.yaml").is_file()), None)
    if inside is not None:  # its pruning and LAST/BEST would be the run's
        raise UserError(f"--out lies inside the checkpoints of the run {inside.parent}; give a new run "
                        "directory outside it", str(out))
    if out.is_dir() and any(out.iterdir()):  # its config.yaml, vocabularies, log would be replaced
        raise UserError("--out must be a new or empty directory (it gets a whole run)", str(out))
    chosen = ckpts[-last:]
    avg = average_state_dicts([load_weights(c / "model.safetensors") for c in chosen])
    check_vocabulary_sizes(model, avg, run, src_tok, tgt)
    load_weights_into(model, avg, str(run))
    # built under a temporary name next to --out and renamed into place when complete: a failure
    # (a full disk, a kill) leaves no half-written run
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        for name in _RUN_FILES:
            if (run / name).exists():
                shutil.copyfile(run / name, tmp / name)
        step = int(chosen[-1].name.split("-")[1])
        save_checkpoint(tmp, step, model, None, best=True)
        with open(tmp / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": "average", "from": str(run),
                                "checkpoints": [c.name for c in chosen]}) + "\n")
        os.replace(tmp, out)  # a directory may replace an empty one (checked above)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
