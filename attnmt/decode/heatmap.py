"""The picture of an attention matrix (Luong et al. 2015, Figure 7): target pieces down, source
pieces across, darker = more attention. ``eval/plots.plot_heatmap`` saves it as a PNG; the
trainer's TensorBoard log shows it at each validation (train/tensorboard.py). It lives here, below
both, because train may not import eval (eval/experiment imports train)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported: no display on servers
import matplotlib.pyplot as plt
import torch


def heatmap_figure(attention: torch.Tensor, src_labels: list[str], tgt_labels: list[str], title: str = ""):
    """A matplotlib figure of ``attention`` (len(tgt_labels), len(src_labels)); the caller saves
    and closes it."""
    a = attention.detach().float().cpu().numpy()
    h, w = a.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * w + 2), max(3.0, 0.4 * h + 1.5)))
    ax.imshow(a, cmap="Greys", vmin=0.0, vmax=max(float(a.max()), 1e-9), aspect="auto")
    ax.set_xticks(range(w), src_labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(h), tgt_labels, fontsize=8)
    ax.xaxis.tick_top()
    plt.setp(ax.get_xticklabels(), ha="left")
    if title:
        ax.set_xlabel(title, fontsize=8)
    fig.tight_layout()
    return fig
