"""Ctrl-C and SIGTERM in the study loop: noted as well as raised, and held back while an outcome settles.

`wdrbo-dist run` hands a `CtrlC` to the driver (`run_study`'s `ctrl_c` guard), and takes SIGTERM
with it for the whole command (`terminate_interrupts`): what Slurm, Kubernetes and `ray job stop`
send ends a study as Ctrl-C does, with exit code 143 instead of 130.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from wdrbo_dist.errors import ExitCode

# What each signal's handler is when nobody took it: a driver started with SIGINT ignored (in the
# background) keeps ignoring it, and a handler someone else installed is left to them.
_DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


class CtrlC:
    """Ctrl-C (or SIGTERM) during the study loop, noted as well as raised, and held back while an outcome settles.

    Python raises the KeyboardInterrupt in whatever the main thread runs at that moment. Raised in
    the middle of an MLflow call it can leave the sqlite store's write lock held (the next call
    waits on it; seen here), and raised in a finaliser (a `__del__`, a weakref callback) it is
    printed and dropped, and the study ran on to exit 0 (CI, once). So while an outcome is stored
    and tracked the signal is only noted, and raised when that is done; while the driver waits on
    the backend it is raised at once, and one that a finaliser dropped is raised after the next
    outcome settles. A second signal is raised at once (a server that stopped answering can hold
    a call for MLflow's retries), and the command then leaves MLflow to the next `run`. SIGTERM is
    raised as a KeyboardInterrupt too; `signum` says which came first (the exit code).
    """

    def __init__(self) -> None:
        self.requested = False
        self.cut_short = False  # a second signal stopped an outcome's storing or logging
        self.signum: int | None = None  # the first signal that came
        self._deferring = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        again, self.requested = self.requested, True
        self.signum = self.signum or signum
        if self._deferring and not again:
            return
        self.cut_short = self._deferring  # a second signal stops a slow MLflow call too
        raise KeyboardInterrupt

    def exit_code(self, code: ExitCode) -> ExitCode:
        """`code`, with INTERRUPTED made TERMINATED when SIGTERM ended the command."""
        if code == ExitCode.INTERRUPTED and self.signum == signal.SIGTERM:
            return ExitCode.TERMINATED
        return code

    @contextmanager
    def _taking(self, signums: tuple[int, ...]) -> Iterator[None]:
        """Within the block each of `signums` whose handler is its default (or ours) goes to this object."""
        taken: dict[int, object] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in signums:
                current = signal.getsignal(signum)
                if current is _DEFAULTS[signum] or current == self._handler:
                    taken[signum] = signal.signal(signum, self._handler)
        try:
            yield
        finally:
            for signum, previous in taken.items():
                signal.signal(signum, previous)  # type: ignore[arg-type]

    @contextmanager
    def terminate_interrupts(self) -> Iterator[None]:
        """Within the block SIGTERM raises a KeyboardInterrupt (noted in `signum`), as Ctrl-C does."""
        with self._taking((signal.SIGTERM,)):
            yield

    @contextmanager
    def taken(self) -> Iterator[None]:
        """Within the block SIGINT and SIGTERM go to this object (where their default handler has them)."""
        with self._taking((signal.SIGINT, signal.SIGTERM)):
            yield
            if self.requested:  # noted, then dropped by a finaliser after the last outcome
                raise KeyboardInterrupt

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Within the block a signal is only noted; it is raised when the block is done."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self.requested:
            raise KeyboardInterrupt
