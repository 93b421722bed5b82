"""Ctrl-C in the study loop: noted as well as raised, and held back while an outcome settles.

`wdrbo-dist run` hands a `CtrlC` to the driver (`run_study`'s `ctrl_c` guard).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CtrlC:
    """Ctrl-C during the study loop, noted as well as raised, and held back while an outcome settles.

    Python raises the KeyboardInterrupt in whatever the main thread runs at that moment. Raised in
    the middle of an MLflow call it can leave the sqlite store's write lock held (the next call
    waits on it; seen here), and raised in a finaliser (a `__del__`, a weakref callback) it is
    printed and dropped, and the study ran on to exit 0 (CI, once). So while an outcome is stored
    and tracked the signal is only noted, and raised when that is done; while the driver waits on
    the backend it is raised at once, and one that a finaliser dropped is raised after the next
    outcome settles. A second Ctrl-C is raised at once (a server that stopped answering can hold
    a call for MLflow's retries), and the command then leaves MLflow to the next `run`. A driver
    that ignores SIGINT (started in the background) keeps ignoring it.
    """

    def __init__(self) -> None:
        self.requested = False
        self.cut_short = False  # a second Ctrl-C stopped an outcome's storing or logging
        self._deferring = False

    def _handler(self, signum: int, frame: object) -> None:
        again, self.requested = self.requested, True
        if self._deferring and not again:
            return
        self.cut_short = self._deferring  # a second Ctrl-C stops a slow MLflow call too
        raise KeyboardInterrupt

    @contextmanager
    def taken(self) -> Iterator[None]:
        """Within the block, SIGINT goes to this object (if Python's default handler has it)."""
        ours = (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if ours:
            signal.signal(signal.SIGINT, self._handler)
        try:
            yield
            if self.requested:  # noted, then dropped by a finaliser after the last outcome
                raise KeyboardInterrupt
        finally:
            if ours:
                signal.signal(signal.SIGINT, signal.default_int_handler)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Within the block a Ctrl-C is only noted; it is raised when the block is done."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self.requested:
            raise KeyboardInterrupt
