"""FAILED or LOST, the same on Ray and on the local pool: a run past `run_timeout_s`, a task that
cannot be set up where it lands (an import) and a run killed for memory twice are FAILED with
their reason, once; only the infrastructure's loss is LOST. And the runner's own Ray listens on
127.0.0.1 only, and refuses, before any run, a run that no node of it can place."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import pytest

from tests.support.processes import descendants
from wdrbo_dist.execution import local, ray_backend
from wdrbo_dist.execution.backends import map_tasks
from wdrbo_dist.study.config import parse_study_config
from wdrbo_dist.driver.plan import make_tasks

from test_backends import FAST, tiny_study

QUICK_BACKOFF = (0.05, 0.05, 0.05)
# Imports in the driver; not where a task lands: not on a Ray worker's path, and refused in a pool process.
DRIVER_ONLY = """import multiprocessing
if multiprocessing.parent_process() is not None:
    raise ImportError("onlyhere is not installed on this worker")
from raising_problem import run_registered
def run(spec):
    return run_registered(spec)
"""


def _tasks(tmp_path: Path, problems: list[str], timeout_s: float | None = None):
    study = parse_study_config(tiny_study(tmp_path, problems=problems, seeds=[1],
                                          algorithms=[{"name": "erbo", "options": FAST}]))
    return [dataclasses.replace(t, timeout_s=timeout_s if t.spec.problem == "sleeps" else None)
            for t in make_tasks(study, study.runs)]


@pytest.fixture
def test_problems(tmp_path: Path, monkeypatch):
    """This folder's problems registered here and where tasks land; the driver-only module."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import raising_problem

    from wdrbo_dist.problems import PROBLEMS

    for name in ("sleeps", "hogs", "raises", "dies"):
        monkeypatch.setitem(PROBLEMS, name, getattr(raising_problem, {
            "sleeps": "SleepingProblem", "hogs": "MemoryHogProblem", "raises": "RaisingProblem",
            "dies": "DyingProblem"}[name]))
    (tmp_path / "driver_only").mkdir()
    (tmp_path / "driver_only" / "onlyhere.py").write_text(DRIVER_ONLY)
    monkeypatch.syspath_prepend(str(tmp_path / "driver_only"))
    monkeypatch.setenv(raising_problem.ATTEMPTS_ENV, str(tmp_path / "attempts.log"))
    return raising_problem


