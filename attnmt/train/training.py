"""The training loop: the paper's SGD recipe or Adam with warm-up, data-parallel with DDP.

    attnmt train CONFIG.yaml --out RUN [--set section.key=value ...] [--resume]
    torchrun --nproc-per-node N -m attnmt train CONFIG.yaml --out RUN      # data parallel

One step: forward with teacher forcing, cross-entropy over target tokens (normalised per sentence,
as the paper's SGD recipe assumes, or per token), backward, gradient-norm clipping, update (then
the weights' moving average, train.ema: train/ema.py). Every ``valid_every`` steps (default: each
epoch) the dev perplexity (and, by train.valid_metric, BLEU or chrF: train/validation.py) is
computed and a checkpoint written; the best one by that metric is marked BEST, and
``train.patience`` validations without a better one stop the run. Only rank 0 writes files
(TensorBoard's too, train.tensorboard: train/tensorboard.py). ``--init-from`` starts from another
run's weights (train/init_from.py). SIGINT/SIGTERM finish the
current step, write a checkpoint and exit cleanly; SIGKILL loses at most the work since the last
checkpoint, and ``--resume`` continues from it with the same batch order and RNG state.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from attnmt.config import Config
from attnmt.data.batching import Batch, Batches, iterate_batches, make_batches
from attnmt.errors import UserError
from attnmt.jsonio import dumps
from attnmt.kernels import dispatch
from attnmt.kernels.packed import bf16_products, native_bf16
from attnmt.train.allocator import keep_freed_memory
from attnmt.models import build_model
from attnmt.models.common import loss_units, model_loss, token_loss
from attnmt.runs.checkpoint import (
    EMA_FILE,
    check_trainer_state,
    find_checkpoint,
    load_trainer_state,
    load_weights,
    save_checkpoint,
)
from attnmt.runs.device import resolve_device
from attnmt.runs.loader import load_weights_into
from attnmt.train import init_from as init
from attnmt.train.data import TaskData, prepare_data
from attnmt.train.ema import EMA
from attnmt.train.row_groups import grouped_backward, groups_for
from attnmt.train.row_processes import RowProcesses, supported as row_processes_supported
from attnmt.train.validation import Tracker, dev_score


# -- devices and processes ----------------------------------------------------------------------
@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def init_distributed(device_name: str) -> tuple[Dist, torch.device]:
    """Join the process group torchrun set up (WORLD_SIZE > 1), or run as a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(), resolve_device(device_name)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and device_name != "cpu"
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    return Dist(rank, world, local_rank), device


# -- learning rate ------------------------------------------------------------------------------
def learning_rate(cfg: Config, epoch: int, step: int, progress: float = 0.0) -> float:
    """SGD (the paper): lr, halved (×decay) every epoch after ``decay_start``.
    Adam: linear warm-up for ``warmup`` steps, then (``schedule``) inverse square root decay,
    a constant rate, or a linear decay that reaches zero when ``progress`` (the spent fraction of
    the training budget) reaches 1."""
    t = cfg.train
    if t.optimizer == "sgd":
        return t.lr * t.decay ** max(0, epoch - t.decay_start)
    step, warmup = max(step, 1), max(t.warmup, 1)
    ramp = min(step / warmup, 1.0)
    if t.schedule == "constant":
        return t.lr * ramp
    if t.schedule == "linear":
        return t.lr * ramp * max(1.0 - progress, 0.0)
    return t.lr * min(step / warmup, math.sqrt(warmup / step))


def make_optimizer(cfg: Config, model: torch.nn.Module) -> torch.optim.Optimizer:
    t = cfg.train
    if t.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=t.lr)
    if t.optimizer == "adam":
        # the fused kernel: one pass over all parameters (on CPU ~9x faster than the default loop)
        fused = all(p.device.type in ("cpu", "cuda") for p in model.parameters())
        return torch.optim.Adam(model.parameters(), lr=t.lr, betas=(0.9, 0.98), eps=1e-9, fused=fused)
    raise UserError(f"train.optimizer must be sgd or adam, not {t.optimizer!r}")


