"""A run past `run_timeout_s` in native code (where its own alarm cannot reach it) is ended from
outside its process `KILL_GRACE_S` later and FAILED "timed out", on the pool and on Ray; the
study goes on. (Here the grace is `GRACE_S`: the time it leaves the run's own alarm cannot help
a run hung in native code, so the product's 5 s would only be waited out.)"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from wdrbo_dist.driver.plan import make_tasks
from wdrbo_dist.execution import local, ray_limits, task
from wdrbo_dist.execution.backends import map_tasks
from wdrbo_dist.execution.task import Outcome
from wdrbo_dist.study.config import parse_study_config

from test_backends import FAST, tiny_study

LIMIT_S = 2.0
GRACE_S = 1.0  # KILL_GRACE_S here
SLACK_S = 5.0  # the driver's polling, a loaded machine


@pytest.fixture
def hanging(tmp_path: Path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import hanging_problem
    import raising_problem

    from wdrbo_dist.problems import PROBLEMS

    monkeypatch.setitem(PROBLEMS, "hangs", hanging_problem.NativeHangProblem)
    monkeypatch.setenv(raising_problem.ATTEMPTS_ENV, str(tmp_path / "attempts.log"))
    for module in (task, local, ray_limits):  # the drivers' copies (pool, Ray) and the verdict's
        monkeypatch.setattr(module, "KILL_GRACE_S", GRACE_S)
    return hanging_problem


def _tasks(tmp_path: Path):
    """The hanging run with its limit, first; two ordinary runs beside it (no limit: on a loaded
    machine a run's imports alone can take seconds)."""
    study = parse_study_config(tiny_study(tmp_path, problems=["hangs", "newsvendor"], seeds=[1, 2],
                                          algorithms=[{"name": "erbo", "options": FAST}]))
    tasks = [dataclasses.replace(t, timeout_s=LIMIT_S if t.spec.problem == "hangs" else None)
             for t in make_tasks(study, study.runs) if t.spec.problem == "newsvendor" or t.spec.seed == 1]
    return sorted(tasks, key=lambda t: t.spec.problem != "hangs")


def _collect(outcomes, attempts: Path) -> tuple[dict[str, Outcome], float]:
    """The outcomes by run key, and the seconds from the hang's start to its verdict."""
    got, verdict_after = {}, None
    for outcome in outcomes:
        got[outcome.task.spec.run_key] = outcome
        if outcome.task.spec.problem == "hangs":
            verdict_after = time.time() - attempts.stat().st_mtime
    assert verdict_after is not None
    return got, verdict_after


def _check(got: dict[str, Outcome], verdict_after: float, tasks) -> None:
    print(f"verdict {verdict_after:.1f} s after the native call began")
    assert set(got) == {t.spec.run_key for t in tasks}
    [hung] = [o for o in got.values() if o.task.spec.problem == "hangs"]
    assert not hung.result.ok and hung.lost is None and hung.attempts == 1
    assert hung.result.error.endswith(f"timed out after {LIMIT_S:g} s (run_timeout_s)"), hung.result.error
    assert verdict_after < LIMIT_S + GRACE_S + SLACK_S  # the call would have held it 60 s
    others = [o for o in got.values() if o.task.spec.problem != "hangs"]
    assert all(o.result.ok and o.attempts == 1 for o in others), [(o.result.error, o.attempts) for o in others]


def test_the_pool_kills_a_run_hung_in_native_code_and_goes_on(tmp_path: Path, hanging) -> None:
    tasks = _tasks(tmp_path)
    got, verdict_after = _collect(map_tasks(tasks, "local", workers=2, run=hanging.run_registered),
                                  tmp_path / "attempts.log")
    _check(got, verdict_after, tasks)
    assert len((tmp_path / "attempts.log").read_text().split()) == 1  # ended once, not retried


def test_ray_cancels_a_run_hung_in_native_code_and_goes_on(tmp_path: Path, hanging, shared_ray: Path) -> None:
    """On the Ray the tests here share (conftest.py), whose workers log attempts in `shared_ray`."""
    tasks = _tasks(tmp_path)
    got, verdict_after = _collect(map_tasks(tasks, "ray", workers=2, run=hanging.run_registered), shared_ray)
    _check(got, verdict_after, tasks)
    assert len(shared_ray.read_text().split()) == 1