def _listening_addresses(root: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp* writes them) that processes under `root` listen on."""
    tree = descendants(root) | {root}
    sockets = set()
    for pid in tree:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    sockets.add(target[8:-1])
        except OSError:
            continue
    return [fields[1].rsplit(":", 1)[0] for name in ("tcp", "tcp6")
            for fields in (line.split() for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:])
            if fields[3] == "0A" and fields[9] in sockets]  # 0A: LISTEN


LOOPBACK = ("0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000")


def test_on_ray_a_timed_out_run_or_a_task_that_cannot_be_set_up_is_failed_once(
    tmp_path: Path, test_problems, monkeypatch, shared_ray
) -> None:
    """On the Ray the tests here share (conftest.py): its workers have this folder's problems,
    and not the driver-only module."""
    monkeypatch.setattr(ray_backend, "RESUBMIT_DELAYS_S", QUICK_BACKOFF)
    tasks = _tasks(tmp_path, ["sleeps", "newsvendor"], timeout_s=3)
    started = time.monotonic()
    timed = {o.task.spec.problem: o for o in map_tasks(tasks, "ray", workers=1, run=test_problems.run_registered)}
    took = time.monotonic() - started
    import onlyhere

    unset = list(map_tasks(tasks[1:], "ray", workers=1, run=onlyhere.run))
    slept = timed["sleeps"]
    assert not slept.result.ok and slept.lost is None and slept.attempts == 1
    assert slept.result.error.strip().endswith("timed out after 3 s (run_timeout_s)"), slept.result.error
    # The worker was freed: the other run came after it on the one slot, long before the sleep's 600 s.
    assert timed["newsvendor"].result.ok and took < 300
    [outcome] = unset
    assert not outcome.result.ok and outcome.lost is None and outcome.attempts == 1
    assert "could not be set up" in outcome.result.error and "No module named 'onlyhere'" in outcome.result.error


def test_the_runners_own_ray_listens_on_127_0_0_1_only_and_refuses_a_run_no_node_fits(tmp_path: Path, own_ray) -> None:
    import ray

    study = parse_study_config(tiny_study(tmp_path, algorithms=[
        {"name": "erbo", "options": FAST}, {"name": "gp-ucb", "options": FAST, "resources": {"num_gpus": 1000}}]))
    try:
        with pytest.raises(ray_backend.ResourcesUnfit) as refused:
            ray_backend.check_resources(make_tasks(study, study.runs), workers=2)
        assert str(refused.value).startswith("algorithm gp-ucb: resources.num_gpus 1000 (the largest node has ")
        assert "\n" not in str(refused.value)
        assert [node["NodeManagerAddress"] for node in ray.nodes()] == ["127.0.0.1"]
        addresses = _listening_addresses(os.getpid())
        assert addresses and all(address in LOOPBACK for address in addresses), addresses
        # What fits is let through, on the Ray already started.
        ray_backend.check_resources(make_tasks(study, [r for r in study.runs if r.algorithm == "erbo"]), workers=2)
    finally:
        ray.shutdown()
        ray_backend._owned = False


def test_the_local_pool_gives_the_same_verdicts(tmp_path: Path, test_problems, monkeypatch) -> None:
    monkeypatch.setattr(local, "RESUBMIT_DELAYS_S", QUICK_BACKOFF)
    tasks = _tasks(tmp_path, ["sleeps", "newsvendor"], timeout_s=3)
    timed = {o.task.spec.problem: o for o in map_tasks(tasks, "local", workers=1, run=test_problems.run_registered)}
    assert not timed["sleeps"].result.ok and timed["sleeps"].lost is None and timed["sleeps"].attempts == 1
    assert timed["sleeps"].result.error.strip().endswith("timed out after 3 s (run_timeout_s)")
    assert timed["newsvendor"].result.ok, timed["newsvendor"].result.error
    import onlyhere

    [unset] = list(map_tasks(tasks[1:], "local", workers=1, run=onlyhere.run))
    assert not unset.result.ok and unset.lost is None and unset.attempts == 1
    assert "could not be set up" in unset.result.error and "onlyhere is not installed" in unset.result.error

    # The kernel kills the run's process for memory (a SIGKILL while its OOM count rises), twice.
    attempts, oom_kills, stop = tmp_path / "attempts.log", [0], threading.Event()
    attempts.unlink(missing_ok=True)
    monkeypatch.setattr(local, "_memory_kills_so_far", lambda: oom_kills[0])

    def oom_killer() -> None:
        killed: set[str] = set()
        while not stop.is_set():
            for pid in (attempts.read_text().split() if attempts.exists() else []):
                if pid not in killed:
                    killed.add(pid)
                    oom_kills[0] += 1
                    os.kill(int(pid), 9)  # a pool process of this test, running the run
            time.sleep(0.05)

    killer = threading.Thread(target=oom_killer, daemon=True)
    killer.start()
    try:
        [hog] = list(map_tasks(_tasks(tmp_path, ["sleeps"]), "local", workers=1, run=test_problems.run_registered))
    finally:
        stop.set()
        killer.join()
    assert not hog.result.ok and hog.lost is None and hog.attempts == 2
    assert "killed this run's process for memory 2 times" in hog.result.error


def _memory_used() -> float:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return 1 - int(info["MemAvailable"].split()[0]) / int(info["MemTotal"].split()[0])


MARGIN_GIB = 2.0  # Ray's threshold above what the machine uses when the test starts


def test_on_ray_a_run_killed_for_memory_twice_is_failed_not_lost(tmp_path: Path, monkeypatch, own_ray) -> None:
    """Ray's own memory monitor kills the run's worker, twice. Its threshold is the machine's, so
    other work moves it: the run takes memory until it is killed (memory freed elsewhere cannot
    keep it below), the threshold is 2 GiB above what the machine used at the start (memory taken
    elsewhere seldom reaches it), and the next attempt starts 2 s after a kill (the killed run's
    memory is back by then). Other work that takes the machine past the threshold all the same
    gets the run killed before it counted its attempt: the verdict counts Ray's kills, the run's
    own log only that no third attempt ran (Ray retried none: RAY_task_oom_retries 0)."""
    import ray

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import hog_problem

    from wdrbo_dist.problems import PROBLEMS

    total_gib = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    threshold = _memory_used() + MARGIN_GIB / total_gib
    if threshold > 0.95 or hog_problem.available_gib() < MARGIN_GIB + hog_problem.KEEP_FREE_GIB + 1:
        pytest.skip(f"needs {MARGIN_GIB + hog_problem.KEEP_FREE_GIB + 1:g} GiB of free memory")
    monkeypatch.setitem(PROBLEMS, "grows", hog_problem.GrowingProblem)
    monkeypatch.setenv("RAY_memory_usage_threshold", f"{threshold:.4f}")
    monkeypatch.setenv("RAY_memory_monitor_refresh_ms", "100")
    monkeypatch.setattr(ray_backend, "RESUBMIT_DELAYS_S", (2.0, 2.0, 2.0))
    monkeypatch.setenv("RAY_task_oom_retries", "0")  # as the runner sets it before it starts Ray
    attempts = tmp_path / "attempts.log"
    here = str(Path(__file__).parent)
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", runtime_env={
        "env_vars": {"PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
                     "WDRBO_TEST_ATTEMPTS": str(attempts)},
        "worker_process_setup_hook": "hog_problem.register",
    })
    try:
        [hog] = list(map_tasks(_tasks(tmp_path, ["grows"]), "ray", workers=1, run=hog_problem.run_registered))
    finally:
        ray.shutdown()
    assert not hog.result.ok and hog.lost is None and hog.attempts == 2, (hog.lost, hog.result.error)
    assert "Ray killed this run's worker for memory 2 times" in hog.result.error
    pids = attempts.read_text().split() if attempts.exists() else []
    print(f"attempts that counted themselves: {len(pids)}")
    assert len(pids) <= 2, pids
