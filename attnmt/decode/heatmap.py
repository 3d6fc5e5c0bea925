"""The picture of an attention matrix (Luong et al. 2015, Figure 7): target pieces down, source
pieces across, darker = more attention. ``eval/plots.plot_heatmap`` saves it as a PNG; the
trainer's TensorBoard log shows it at each validation (train/tensorboard.py). It lives here, below
both, because train may not import eval (eval/experiment imports train)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported: no display on servers
import matplotlib.pyplot as plt
import torch


DPI = 100
LABEL_PT = 7  # the smallest label size kept legible in TensorBoard's cards
LABEL_PX = 12  # room one label needs across its axis at LABEL_PT and DPI (its line and a gap)


def heatmap_figure(attention: torch.Tensor, src_labels: list[str], tgt_labels: list[str], title: str = "",
                   max_px: int | None = None):
    """A matplotlib figure of ``attention`` (len(tgt_labels), len(src_labels)); the caller saves
    and closes it. ``max_px``: the most pixels it may take across and down (TensorBoard shows
    images at their size: 800 keeps one readable in a card); where an axis has more pieces than
    labels of ``LABEL_PT`` points fit, every k-th piece is labelled (the cells stay)."""
    a = attention.detach().float().cpu().numpy()
    h, w = a.shape
    width, height = max(4.0, 0.45 * w + 2), max(3.0, 0.4 * h + 1.5)
    if max_px is not None:
        width, height = min(width, max_px / DPI), min(height, max_px / DPI)
    fig, ax = plt.subplots(figsize=(width, height), dpi=DPI)
    ax.imshow(a, cmap="Greys", vmin=0.0, vmax=max(float(a.max()), 1e-9), aspect="auto")
    font = 8 if max_px is None else LABEL_PT
    # the axes take about 60% of the figure across and 70% down once the labels have their room
    x_step = _label_step(w, 0.6 * width * DPI) if max_px is not None else 1
    y_step = _label_step(h, 0.7 * height * DPI) if max_px is not None else 1
    ax.set_xticks(range(0, w, x_step), src_labels[::x_step], rotation=60, ha="right", fontsize=font)
    ax.set_yticks(range(0, h, y_step), tgt_labels[::y_step], fontsize=font)
    ax.xaxis.tick_top()
    plt.setp(ax.get_xticklabels(), ha="left")
    if title:
        ax.set_xlabel(title, fontsize=8)
    fig.tight_layout()
    return fig


def _label_step(count: int, pixels: float) -> int:
    """Label every k-th of ``count`` pieces so that the labels fit ``pixels`` at ``LABEL_PX`` each."""
    room = max(1, int(pixels // LABEL_PX))
    return max(1, math.ceil(count / room))
