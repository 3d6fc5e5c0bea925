"""train.tensorboard: a run writes TensorBoard event files with the log's scalars and, at each
validation, attention heat maps of fixed dev sentences (LSTM and Transformer models); without
TensorBoard installed, a one-line error says how to install it."""

from __future__ import annotations

import signal
import sys

import pytest
import torch

from attnmt.errors import UserError
from attnmt.train.run import run_training
from attnmt.train.tensorboard import summary_writer

TRANSFORMER = ["model.type=transformer", "model.layers=1", "model.hidden=16", "model.heads=2", "model.ff=32"]


@pytest.mark.parametrize("model", [[], TRANSFORMER], ids=["lstm", "transformer"])
def test_a_run_writes_scalars_and_attention_images(tiny_corpus, tmp_path, model):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "tb"
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_training(str(tiny_corpus.config), str(run),
                     [*model, "train.max_steps=4", "train.valid_every=2", "train.log_every=1",
                      "train.tensorboard=true", "train.valid_metric=bleu", "train.valid_max_sentences=4"],
                     resume=False)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        torch.set_num_threads(threads)
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    runs = EventMultiplexer().AddRunsFromDirectory(str(run / "tensorboard")).Runs()
    assert list(runs) == ["tb"]  # named after the run's folder, not "."
    events = EventAccumulator(str(run / "tensorboard" / "tb"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    assert {"train/loss", "train/ppl", "train/lr", "train/tok_s", "dev/ppl", "dev/bleu",
            "dev/seconds"} <= set(tags["scalars"])
    assert [e.step for e in events.Scalars("dev/ppl")] == [2, 4]
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
    assert "attention/0" in tags["images"]
    image = events.Images("attention/0")[-1]
    assert image.step == 4 and 100 < image.width <= 800 and image.encoded_image_string[:4] == b"\x89PNG"


def test_attention_images_fit_a_card_with_legible_labels():
    """A long sentence pair (120 × 70 pieces: 5,500 px wide before) fits 800 × 800 px; its labels
    stay at 7 points, every k-th piece labelled; a short pair keeps every label."""
    import matplotlib.pyplot as plt

    from attnmt.decode.heatmap import heatmap_figure

    src, tgt = [f"s{i}" for i in range(120)], [f"t{i}" for i in range(70)]
    for rows, cols in ((70, 120), (8, 12)):
        fig = heatmap_figure(torch.rand(rows, cols), src[:cols], tgt[:rows], "title", max_px=800)
        width, height = fig.get_size_inches() * fig.dpi
        assert width <= 800 and height <= 800
        ax = fig.axes[0]
        xs, ys = ax.get_xticklabels(), ax.get_yticklabels()
        assert all(t.get_fontsize() >= 7 for t in xs + ys)
        shown = [t.get_text() for t in xs]
        step = int(shown[1][1:]) - int(shown[0][1:])  # every step-th piece, from the first
        assert shown == src[:cols:step]
        assert step == 1 if cols == 12 else step > 1 and len(shown) >= 20
        fig.canvas.draw()  # labels of neighbouring ticks do not overlap
        boxes = [t.get_window_extent() for t in ys]
        assert all(a.y0 >= b.y1 - 1 or b.y0 >= a.y1 - 1 for a, b in zip(boxes, boxes[1:]))
        plt.close(fig)


def test_without_tensorboard_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    with pytest.raises(UserError, match=r"pip install attnmt\[tensorboard\]") as err:
        summary_writer(tmp_path / "tb")
    assert "\n" not in str(err.value)