# -- evaluation ---------------------------------------------------------------------------------
@torch.no_grad()
def perplexity(model, src, tgt, device, batch_tokens: int = 4000, autocast=nullcontext) -> dict:
    """Perplexity of a translation/LM model on token-id data (teacher forcing, </s> scored).
    A model class with its own ``evaluate`` (the classifier) is validated by that instead."""
    model.eval()
    total, tokens = 0.0, 0
    for batch in iterate_batches(src, tgt, make_batches(src, tgt, batch_tokens, "tokens", shuffle=False)):
        batch = batch.to(device)
        with autocast():
            logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        total += float(token_loss(logits, batch.tgt_out))
        tokens += batch.target_tokens
    model.train()
    return {"loss": total / max(tokens, 1), "ppl": math.exp(min(total / max(tokens, 1), 50)), "tokens": tokens}


# -- the loop -----------------------------------------------------------------------------------
class TokenLoss(torch.nn.Module):
    """A model's own ``token_loss`` as a module's forward: the step calls it through DDP when
    training is data-parallel, so the cheap loss and DDP's gradient synchronisation go together."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                tgt_out: torch.Tensor, smoothing: float) -> torch.Tensor:
        return self.model.token_loss(src, src_lengths, tgt_in, tgt_out, smoothing)


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool = False, init_from: str | None = None,
                 init_optimizer: bool = False):
        """``init_from``: ``RUN[:CKPT]`` to start from (train/init_from.py), ignored when resuming
        from a checkpoint of this run; ``init_optimizer``: its optimizer state too."""
        self.cfg, self.run_dir = cfg, run_dir
        t = cfg.train
        self.dist, self.device = init_distributed(t.device)
        if t.threads > 0:
            torch.set_num_threads(t.threads)
        torch.manual_seed(t.seed + self.dist.rank)
        resuming = resume and (run_dir / "checkpoints" / "LAST").exists()
        source = None
        if init_from and not resuming:
            source, which = init.parse_spec(init_from)
            source_cfg = init.source_config(source)
            init.check_compatible(cfg, source_cfg, source)
        if self.dist.main:  # config.yaml is written by run_training once all of this worked
            run_dir.mkdir(parents=True, exist_ok=True)
            if source is not None:
                init.copy_vocabularies(source, run_dir)
        if source is not None:
            self.dist.barrier()  # the copied tokenizers are in place for every rank
        self.data: TaskData = prepare_data(cfg, run_dir, self.dist.main, sync=self.dist.barrier)
        src_vocab = len(self.data.src_tok) if self.data.src_tok else 0
        self.model = build_model(cfg, src_vocab, len(self.data.tgt_tok)).to(self.device)
        # NgramRes (ngram: section): a head over the network whose state_dict is the network's;
        # its α annealing reads self.step. A no-op without an n-gram model.
        from attnmt.ngram.residual import attach_ngram

        self.model = attach_ngram(self.model, cfg, run_dir, self.data.tgt_tok, step_fn=lambda: self.step,
                                  train_targets=self.data.train.targets_flat if self.dist.main else None,
                                  sync=self.dist.barrier)
        self.optimizer = make_optimizer(cfg, self.model)
        self.init_note = None
        if source is not None:
            optimizer = self.optimizer if init_optimizer else None
            loaded = init.load_initial(self.model, optimizer, source, which,
                                       source_cfg.train.optimizer == t.optimizer)
            self.init_note = {"event": "init", "from": loaded, "optimizer": init_optimizer}
        self.ema = EMA(self.model, t.ema, t.ema_warmup) if t.ema > 0 else None  # θ̄₀: the initial weights
        self.step, self.epoch, self.batch_in_epoch = 0, 1, 0
        self.elapsed, self.best_ppl = 0.0, float("inf")  # best_ppl: the dev ppl of BEST
        self.tracker = Tracker.fresh(t.valid_metric)  # BEST's train.valid_metric, patience
        self.tokens = 0  # target tokens (or sentences, classify) trained on so far
        self.steps_per_epoch = 1  # set when training starts
        self.validated: tuple[int, dict] | None = None  # (step, result) of the latest validation
        self.tensorboard = None
        if t.tensorboard and self.dist.main:
            from attnmt.train.tensorboard import TensorBoard

            self.tensorboard = TensorBoard(run_dir)
        if resuming:
            self._resume()
        # A model may define token_loss(src, src_lengths, tgt_in, tgt_out, smoothing), equal to
        # token_loss(model(...)) but cheaper (Seq2Seq: no logits for padding). The NgramRes head
        # defines none: its loss comes from its forward, the n-gram term included.
        self.fused_loss = getattr(self.model, "token_loss", None) is not None
        want = t.row_workers == "processes" and self.device.type == "cpu"
        self.row_workers = "processes" if want and row_processes_supported(self.model) else "threads"
        self.row_processes: RowProcesses | None = None  # started by train(), see _start_row_processes
        self.ddp = self.model
        if self.dist.world > 1:  # DDP synchronises the gradients of what its forward runs
            ids = [self.device.index] if self.device.type == "cuda" else None
            wrapped = TokenLoss(self.model) if self.fused_loss else self.model
            self.ddp = torch.nn.parallel.DistributedDataParallel(wrapped, device_ids=ids)
        use_amp = t.amp and self.device.type == "cuda"
        dtype = torch.bfloat16 if use_amp and torch.cuda.is_bf16_supported() else torch.float16
        self.autocast = (
            (lambda: torch.autocast("cuda", dtype=dtype)) if use_amp else nullcontext
        )
        self.scaler = torch.amp.GradScaler("cuda", enabled=use_amp and dtype == torch.float16)
        # CPU: the LSTM's products in bfloat16 where the CPU has bfloat16 units (kernels/packed.py)
        self.cpu_bf16 = t.amp and self.device.type == "cpu" and native_bf16()
        if self.device.type == "cpu":  # an update's large tensors reuse the last one's pages
            keep_freed_memory()
        self.stop_requested = False

    # -- state ---------------------------------------------------------------------------------
    def _resume(self) -> None:
        ckpt = find_checkpoint(self.run_dir, "last")
        weights = ckpt / "model.safetensors"  # a --set that changes the model's shape fails here
        load_weights_into(self.model, load_weights(weights), str(weights))
        state = check_trainer_state(load_trainer_state(ckpt), ckpt / "trainer.pt")
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"])
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            raise UserError(f"trainer state does not fit this run ({type(err).__name__}: "
                            f"{str(err).splitlines()[0] if str(err) else ''})",
                            str(ckpt / "trainer.pt")) from None
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch, self.elapsed = state["batch_in_epoch"], state["elapsed"]
        self.best_ppl = state["best_ppl"]
        if state.get("valid_metric", "ppl") == self.cfg.train.valid_metric:
            best = state.get("best_score", self.best_ppl)  # a checkpoint from before valid_metric: ppl
            self.tracker = Tracker(self.cfg.train.valid_metric, best, state.get("since_best", 0))
        # else: --set train.valid_metric changed the metric; BEST is chosen afresh from here on
        self.tokens = state.get("tokens", 0)
        if self.ema is not None:
            path = ckpt / EMA_FILE
            if path.is_file():
                self.ema.load(load_weights(path), str(path))
            else:  # train.ema switched on at --resume: the average starts from the weights now
                self.ema = EMA(self.model, self.cfg.train.ema, self.cfg.train.ema_warmup)
        if torch.cuda.is_available() and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self.log({"event": "resume", "checkpoint": ckpt.name, "step": self.step})

    def _trainer_state(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "elapsed": self.elapsed,
            "best_ppl": self.best_ppl,
            "valid_metric": self.tracker.metric,
            "best_score": self.tracker.best,
            "since_best": self.tracker.since_best,
            "tokens": self.tokens,
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }

    def checkpoint(self, best: bool = False) -> None:
        if self.dist.main:
            extra = {EMA_FILE: self.ema.weights()} if self.ema is not None else None
            save_checkpoint(self.run_dir, self.step, self.model, self._trainer_state(), best,
                            extra_weights=extra)

    def log(self, record: dict) -> None:
        if not self.dist.main:
            return
        record = {"time": round(time.time(), 3), **record}
        with open(self.run_dir / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(dumps(record) + "\n")  # valid JSON: an infinite best_ppl is null
        if self.tensorboard is not None:  # a mirror of the log's numbers
            self.tensorboard.record(record)

    # -- validation ----------------------------------------------------------------------------
    def validate(self) -> dict | None:
        """Dev ppl (and train.valid_metric's score) of the weights, their EMA when train.ema is
        on; BEST follows the metric; the record says what it cost (seconds)."""
        if not self.data.dev_tgt:
            return None
        start = time.perf_counter()
        with self.ema.applied() if self.ema is not None else nullcontext():
            result = self._evaluate()
        metric = self.cfg.train.valid_metric
        result["seconds"] = round(time.perf_counter() - start, 3)
        best = self.tracker.observe(result[metric])
        if best:
            self.best_ppl = result["ppl"]
        self.log({"event": "valid", "step": self.step, "epoch": self.epoch, **result, "metric": metric,
                  "best": best, "since_best": self.tracker.since_best, "ema": self.ema is not None})
        self.checkpoint(best=best)
        self.validated = (self.step, result)
        return result

    def _evaluate(self) -> dict:
        """ppl by teacher forcing (a model's own ``evaluate``: the classifier), the dev BLEU/chrF
        of train.valid_metric, and TensorBoard's attention pictures, of the weights in the model."""
        evaluate = getattr(type(self.model), "evaluate", None) or perplexity
        result = evaluate(self.model, self.data.dev_src, self.data.dev_tgt, self.device, autocast=self.autocast)
        d = self.data
        if self.cfg.train.valid_metric != "ppl":
            # searched in float32, as translate does: the score is the one users will see
            result.update(dev_score(self.model, self.cfg, d.src_tok, d.tgt_tok, self.device,
                                    d.dev_src_text, d.dev_tgt_text))
        if self.tensorboard is not None and d.dev_src_text:
            from attnmt.train.tensorboard import example_translations

            self.tensorboard.attention(self.step, example_translations(
                self.model, self.cfg, d.src_tok, d.tgt_tok, self.device, d.dev_src_text))
        return result

    # -- training ------------------------------------------------------------------------------
    def _epoch_batches(self) -> Batches:
        """This rank's batches of the epoch (every rank takes the same number)."""
        batches = self.data.train.batches(self.epoch)
        return batches.take(self.dist.rank, self.dist.world) if self.dist.world > 1 else batches

    def say(self, line: str) -> None:
        """One line on the console (rank 0)."""
        if self.dist.main:
            print(f"attnmt: {line}", file=sys.stderr)

    def _install_signal_handlers(self) -> None:
        request_stop = stop_handler(self)
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                signal.signal(sig, request_stop)
            except ValueError:  # not the main thread (e.g. inside a test runner thread)
                pass

    def train_step(self, batches: list[Batch]) -> tuple[float, int]:
        """One update from ``batches`` (gradient accumulation); returns summed loss and tokens."""
        with bf16_products(self.cpu_bf16):  # row processes forked in here inherit it
            return self._update(batches)

    def _update(self, batches: list[Batch]) -> tuple[float, int]:
        t = self.cfg.train
        lr = learning_rate(self.cfg, self.epoch, self.step + 1, self._progress())
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        total_loss, total_tokens = 0.0, 0
        norm = sum(loss_units(self.model, b) if t.loss_norm == "tokens" else b.src.size(0) for b in batches)
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            # row groups bypass DDP's forward, so they run in a single process only
            groups = self._row_groups(batch) if self.fused_loss and self.dist.world == 1 else 1
            if groups > 1:  # CPU: groups of rows at once, one thread each (train/row_groups.py)
                rows = self._start_row_processes()
                if rows is not None:  # ... each in its own process (train/row_processes.py)
                    total_loss += rows.backward(batch, 1.0 / norm, t.label_smoothing, groups)
                else:
                    total_loss += grouped_backward(self.model, batch, groups, 1.0 / norm, t.label_smoothing)
                total_tokens += loss_units(self.model, batch)
                continue
            sync = self.ddp.no_sync if (self.dist.world > 1 and i < len(batches) - 1) else nullcontext
            with sync(), self.autocast():
                if self.fused_loss:
                    args = (batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, t.label_smoothing)
                    loss = self.ddp(*args) if self.dist.world > 1 else self.model.token_loss(*args)
                else:
                    logits, _ = self.ddp(batch.src, batch.src_lengths, batch.tgt_in)
                    loss = model_loss(self.model, logits, batch, t.label_smoothing)
            self.scaler.scale(loss / norm).backward()
            total_loss += float(loss.detach())
            total_tokens += loss_units(self.model, batch)
        self.scaler.unscale_(self.optimizer)
        if t.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.ema is not None:
            self.ema.update(self.step + 1)
        self.step += 1
        return total_loss, total_tokens

    def _row_groups(self, batch: Batch) -> int:
        """How many row groups train_step runs a batch as (1: one pass): on CPU only (no autocast
        or gradient scaling there), as train.row_groups says (row_groups.groups_for)."""
        if self.device.type != "cpu":
            return 1
        hidden = getattr(self.cfg.model, "hidden", 0)
        return groups_for(self.cfg.train.row_groups, batch.src.size(0), torch.get_num_threads(), hidden,
                          self.row_workers)

    def _start_row_processes(self) -> RowProcesses | None:
        """The worker processes of train.row_workers = processes, forked on first use (train()
        asks before it starts any thread: a fork copies only the calling one); None where row
        groups run on threads or not at all."""
        if self.row_processes is None and self.row_workers == "processes" and self.fused_loss \
                and self.dist.world == 1:
            # as many as the largest batch can use (train.batch_size bounds its rows, sentences
            # or tokens), not one per thread of a many-core machine
            t, threads = self.cfg.train, torch.get_num_threads()
            hidden = getattr(self.cfg.model, "hidden", 0)
            parts = groups_for(t.row_groups, t.batch_size * t.accumulate, threads, hidden, "processes")
            if parts > 1:
                self.row_processes = RowProcesses(self.model, parts - 1)
        return self.row_processes

    def close(self) -> None:
        """Stop the row processes, if any, and close TensorBoard's files (train() does this when
        it returns)."""
        if self.row_processes is not None:
            self.row_processes.close()
            self.row_processes = None
        if self.tensorboard is not None:
            self.tensorboard.close()
            self.tensorboard = None

    def _progress(self) -> float:
        """The spent fraction of the training budget: the largest of steps / max_steps,
        time / max_time and steps / (epochs · steps per epoch), for the budgets that are set."""
        t = self.cfg.train
        parts = [self.step / max(self.steps_per_epoch * t.epochs, 1)]
        if t.max_steps:
            parts.append(self.step / t.max_steps)
        if t.max_time:
            parts.append(self.elapsed / t.max_time)
        return min(max(parts), 1.0)

    def _out_of_budget(self) -> bool:
        t = self.cfg.train
        if t.max_steps and self.step >= t.max_steps:
            return True
        if t.max_time and self.elapsed >= t.max_time:
            return True
        return False

    def _agree(self, flag: bool) -> bool:
        """All ranks stop together: any rank's stop request stops everyone."""
        if self.dist.world == 1:
            return flag
        x = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return bool(x.item() > 0)

    def train(self) -> dict:
        self._start_row_processes()
        try:
            return self._train()
        finally:
            self.close()

    def _train(self) -> dict:
        t = self.cfg.train
        self._install_signal_handlers()
        for note in self.data.notes:
            self.log({"event": "data", "note": note})
            self.say(f"data: {note}")
        if self.init_note is not None:
            self.log(self.init_note)
            self.init_note = None
        n_params = sum(p.numel() for p in self.model.parameters())
        self.log({"event": "start", "params": n_params, "device": str(self.device), "world": self.dist.world,
                  "precision": "bf16 products" if self.cpu_bf16 else ("amp" if t.amp and self.device.type == "cuda" else "float32")})
        # which kernel computes each part of the model (kernels/dispatch.py); a part that falls
        # back to the reference path for a reason of its own (a new attention) is said once
        paths = dispatch.paths(self.model, self.device.type)
        self.log({"event": "paths", "paths": paths})
        if self.dist.main:
            for line in dispatch.fallbacks(paths):
                print(f"attnmt: {line}", file=sys.stderr)
        per_epoch = len(self._epoch_batches()) // max(t.accumulate, 1)
        self.steps_per_epoch = per_epoch
        total_steps = t.max_steps or per_epoch * t.epochs
        bar = tqdm(
            total=total_steps, initial=self.step, disable=not self.dist.main, unit="step",
            dynamic_ncols=True, mininterval=1.0 if os.isatty(2) else 30.0,
        )
        window_loss, window_tokens, window_time = 0.0, 0, 0.0
        finished = "epochs"
        while self.epoch <= t.epochs:
            batches = self._epoch_batches()
            groups = range(0, len(batches), t.accumulate)
            while self.batch_in_epoch < len(groups):
                patience = self.tracker.patience_spent(t.patience)
                if self._agree(self.stop_requested or self._out_of_budget() or patience):
                    finished = "signal" if self.stop_requested else ("patience" if patience else "budget")
                    break
                first = groups[self.batch_in_epoch]
                step_batches = [self.data.train.collate(batches[k], self.epoch, k)
                                for k in range(first, min(first + t.accumulate, len(batches)))]
                start = time.perf_counter()
                loss, tokens = self.train_step(step_batches)
                took = time.perf_counter() - start
                self.elapsed += took
                self.batch_in_epoch += 1
                self.tokens += tokens * self.dist.world
                window_loss, window_tokens, window_time = window_loss + loss, window_tokens + tokens, window_time + took
                bar.update(1)
                if self.step % t.log_every == 0 or self.step == 1:
                    avg = window_loss / max(window_tokens, 1)
                    tok_s = window_tokens * self.dist.world / max(window_time, 1e-9)
                    eta = (total_steps - self.step) * window_time / max(t.log_every, 1)
                    if t.max_time:
                        eta = min(eta, t.max_time - self.elapsed)
                    lr = self.optimizer.param_groups[0]["lr"]
                    bar.set_postfix(loss=f"{avg:.3f}", ppl=f"{math.exp(min(avg, 50)):.1f}",
                                    tok_s=f"{tok_s:.0f}", eta=f"{max(eta, 0) / 60:.1f}m", lr=f"{lr:.3g}")
                    self.log({"event": "train", "step": self.step, "epoch": self.epoch, "loss": avg,
                              "ppl": math.exp(min(avg, 50)), "lr": lr, "tok_s": tok_s,
                              "tokens": self.tokens, "elapsed": round(self.elapsed, 2)})
                    window_loss, window_tokens, window_time = 0.0, 0, 0.0
                if t.valid_every and self.step % t.valid_every == 0:
                    self.validate()
                elif t.save_every and self.step % t.save_every == 0:
                    self.checkpoint()
            else:
                self.epoch += 1
                self.batch_in_epoch = 0
                if not t.valid_every:
                    self.validate() if self.data.dev_tgt else self.checkpoint()
                continue
            break
        bar.close()
        # a signal asks to stop now: checkpoint without the (slow) final validation; a run whose
        # last update was just validated (and checkpointed) is not validated twice
        result = None
        if self.data.dev_tgt and finished != "signal":
            done = self.validated
            result = done[1] if done is not None and done[0] == self.step else self.validate()
        if result is None:
            self.checkpoint()
        summary = {"event": "end", "reason": finished, "step": self.step, "epoch": self.epoch,
                   "tokens": self.tokens, "elapsed": round(self.elapsed, 1), "best_dev_ppl": self.best_ppl}
        if t.valid_metric != "ppl":
            summary[f"best_dev_{t.valid_metric}"] = self.tracker.best
        self.log(summary)
        if self.dist.world > 1:
            dist.barrier()
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
