"""TensorBoard event files of a run (``train.tensorboard: true`` or ``attnmt train --tensorboard``):
RUN/tensorboard/RUN-NAME/, for ``tensorboard --logdir RUN/tensorboard`` (the run listed by its name).

A mirror of log.jsonl, which stays the record a run is read from: every ``train`` record's loss,
ppl, lr and tok_s (``train/...``), every ``valid`` record's numbers (``dev/...``: ppl, loss, the
valid_metric score, the seconds it took), and at each validation the attention of the model on a
few fixed dev sentences (their first ``validation.EXAMPLES`` sources, translated greedily) as heat maps
(``attention/k``: decode/heatmap.py, the picture plot_heatmap saves, at most ``IMAGE_PX`` pixels
across and down with labels of 7 points, every k-th piece labelled where more would not fit), for
LSTM (Luong) and Transformer models alike.
Rank 0 writes; TensorBoard is an optional extra (``pip install attnmt[tensorboard]``).
"""

from __future__ import annotations

from pathlib import Path


from attnmt.errors import UserError

TRAIN_SCALARS = ("loss", "ppl", "lr", "tok_s")
DEV_SCALARS = ("loss", "ppl", "bleu", "chrf", "accuracy", "seconds")


def summary_writer(log_dir: Path):
    """torch's SummaryWriter on ``log_dir``, or a one-line error saying how to install it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # torch.utils.tensorboard imports the tensorboard package
        raise UserError("train.tensorboard needs TensorBoard: pip install attnmt[tensorboard]") from None
    return SummaryWriter(log_dir=str(log_dir))


IMAGE_PX = 800  # attention images at most this wide and high: TensorBoard shows them at their size


def log_dir(run_dir: Path) -> Path:
    """RUN/tensorboard/<RUN's folder name>: TensorBoard names a run by its folder below --logdir,
    so ``--logdir RUN/tensorboard`` lists it by the run's name (events written straight into
    the logdir show as "."), and ``--logdir runs`` lists RUN/tensorboard/RUN for each run."""
    return run_dir / "tensorboard" / Path(run_dir).resolve().name


class TensorBoard:
    """Scalars from log records, attention heat maps from validations."""

    def __init__(self, run_dir: Path):
        self.writer = summary_writer(log_dir(Path(run_dir)))

    def record(self, record: dict) -> None:
        """The numbers of one log.jsonl record (train or valid event; others are skipped)."""
        kinds = {"train": ("train", TRAIN_SCALARS), "valid": ("dev", DEV_SCALARS)}
        if record.get("event") not in kinds or not isinstance(record.get("step"), int):
            return
        prefix, names = kinds[record["event"]]
        for name in names:
            value = record.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(f"{prefix}/{name}", value, record["step"])
        self.writer.flush()

    def attention(self, step: int, translations: list) -> None:
        """Heat maps of ``translations`` (decode.translate.Translation with attention)."""
        from attnmt.decode.heatmap import heatmap_figure

        for k, t in enumerate(translations):
            if t.attention is None or t.attention.numel() == 0:
                continue  # a model without attention, or an empty output
            fig = heatmap_figure(t.attention, t.src_pieces, t.tgt_pieces, title=t.text[:80], max_px=IMAGE_PX)
            self.writer.add_figure(f"attention/{k}", fig, step)  # closes the figure
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
