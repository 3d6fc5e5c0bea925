"""The paper's figures as PNG files (matplotlib, Agg backend: no display needed).

* ``plot_curves``   learning curves from training logs (Luong et al. 2015, Figure 5): perplexity
                    against updates, dev (solid, markers) and training (thin) per run.
* ``plot_lengths``  BLEU by source-length bucket, one line per system (Figure 6).
* ``plot_heatmap``  an attention matrix, target pieces down, source pieces across (Figure 7).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported: no display on servers
import matplotlib.pyplot as plt
import torch

from attnmt.errors import UserError


def read_log(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """(step, perplexity) points of a run's log.jsonl: {"train": [...], "valid": [...]}."""
    from attnmt.data.corpus import read_lines

    if not Path(run_dir).is_dir():
        raise UserError("not a run directory", str(run_dir))
    path = Path(run_dir) / "log.jsonl"
    if not path.exists() and not path.is_symlink():  # a link to nothing: read_lines says so
        raise UserError("no training log (log.jsonl) in this run directory", str(run_dir))
    curves: dict[str, list[tuple[int, float]]] = {"train": [], "valid": []}
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, RecursionError):  # RecursionError: "[[[[..." nested too deep
            raise UserError("not a JSON record (a truncated or garbled line?)", str(path), number) from None
        if not isinstance(rec, dict):
            raise UserError("not a JSON object", str(path), number)
        if rec.get("event") == "resume" and isinstance(rec.get("step"), int):
            # a run killed after its last checkpoint logged steps it then trained again: keep the
            # points of the trajectory the run continued from, not both (the curve went back)
            for kind in curves:
                curves[kind] = [p for p in curves[kind] if p[0] <= rec["step"]]
        if rec.get("event") in curves and "step" in rec and "ppl" in rec:
            try:
                point = (int(rec["step"]), float(rec["ppl"]))
            except (TypeError, ValueError, OverflowError):  # OverflowError: "step": Infinity
                raise UserError("step and ppl must be numbers", str(path), number) from None
            if point[1] == point[1]:  # a NaN perplexity has no place on a log scale
                curves[rec["event"]].append(point)
    return curves


def plot_curves(runs: dict[str, str | Path], out: str | Path, csv_out: str | Path | None = None) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = []
    for k, (label, run) in enumerate(runs.items()):
        curves = read_log(run)
        color = f"C{k % 10}"
        if curves["train"]:
            s, p = zip(*curves["train"])
            ax.plot(s, p, color=color, alpha=0.35, linewidth=1)
        if curves["valid"]:
            s, p = zip(*curves["valid"])
            ax.plot(s, p, color=color, marker="o", markersize=3, label=f"{label} (dev)")
        elif curves["train"]:
            ax.plot([], [], color=color, label=f"{label} (train)")
        rows += [(label, kind, step, ppl) for kind in ("train", "valid") for step, ppl in curves[kind]]
    if not rows:
        raise UserError("the training logs hold no train/valid records to plot")
    ax.set_yscale("log")
    ax.set_xlabel("updates")
    ax.set_ylabel("perplexity (log scale)")
    ax.set_title("Learning curves (dev solid, training faint)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    from attnmt.data.corpus import output_group, write_lines

    with output_group():  # the figure and its CSV: both or, on a failure, neither
        _save(fig, out)
        if csv_out:
            write_lines(csv_out, ["run,kind,step,ppl"] + [f"{a},{b},{c},{d:.4f}" for a, b, c, d in rows])


def plot_lengths(rows: list[dict], systems: list[str], out: str | Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = [r["bucket"] for r in rows]
    for k, name in enumerate(systems):
        ys = [math.nan if r[name] is None else r[name] for r in rows]  # empty buckets: gaps
        ax.plot(range(len(rows)), ys, marker="o", color=f"C{k % 10}", label=name)
    ax.set_xticks(range(len(rows)), [f"{lab}\n(n={r['sentences']})" for lab, r in zip(labels, rows)], fontsize=8)
    ax.set_xlabel("source sentence length (words)")
    ax.set_ylabel("BLEU")
    ax.set_title("BLEU by sentence length")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, out)


def plot_heatmap(attention: torch.Tensor, src_labels: list[str], tgt_labels: list[str], out: str | Path,
                 title: str = "") -> None:
    """attention: (len(tgt_labels), len(src_labels)); the figure is decode/heatmap.py's."""
    from attnmt.decode.heatmap import heatmap_figure

    _save(heatmap_figure(attention, src_labels, tgt_labels, title), out)


def _save(fig, out: str | Path) -> None:
    from attnmt.data.corpus import atomic_path

    out = Path(out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    try:
        with atomic_path(out) as tmp:
            fig.savefig(tmp, dpi=120, format=out.suffix[1:] or "png")
    except ValueError as err:  # matplotlib: an unknown file type
        raise UserError(f"cannot write this figure ({err})", str(out)) from None
    finally:
        plt.close(fig)


