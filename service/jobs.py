"""One runner for the work a long-lived host does off the calls' path: a workspace's first
snapshot, a turn checkpoint, a compaction, a consolidation, the daily verification, and two
workers: the outcomes written behind the calls (service/transaction.py) and the pushes after a
turn (service/remotes.py).

Each job has a key (one running job per key: a second start while it runs is not made) and a
typed state that `health` reports (results.BackgroundJob).  A job that would hold the agent's
calls up on the GIL runs its work in a child process (engine/offload.py), else on the thread
itself, and says which (`runs_in`).  An exception ends the job with its `error`, never the
host.  A worker (`Jobs.worker`) is a job that lives on, doing the items its owner hands it one
at a time; an exception in one item is kept as its `error` and it goes on with the next.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..engine import offload
from .results import BackgroundJob


@dataclass
class Job:
    kind: str
    key: str
    started: float = field(default_factory=time.time)
    finished: float | None = None
    error: str | None = None
    runs_in: str | None = None
    progress: dict | None = None
    result: Any = None
    thread: threading.Thread | None = None
    busy: bool = False              # a worker's item is under way (a drain at exit waits for it)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for it; True when it has ended."""
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)
        return not self.running

    def state(self) -> BackgroundJob:
        return BackgroundJob(kind=self.kind, running=self.running, started=self.started, finished=self.finished,
                             error=self.error, progress=self.progress, runs_in=self.runs_in)

    def offloaded(self, kind: str, core, params: dict, *, progress=None, here: Callable[[], Any]) -> Any:
        """`kind`'s work (engine/offload.py) in a child process; `here()` on this thread when no
        child can run (the reason is kept in `runs_in`)."""
        self.runs_in = "a child process"
        try:
            return offload.run(kind, core.store_dir, core.store.config, params, progress=progress)
        except offload.Unavailable as exc:
            self.runs_in = f"this process: {exc}"
            return here()


class Jobs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}

    def start(self, key: str, kind: str, work: Callable[[Job], Any]) -> Job | None:
        """Run `work(job)` on a daemon thread; None when the job of `key` is running already."""
        with self._lock:
            cur = self._jobs.get(key)
            return None if cur is not None and cur.running else self._launch(key, kind, work)

    def worker(self, key: str, kind: str, take: Callable[[], Any], do: Callable[[Any], Any]) -> Job:
        """The long-lived worker of `key`, started at its first need (and again should it ever
        end): `do(take())` over and over, one item at a time, where `take()` blocks on the
        owner's own input (a queue, an event) until the next item is due.  An exception in `do`
        is kept as the job's `error` and the worker goes on, so that the items behind it are
        not stranded; `progress` counts the items done and failed (a worker started again
        carries on the error and counts of the one before)."""
        def work(job: Job) -> None:
            counts = job.progress = {"done": 0, "failed": 0, **(job.progress or {})}
            while True:
                try:
                    item = take()
                except Exception as exc:         # the worker's end: this error, not one before
                    job.error = f"{type(exc).__name__}: {exc}"
                    raise
                job.busy = True
                try:
                    do(item)
                    counts["done"] += 1
                except Exception as exc:         # this item's failure, reported; not the worker's end
                    counts["failed"] += 1
                    job.error = f"{type(exc).__name__}: {exc}"
                finally:
                    job.busy = False
        with self._lock:
            cur = self._jobs.get(key)
            if cur is not None and cur.running:
                return cur
            before = cur or Job(kind=kind, key=key)
            return self._launch(key, kind, work, progress=before.progress, error=before.error)

    def _launch(self, key: str, kind: str, work: Callable[[Job], Any], **state) -> Job:
        job = self._jobs[key] = Job(kind=kind, key=key, **state)

        def run() -> None:
            try:
                job.result = work(job)
            except Exception as exc:         # the job's end, reported; never the host's
                job.error = job.error or f"{type(exc).__name__}: {exc}"
            finally:
                job.finished = time.time()
        job.thread = threading.Thread(target=run, name=f"chronos-git-{kind}", daemon=True)
        job.thread.start()
        return job

    def get(self, key: str) -> Job | None:
        with self._lock:
            return self._jobs.get(key)

    def wait(self, key: str, timeout: float | None = None) -> bool:
        """Wait for the job of `key`; True when none is running."""
        job = self.get(key)
        return True if job is None else job.join(timeout)

    def states(self) -> list[BackgroundJob]:
        with self._lock:
            jobs = list(self._jobs.values())
        return [j.state() for j in sorted(jobs, key=lambda j: j.started)]
