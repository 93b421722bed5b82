"""The backends are interchangeable: the same tiny study gives the same records on each."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import yaml

from wdrbo_dist.execution.backends import map_tasks
from wdrbo_dist.run.records import deterministic_part
from wdrbo_dist.study.config import parse_study_config
from wdrbo_dist.problems import PROBLEMS
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.driver.plan import make_tasks
from wdrbo_dist.driver.study import run_captured, run_study

CLI = str(Path(sys.executable).with_name("wdrbo-dist"))
FAST = {"raw_samples": 32, "num_restarts": 2}


def tiny_study(output_dir: Path, name: str = "tiny", **changes) -> dict:
    return {
        "name": name, "problems": ["three-hump-camel", "newsvendor"],
        "algorithms": [{"name": "erbo", "options": FAST}, {"name": "gp-ucb", "options": FAST}],
        "seeds": [3], "evaluations": 7, "init_size": 5, "backend": "serial", "workers": 2,
        "tracking_uri": "none", "output_dir": str(output_dir),
    } | changes


def test_serial_local_and_ray_give_identical_records(tmp_path: Path) -> None:
    data = tiny_study(tmp_path / "serial")
    serial = parse_study_config(data)
    assert run_study(serial).exit_code == 0
    local = parse_study_config(data | {"output_dir": str(tmp_path / "local")})
    assert run_study(local, backend="local", workers=2).exit_code == 0
    # Ray as a user starts it: the command line, a local Ray of its own (token auth, the token
    # in the environment so that nothing is written to ~/.ray).
    config = tmp_path / "ray.yaml"
    config.write_text(yaml.safe_dump(data | {"output_dir": str(tmp_path / "ray"),
                                             "tracking_uri": f"sqlite:///{tmp_path}/mlflow.db"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
    out = subprocess.run([CLI, "run", str(config), "--backend", "ray", "--workers", "2", "--quiet"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    # The terminal holds our lines only: Ray's and MLflow's notices are in the log it names.
    assert "Token authentication" not in out.stderr and "mlflow.store" not in out.stderr, out.stderr
    log = Path(out.stderr.splitlines()[-1].removeprefix("library messages (Ray, MLflow): "))
    assert log.parent == tmp_path / "ray" / "logs"
    assert "INFO mlflow.store.db.utils: Creating initial MLflow database tables" in log.read_text()
    stores = [ResultStore(tmp_path / name) for name in ("serial", "local", "ray")]
    keys = {r.run_key for r in serial.runs}
    assert all(store.finished_keys() == keys for store in stores)
    for key in keys:
        first = deterministic_part(stores[0].read_records(key))
        assert len(first) == 7
        for other in stores[1:]:
            pd.testing.assert_frame_equal(first, deterministic_part(other.read_records(key)), check_exact=True)


def test_tasks_start_longest_expected_first() -> None:
    study = parse_study_config(tiny_study(Path("unused"), algorithms=["gp-ucb", "erbo", "wdrbo"], evaluations=9))
    order = [t.spec.algorithm for t in make_tasks(study, study.runs)]
    assert order == ["wdrbo", "wdrbo", "erbo", "erbo", "gp-ucb", "gp-ucb"]


def _pool_children() -> list[int]:
    """This process's spawned pool workers, from /proc."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == me and b"spawn_main" in cmdline:
                found.append(int(entry.name))
    return found


def _kill_a_busy_pool_process(killed: list[str]) -> threading.Thread:
    """A thread that SIGKILLs one process of this test's pool half a second into the task it took
    (a pool process names that task's run key in a mark file named by its pid), once; the run key
    goes into `killed`."""

    def kill() -> None:
        deadline = time.monotonic() + 60
        while not killed and time.monotonic() < deadline:
            for mark in Path(tempfile.gettempdir()).glob("wdrbo-pool-*/*"):
                if int(mark.name) in _pool_children():
                    time.sleep(0.5)  # into its run
                    killed.append(mark.read_text())
                    os.kill(int(mark.name), signal.SIGKILL)  # a process of the pool this test started
                    break
            time.sleep(0.05)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def _short_run(spec):
    """A run of 5 ms that says when it started (picklable: the pool's processes import it)."""
    from wdrbo_dist.run.spec import RunResult

    started = time.time()
    time.sleep(0.005)
    return RunResult(spec=spec, status="FINISHED", records=pd.DataFrame({"step": [0]}), started_at=started)


def test_pool_processes_keep_running_while_the_driver_is_busy_elsewhere(tmp_path: Path) -> None:
    # The driver pauses now and then (a compaction, an MLflow batch: half a second at 10^5 short
    # runs); the tasks waiting in the pool keep its processes busy meanwhile.
    study = parse_study_config(tiny_study(tmp_path, seeds=list(range(40))))  # 160 runs
    outcomes = map_tasks(make_tasks(study, study.runs), "local", workers=2, run=_short_run)
    first = next(outcomes)
    paused_at = time.time()
    time.sleep(1.0)
    resumed_at = time.time()
    rest = list(outcomes)
    assert all(o.result.ok for o in [first, *rest]) and len(rest) == len(study.runs) - 1
    during = [o for o in rest if paused_at <= o.result.started_at <= resumed_at]
    assert len(during) >= 40, f"{len(during)} runs started while the driver was busy"


