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
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    assert {"train/loss", "train/ppl", "train/lr", "train/tok_s", "dev/ppl", "dev/bleu",
            "dev/seconds"} <= set(tags["scalars"])
    assert [e.step for e in events.Scalars("dev/ppl")] == [2, 4]
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
    assert "attention/0" in tags["images"]
    image = events.Images("attention/0")[-1]
    assert image.step == 4 and image.width > 100 and image.encoded_image_string[:4] == b"\x89PNG"


def test_without_tensorboard_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    with pytest.raises(UserError, match=r"pip install attnmt\[tensorboard\]") as err:
        summary_writer(tmp_path / "tb")
    assert "\n" not in str(err.value)
