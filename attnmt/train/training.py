"""The training loop: updates, validation, checkpoints, the budget, signals.

    attnmt train CONFIG.yaml --out RUN [--set section.key=value ...] [--resume]
    torchrun --nproc-per-node N -m attnmt train CONFIG.yaml --out RUN      # data parallel

The parts it receives are built by train/setup.py (process group, data, model, head, optimizer,
EMA, TensorBoard); one update is train/update.py's; where the run stands (and ``--resume``) is
train/state.py's. Every ``valid_every`` steps (default: each epoch) the dev perplexity (and, by
train.valid_metric, BLEU or chrF: train/validation.py) is computed, said on the console and a
checkpoint written; the best one by that metric is marked BEST, and ``train.patience``
validations without a better one stop the run. Only rank 0 writes files. SIGINT/SIGTERM finish
the current update, write a checkpoint and exit cleanly; SIGKILL loses at most the work since the
last checkpoint, and ``--resume`` continues from it with the same batches and RNG state.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Any

from attnmt.config import Config
from attnmt.data.batching import Batch, Batches
from attnmt.errors import UserError
from attnmt.jsonio import dumps
from attnmt.kernels import dispatch
from attnmt.models.common import token_loss  # noqa: F401  (attnmt.train.training.token_loss)
from attnmt.runs.checkpoint import EMA_FILE, save_checkpoint
from attnmt.train.allocator import release_freed_memory
from attnmt.train.optim import learning_rate
from attnmt.train.progress import Bar, spent
from attnmt.train.setup import set_up
from attnmt.train.state import RunState, resume as resume_state
from attnmt.train.update import Updater
from attnmt.train.validation import console_line, evaluate_dev, perplexity  # noqa: F401


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool = False, init_from: str | None = None,
                 init_optimizer: bool = False):
        self.cfg, self.run_dir = cfg, run_dir
        parts = set_up(cfg, run_dir, resume, init_from, init_optimizer, step=lambda: self.state.step)
        self.dist, self.device, self.data, self.model = parts.dist, parts.device, parts.data, parts.model
        self.optimizer, self.ema, self.tensorboard = parts.optimizer, parts.ema, parts.tensorboard
        self.state = RunState.fresh(cfg.train.valid_metric)
        self.pending = [parts.init_note] if parts.init_note else []  # logged when training starts
        if parts.resuming:
            self.state, self.ema, name = resume_state(run_dir, cfg.train, self.model, self.optimizer, self.ema)
            self.log({"event": "resume", "checkpoint": name, "step": self.state.step})
        self.updater = Updater(cfg.train, getattr(cfg.model, "hidden", 0), self.model, self.optimizer, self.ema,
                               self.dist, self.device)
        self.steps_per_epoch = 1  # set when training starts
        self.stop_requested = False

    @property
    def step(self) -> int:
        return self.state.step

    @step.setter
    def step(self, value: int) -> None:
        self.state.step = value

    # -- files ---------------------------------------------------------------------------------
    def checkpoint(self, best: bool = False) -> None:
        if self.dist.main:
            extra = {EMA_FILE: self.ema.weights()} if self.ema is not None else None
            save_checkpoint(self.run_dir, self.state.step, self.model, self.state.to_dict(self.optimizer),
                            best, extra_weights=extra)

    def log(self, record: dict) -> None:
        if not self.dist.main:
            return
        record = {"time": round(time.time(), 3), **record}
        try:
            with open(self.run_dir / "log.jsonl", "a", encoding="utf-8") as f:
                f.write(dumps(record) + "\n")  # valid JSON: an infinite best_ppl is null
        except OSError as err:
            raise UserError(f"cannot be written ({err.strerror or err})", str(self.run_dir / "log.jsonl")) from None
        if self.tensorboard is not None:  # a mirror of the log's numbers
            self.tensorboard.record(record)

    def say(self, line: str) -> None:
        """One line on the console (rank 0)."""
        if self.dist.main:
            print(f"attnmt: {line}", file=sys.stderr)

    # -- validation ----------------------------------------------------------------------------
    def validate(self) -> dict | None:
        """Dev ppl (and train.valid_metric's score) of the weights, their EMA when train.ema is
        on; BEST follows the metric; logged, said on the console and checkpointed."""
        if not self.data.dev_tgt:
            return None
        s, t = self.state, self.cfg.train
        start = time.perf_counter()
        release_freed_memory()  # the dev batches' shapes would add to the blocks kept for updates
        with self.ema.applied() if self.ema is not None else nullcontext():
            result = evaluate_dev(self.model, self.cfg, self.data, self.device, self.updater.autocast,
                                  self.tensorboard, s.step)
        release_freed_memory()
        result["seconds"] = round(time.perf_counter() - start, 3)
        best = s.tracker.observe(result[t.valid_metric])
        if best:
            s.best_ppl, s.best_step = result["ppl"], s.step
        s.validated = (s.step, result)
        self.log({"event": "valid", "step": s.step, "epoch": s.epoch, **result, "metric": t.valid_metric,
                  "best": best, "since_best": s.tracker.since_best, "ema": self.ema is not None})
        self.say(console_line(s.step, s.epoch, result, s.tracker, t.patience, s.best_step))
        self.checkpoint(best=best)
        return result

    # -- training ------------------------------------------------------------------------------
    def _epoch_batches(self) -> Batches:
        """This rank's batches of the epoch (every rank takes the same number)."""
        batches = self.data.train.batches(self.state.epoch)
        return batches.take(self.dist.rank, self.dist.world) if self.dist.world > 1 else batches

    def train_step(self, batches: list[Batch]) -> tuple[float, int]:
        """One update from ``batches`` (gradient accumulation); returns summed loss and tokens."""
        s = self.state
        lr = learning_rate(self.cfg.train, s.epoch, s.step + 1, self._progress())
        out = self.updater.update(batches, lr, s.step + 1)
        s.step += 1
        return out

    def _progress(self) -> float:
        return spent(self.cfg.train, self.state.step, self.state.elapsed, self.steps_per_epoch)

    def _out_of_budget(self) -> bool:
        t, s = self.cfg.train, self.state
        return bool((t.max_steps and s.step >= t.max_steps) or (t.max_time and s.elapsed >= t.max_time))

    def close(self) -> None:
        """Stop the row processes, if any, and close TensorBoard's files (train() does this)."""
        self.updater.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None

    def train(self) -> dict:
        self.updater.start_row_processes()  # before any thread starts: a fork copies only this one
        try:
            return self._finish(self._train())
        finally:
            self.close()

    def _start(self) -> None:
        """What the run says before its first update: data notes, --init-from, the model, the
        kernel chosen for each part (kernels/dispatch.py; a fallback is said once)."""
        for note in self.data.notes:
            self.log({"event": "data", "note": note})
            self.say(f"data: {note}")
        for record in self.pending:
            self.log(record)
        self.pending = []
        self.log({"event": "start", "params": sum(p.numel() for p in self.model.parameters()),
                  "device": str(self.device), "world": self.dist.world, "precision": self.updater.precision})
        paths = dispatch.paths(self.model, self.device.type)
        self.log({"event": "paths", "paths": paths})
        for line in dispatch.fallbacks(paths):
            self.say(line)

    def _train(self) -> str:
        """The updates, until what ends the run: "epochs", "budget", "patience" or "signal"."""
        t, s = self.cfg.train, self.state
        for sig in (signal.SIGINT, signal.SIGTERM):
            with suppress(ValueError):  # not the main thread (e.g. inside a test runner thread)
                signal.signal(sig, stop_handler(self))
        self._start()
        self.steps_per_epoch = len(self._epoch_batches()) // max(t.accumulate, 1)
        bar = Bar(self._progress(), self.dist.main)
        window = [0.0, 0, 0.0]  # loss, tokens, seconds since the last log record
        try:  # the bar is closed before anything else is said (an error, the final validation)
            while s.epoch <= t.epochs:
                batches = self._epoch_batches()
                groups = range(0, len(batches), t.accumulate)
                while s.batch_in_epoch < len(groups):
                    patience = s.tracker.patience_spent(t.patience)
                    if self.dist.agree(self.stop_requested or self._out_of_budget() or patience, self.device):
                        return "signal" if self.stop_requested else ("patience" if patience else "budget")
                    first = groups[s.batch_in_epoch]
                    step_batches = [self.data.train.collate(batches[k], s.epoch, k)
                                    for k in range(first, min(first + t.accumulate, len(batches)))]
                    start = time.perf_counter()
                    loss, tokens = self.train_step(step_batches)
                    took = time.perf_counter() - start
                    s.elapsed += took
                    s.batch_in_epoch += 1
                    s.tokens += tokens * self.dist.world
                    window = [window[0] + loss, window[1] + tokens, window[2] + took]
                    bar.advance(self._progress())
                    if s.step % t.log_every == 0 or s.step == 1:
                        self._report(bar, *window)
                        window = [0.0, 0, 0.0]
                    if t.valid_every and s.step % t.valid_every == 0:
                        self.validate()
                    elif t.save_every and s.step % t.save_every == 0:
                        self.checkpoint()
                s.epoch += 1
                s.batch_in_epoch = 0
                if not t.valid_every:
                    self.validate() if self.data.dev_tgt else self.checkpoint()
            return "epochs"
        finally:
            bar.close()

    def _report(self, bar: Bar, loss: float, tokens: int, seconds: float) -> None:
        s = self.state
        avg = loss / max(tokens, 1)
        tok_s = tokens * self.dist.world / max(seconds, 1e-9)
        lr = self.optimizer.param_groups[0]["lr"]
        bar.show(step=str(s.step), loss=f"{avg:.3f}", ppl=f"{math.exp(min(avg, 50)):.1f}", tok_s=f"{tok_s:.0f}",
                 lr=f"{lr:.3g}")
        self.log({"event": "train", "step": s.step, "epoch": s.epoch, "loss": avg, "ppl": math.exp(min(avg, 50)),
                  "lr": lr, "tok_s": tok_s, "tokens": s.tokens, "elapsed": round(s.elapsed, 2)})

    def _finish(self, finished: str) -> dict:
        """The last checkpoint and the end record. A signal asks to stop now: no (slow) final
        validation; a step already validated (just now, or before a --resume) is not again."""
        t, s = self.cfg.train, self.state
        result = None
        if self.data.dev_tgt and finished != "signal":
            done = s.validated
            result = done[1] if done is not None and done[0] == s.step else self.validate()
        if result is None:
            self.checkpoint()
        summary = {"event": "end", "reason": finished, "step": s.step, "epoch": s.epoch, "tokens": s.tokens,
                   "elapsed": round(s.elapsed, 1)}
        if t.valid_metric == "ppl":
            summary["best_dev_ppl"] = s.best_ppl
        else:  # BEST is chosen by the metric: its ppl is that checkpoint's, not the lowest
            summary[f"best_dev_{t.valid_metric}"] = s.tracker.best
            summary["best_checkpoint_dev_ppl"] = s.best_ppl
        self.log(summary)
        self.dist.barrier()
        return summary


def stop_handler(trainer) -> Callable[[int, Any], None]:
    """The SIGINT/SIGTERM handler: stop after the current update and write a final checkpoint.
    A second SIGINT (Ctrl-C again) stops at once: KeyboardInterrupt, exit status 130; the last
    checkpoint on disk stays as it is (checkpoints are written atomically)."""

    def request_stop(signum, frame):
        if trainer.stop_requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        trainer.stop_requested = True
        if signum == signal.SIGINT:
            print("\nattnmt: stopping after this update (Ctrl-C again: stop now)", file=sys.stderr)

    return request_stop