def test_a_killed_pool_process_is_retried_in_a_new_pool(tmp_path: Path) -> None:
    study = parse_study_config(tiny_study(tmp_path, evaluations=9, seeds=[1, 2]))
    tasks = make_tasks(study, study.runs)
    killed: list[str] = []
    killer = _kill_a_busy_pool_process(killed)
    outcomes = list(map_tasks(tasks, "local", workers=2, run=run_captured))
    killer.join()
    assert killed
    assert sorted(o.task.spec.run_key for o in outcomes) == sorted(t.spec.run_key for t in tasks)
    assert all(o.result.ok for o in outcomes), [o.result.error for o in outcomes if not o.result.ok]
    assert max(o.attempts for o in outcomes) == 2
    assert _pool_children() == []  # the pools are gone


def test_a_task_waiting_in_a_pool_that_breaks_is_not_charged_an_attempt(tmp_path: Path) -> None:
    """One process, two tasks handed to it: the process dies in the first run; the second, not
    yet taken, goes back to the queue as it was and finishes at its first attempt."""
    study = parse_study_config(tiny_study(tmp_path, evaluations=9, seeds=[1, 2]))
    tasks = make_tasks(study, study.runs)
    killed: list[str] = []
    killer = _kill_a_busy_pool_process(killed)
    outcomes = {o.task.spec.run_key: o for o in map_tasks(tasks, "local", workers=1, run=run_captured)}
    killer.join()
    assert killed and set(outcomes) == {t.spec.run_key for t in tasks}
    assert all(o.result.ok for o in outcomes.values())
    assert {key: o.attempts for key, o in outcomes.items()} == {key: 2 if key == killed[0] else 1 for key in outcomes}


def test_ray_records_a_raising_run_as_failed_once_and_does_not_retry_it(
    tmp_path: Path, monkeypatch, shared_ray: Path
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from raising_problem import ATTEMPTS_ENV, RaisingProblem

    # The local Ray on 127.0.0.1 the tests here share, with token auth (conftest.py); its
    # workers count their attempts in `shared_ray`, and so would a run in this process.
    attempts = shared_ray
    monkeypatch.setenv(ATTEMPTS_ENV, str(attempts))
    monkeypatch.setitem(PROBLEMS, "raises", RaisingProblem)  # here, for the config; workers: the hook
    study = parse_study_config(tiny_study(tmp_path, problems=["raises", "newsvendor"], seeds=[1, 2],
                                          algorithms=[{"name": "erbo", "options": FAST}]))
    tasks = make_tasks(study, study.runs)
    outcomes = list(map_tasks(tasks, "ray", workers=2, run=run_captured))
    failed = [o for o in outcomes if not o.result.ok]
    assert sorted(o.task.spec.problem for o in failed) == ["raises", "raises"]
    assert all("FloatingPointError: the truth is not available today" in (o.result.error or "") for o in failed)
    assert all(o.attempts == 1 for o in outcomes)
    assert all(o.result.ok for o in outcomes if o.task.spec.problem == "newsvendor")
    # Each raising run was tried exactly once, in a Ray worker (not in this process): every
    # worker that met the cell warmed it up once (one truth call, run/loop.warm_up), then each of
    # the 2 runs made one; a retry would add a call.
    pids = attempts.read_text().split()
    assert len(pids) == len(set(pids)) + 2 and str(os.getpid()) not in pids


def _thread_pools(_: int) -> tuple[int, list[tuple[str, int]]]:
    import threadpoolctl
    import torch

    return torch.get_num_threads(), sorted((p["internal_api"], p["num_threads"]) for p in threadpoolctl.threadpool_info())


def test_pool_processes_start_with_single_thread_openmp_and_blas(monkeypatch) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from wdrbo_dist.execution.local import _thread_environment
    from wdrbo_dist.execution.threads import THREAD_VARIABLES

    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with _thread_environment(1):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            torch_threads, pools = pool.submit(_thread_pools, 0).result()
    assert torch_threads == 1 and pools and all(threads == 1 for _, threads in pools)
    assert all(name not in os.environ for name in THREAD_VARIABLES)  # the driver's own env is restored


def test_ray_without_an_address_starts_its_own_ray_whatever_a_ray_start_recorded(tmp_path: Path) -> None:
    """A `ray start` records its head in Ray's temp folder; `--backend ray` without `--address`
    must not attach to it. Here the recorded head is dead (as after a crash): ray.init used to
    try it and fail with "num_cpus and num_gpus must not be provided"."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths are limited
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9\n")  # nothing listens there
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(ray_tmp)}
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(tiny_study(tmp_path / "out", backend="ray", workers=1, seeds=[3],
                                                problems=["three-hump-camel"],
                                                algorithms=[{"name": "gp-ucb", "options": FAST}])))
    try:
        done = subprocess.run([CLI, "run", str(config), "--quiet"], env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(ResultStore(tmp_path / "out").finished_keys()) == 1
