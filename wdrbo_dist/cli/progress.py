"""A study's progress on the terminal: a bar on a terminal, one line per outcome elsewhere."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

from wdrbo_dist.execution.task import Outcome, Task

Echo = Callable[[str], None]


class Progress:
    """done / failed / remaining and an ETA weighted by expected cost (longest runs go first,
    so a count-based rate would be pessimistic early on)."""

    def __init__(self, tasks: Sequence[Task], enabled: bool, echo: Echo) -> None:
        self.total = len(tasks)
        self.total_cost = sum(t.expected_cost for t in tasks) or 1.0
        self.done = self.failed = self.lost = 0
        self.cost_done = 0.0
        self.start = time.monotonic()
        self.echo = echo
        self.bar = None
        if enabled and self.total and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=round(self.total_cost, 3), unit="", bar_format=(
                "{l_bar}{bar}| [{elapsed}<{remaining}{postfix}]"), desc="study", leave=True)
            self._postfix()
        self.lines = enabled and self.bar is None

    def _postfix(self) -> None:
        if self.bar is not None:
            lost = f" lost {self.lost}" if self.lost else ""
            self.bar.set_postfix_str(f"done {self.done} failed {self.failed}{lost} remaining {self.remaining}")

    @property
    def remaining(self) -> int:
        return self.total - self.done - self.failed - self.lost

    def eta_s(self) -> float:
        elapsed = time.monotonic() - self.start
        if self.cost_done <= 0:
            return float("nan")
        return elapsed * (self.total_cost - self.cost_done) / self.cost_done

    def update(self, outcome: Outcome) -> None:
        if outcome.lost:
            self.lost += 1
        elif outcome.result.ok:
            self.done += 1
        else:
            self.failed += 1
        self.cost_done += outcome.task.expected_cost
        if self.bar is not None:
            self.bar.update(outcome.task.expected_cost)
            self._postfix()
        elif self.lines:
            eta = self.eta_s()
            eta_text = "?" if eta != eta else f"{eta:.0f} s"
            status = "lost" if outcome.lost else outcome.result.status.lower()
            self.echo(
                f"[{self.total - self.remaining}/{self.total}] {status} "
                f"{outcome.task.spec.label} in {outcome.result.wall_time_s:.1f} s "
                f"(done {self.done}, failed {self.failed}, remaining {self.remaining}, ETA {eta_text})"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
