"""Saving results on a thread of its own, in the order they came, while the driver goes on.

A run counts as stored once `ResultStore.save` returned: its files are flushed to disk. Those
flushes are most of the driver's time per run at 10^5 short runs (about 2 ms a run on a disk
that syncs slowly), and the driver need not wait for them to receive the next result: it hands
each result to this writer and takes back the saved ones (`saved`, `drain`), then tracks them.
After a save fails the writer saves nothing more: those results are handed back not attempted.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from wdrbo_dist.run.spec import RunResult
from wdrbo_dist.storage.store import ResultStore

T = TypeVar("T")


class NotAttempted(Exception):
    """A result not saved because a save before it failed: its run is still to do."""


@dataclass(frozen=True)
class Saved(Generic[T]):
    """A result's save, done: `error` is None when the store holds it."""

    item: T
    result: RunResult
    error: Exception | None = None


class StoreWriter(Generic[T]):
    """Saves results into `store` on one thread, in order; at most `depth` wait to be saved
    (`submit` blocks beyond that). Only this writer writes the store while it is open: the
    driver drains it before a compaction. `close` waits for what was submitted."""

    def __init__(self, store: ResultStore, depth: int = 64) -> None:
        self.store = store
        self._todo: queue.Queue[tuple[T, RunResult] | None] = queue.Queue(maxsize=depth)
        self._done: deque[Saved[T]] = deque()
        self._failed = False
        self._closed = False
        self._thread = threading.Thread(target=self._save_each, name="store-writer", daemon=True)
        self._thread.start()

    def submit(self, item: T, result: RunResult) -> None:
        if self._closed:
            raise RuntimeError("the store writer is closed: nothing more is saved")
        self._todo.put((item, result))

    def saved(self) -> list[Saved[T]]:
        """The saves done since the last call, in submission order."""
        out = []
        while self._done:
            out.append(self._done.popleft())
        return out

    def drain(self) -> list[Saved[T]]:
        """Wait for every submitted result's save; the saves not yet handed back."""
        self._todo.join()
        return self.saved()

    def close(self) -> list[Saved[T]]:
        """Save what was submitted, end the thread; the saves not yet handed back. Called again
        (a Ctrl-C stopped the first call's wait), it waits again."""
        if not self._closed:
            self._closed = True
            self._todo.put(None)
        self._thread.join()
        return self.saved()

    def _save_each(self) -> None:
        while True:
            job = self._todo.get()
            if job is None:
                self._todo.task_done()
                return
            item, result = job
            error: Exception | None = NotAttempted() if self._failed else None
            if error is None:
                try:
                    self.store.save(result)
                except Exception as exc:  # noqa: BLE001 - handed back to the driver with its result
                    error, self._failed = exc, True
            self._done.append(Saved(item, result, error))
            self._todo.task_done()
