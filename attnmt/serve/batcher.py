"""Dynamic batching: sentences from concurrent requests share one decoder call.

Each model has one worker thread (a model is only ever used by its own thread). A request becomes
a ``Job`` of sentences (each what the translate function takes per sentence: the app sends the
text with its prefix and constraints) plus its ``SearchOptions``; jobs wait in the model's queue.
The worker takes the oldest job and, for up to ``max_wait`` seconds after it arrived, gathers more
jobs with the *same* options until ``max_batch`` sentences are collected, then translates them all
in one ``Translator.translate`` call and hands every job its slice of the results. Decoding cost per
sentence falls with batch size (one matrix product per step for the whole batch), so under load
throughput rises while a lone request waits at most ``max_wait``.

``max_wait=0`` or ``max_batch=1`` turns batching off: every job is decoded on its own.

A job's future may be cancelled while it waits (its client timed out or went away): the worker
drops it unseen. Once the worker takes a job, the job runs to the end and its result is discarded
if nobody waits for it. Nothing a job does can stop the worker thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from attnmt.decode.options import SearchOptions

Options = SearchOptions  # frozen, so jobs compare their options by value


@dataclass
class Job:
    sentences: list[Any]
    options: Options
    future: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)
    batch_sentences: int = 0  # filled in by the worker: how many sentences shared the call


class QueueFull(Exception):
    """More sentences are waiting than the server accepts; the client should retry later."""


class ModelBatcher:
    """The queue and worker thread of one model.

    ``translate(sentences, options) -> list`` runs on the worker thread; it must return one result
    per sentence, in order.
    """

    def __init__(
        self,
        translate: Callable[[list[Any], Options], list[Any]],
        max_batch: int = 32,
        max_wait: float = 0.005,
        max_queue: int = 1024,
        name: str = "model",
    ):
        self.translate, self.name = translate, name
        self.max_batch, self.max_wait, self.max_queue = (
            max(1, max_batch),
            max(0.0, max_wait),
            max_queue,
        )
        self._jobs: deque[Job] = deque()
        self._queued = 0  # sentences waiting
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.stats = {"calls": 0, "sentences": 0, "jobs": 0, "dropped": 0}

    @property
    def batching(self) -> bool:
        return self.max_batch > 1 and self.max_wait > 0

    def submit(self, sentences: list[Any], options: Options) -> Job:
        job = Job(list(sentences), options)
        with self._cond:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            self._drop_cancelled()
            if self._queued + len(sentences) > self.max_queue and self._jobs:
                raise QueueFull(
                    f"{self._queued} sentences are already waiting for model {self.name!r}"
                )
            self._jobs.append(job)
            self._queued += len(sentences)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"batcher-{self.name}", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return job

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- worker --------------------------------------------------------------------------------
    def _take(self) -> list[Job] | None:
        """Wait for work, then collect one batch of same-option jobs (the oldest job first)."""
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            self._drop_cancelled()
            if not self._jobs:
                return [] if not self._closed else None
            first = self._jobs[0]
            if self.batching:
                deadline = first.arrived + self.max_wait
                while not self._closed:
                    same = sum(len(j.sentences) for j in self._jobs if j.options == first.options)
                    left = deadline - time.monotonic()
                    if same >= self.max_batch or left <= 0:
                        break
                    self._cond.wait(left)
                self._drop_cancelled()
                if not self._jobs:
                    return []
                first = self._jobs[0]
            taken, count = [], 0
            for job in list(self._jobs):
                if job.options != first.options:
                    continue
                if taken and (count + len(job.sentences) > self.max_batch or not self.batching):
                    break
                taken.append(job)
                count += len(job.sentences)
            for job in taken:
                self._jobs.remove(job)
            self._queued -= count
            # from here on cancel() fails: a job that was cancelled in the meantime is dropped
            return [job for job in taken if job.future.set_running_or_notify_cancel()]

    def _drop_cancelled(self) -> None:
        """Forget queued jobs whose client gave up (called with the lock held)."""
        for job in [j for j in self._jobs if j.future.cancelled()]:
            self._jobs.remove(job)
            self._queued -= len(job.sentences)
            self.stats["dropped"] += 1

    def _run(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            if jobs:
                self._decode(jobs)

    def _decode(self, jobs: list[Job]) -> None:
        sentences = [s for job in jobs for s in job.sentences]
        try:
            results = self.translate(sentences, jobs[0].options)
            if len(results) != len(sentences):
                raise RuntimeError(f"{len(results)} results for {len(sentences)} sentences")
        except BaseException as err:  # noqa: BLE001 - every waiting client must get an answer
            for job in jobs:
                _settle(job.future, error=err)
            return
        self.stats["calls"] += 1
        self.stats["sentences"] += len(sentences)
        self.stats["jobs"] += len(jobs)
        start = 0
        for job in jobs:
            job.batch_sentences = len(sentences)
            _settle(job.future, result=results[start : start + len(job.sentences)])
            start += len(job.sentences)


def _settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:  # already settled or cancelled: nobody is waiting for it
        pass
