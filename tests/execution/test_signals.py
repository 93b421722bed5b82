"""A driver ended by a signal: SIGTERM (Slurm, Kubernetes, `ray job stop`) is taken like Ctrl-C,
and a driver that dies of any signal, SIGKILL included, leaves no pool process nor its folder."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.support.processes import descendants, living
from wdrbo_dist.storage.store import ResultStore

CLI = str(Path(sys.executable).with_name("wdrbo-dist"))
FAST = {"raw_samples": 32, "num_restarts": 2}
SUMMARY = re.compile(r"^study signals: (\d+) runs; this command: (\d+) finished, (\d+) failed", re.M)


def _study(tmp_path: Path, backend: str, name: str = "signals") -> tuple[Path, ResultStore]:
    """Twelve runs of a few seconds each: long enough to be signalled in the middle."""
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": name, "problems": ["newsvendor", "three-hump-camel"], "algorithms": [{"name": "gp-ucb", "options": FAST}],
        "seeds": [1, 2, 3, 4, 5, 6], "evaluations": 12, "init_size": 5, "backend": backend, "workers": 2,
        "tracking_uri": "none", "output_dir": str(tmp_path / "out"),
    }))
    return config, ResultStore(tmp_path / "out")


def _start(config: Path) -> subprocess.Popen:
    """The driver, in a group of its own; a Ray it starts has token auth (nothing written to ~/.ray)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16), PYTHONFAULTHANDLER="1")
    return subprocess.Popen([CLI, "run", str(config), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env=env)


def _group(pgid: int) -> list[str]:
    """The processes of group `pgid`: pid, parent, state and command line (for a failure's message)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:120].decode(errors="replace")
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid:
                found.append(f"{entry.name} parent {fields[1]} {fields[0]} {command}")
    return found


def _ended(driver: subprocess.Popen, timeout_s: float = 60) -> str:
    """The driver's output once it and every process holding its output have ended; on a timeout,
    fails with what is left of its group (and the driver's threads, which faulthandler writes)."""
    try:
        return driver.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        left = _group(driver.pid)
        if driver.poll() is None:
            os.kill(driver.pid, signal.SIGABRT)  # faulthandler writes each thread's stack
            time.sleep(2)
        try:
            os.killpg(driver.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        output = driver.communicate()[0]
        raise AssertionError(f"not ended after {timeout_s} s; left: {left}\n{output[-6000:]}") from None


def _wait_finished(store: ResultStore, count: int, driver: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while len(store.finished_keys()) < count:
        assert driver.poll() is None, driver.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.1)


def _alive(pids: set[int]) -> set[int]:
    return pids & set(living())


def _gone_within(pids: set[int], seconds: float) -> float:
    """Seconds until none of `pids` runs any more; fails past `seconds`."""
    started = time.monotonic()
    while _alive(pids):
        assert time.monotonic() - started < seconds, f"still alive after {seconds} s: {sorted(_alive(pids))}"
        time.sleep(0.1)
    return time.monotonic() - started


def _pool_folders(pid: int) -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"wdrbo-pool-{pid}-*"))


@pytest.mark.parametrize("backend", ["serial", "local", "ray"])
def test_sigterm_ends_a_study_like_ctrl_c(tmp_path: Path, backend: str) -> None:
    """SIGTERM to the driver alone (as Kubernetes sends it; on `local`, to the whole group, pool
    processes too, as Slurm's scancel sends it): the runs in flight are cancelled, the finished
    ones stored, the summary printed, exit 143 (128 + SIGTERM); nothing is left running.
    (On Ray the driver takes SIGTERM back from `ray.init`, which makes it `sys.exit(15)`.)"""
    config, store = _study(tmp_path, backend)
    driver = _start(config)
    try:
        _wait_finished(store, 1, driver)
        children = descendants(driver.pid)
        if backend == "local":
            os.killpg(driver.pid, signal.SIGTERM)
        else:
            driver.send_signal(signal.SIGTERM)
        output = _ended(driver)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)  # only the group this test started
    print(output)
    assert driver.returncode == 143, output[-3000:]
    summary = SUMMARY.search(output)
    assert summary, output[-3000:]
    assert "interrupted:" in output and "run the same command again" in output
    runs, finished, failed = int(summary[1]), int(summary[2]), int(summary[3])
    assert 1 <= finished < runs and failed == 0  # the run the signal cut short is not done, not FAILED
    assert len(store.finished_keys()) == finished  # every run it counted finished is in the store
    _gone_within(children, 10)
    assert _pool_folders(driver.pid) == []


def _run_that_takes_the_signal_as_its_error(spec):
    """A serial run in which SIGTERM arrives and is swallowed into a FAILED result, as numba turns
    a KeyboardInterrupt raised inside it into a SystemError that the run records."""
    from wdrbo_dist.run.spec import RunResult

    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except BaseException as exc:  # noqa: BLE001 - what the run's own error handling does
        return RunResult(spec=spec, status="FAILED", error=f"SystemError: {exc!r}")
    return RunResult(spec=spec, status="FINISHED")


@pytest.fixture()
def sigterm_default():
    """SIGTERM as a process starts with it (a Ray started in this test process made it `sys.exit`)."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_serial_run_that_swallowed_the_signal_is_not_failed(tmp_path: Path, sigterm_default) -> None:
    from wdrbo_dist.cli.ctrl_c import CtrlC
    from wdrbo_dist.driver.study import run_study
    from wdrbo_dist.study.config import load_study_config

    config, store = _study(tmp_path, "serial")
    ctrl_c = CtrlC()
    report = run_study(load_study_config(config), ctrl_c=ctrl_c, run=_run_that_takes_the_signal_as_its_error)
    assert report.interrupted and ctrl_c.exit_code(report.exit_code) == 143
    assert report.failed == [] and report.finished == [], [r.error for r in report.failed]
    assert not (tmp_path / "out" / "failed").exists() or not any((tmp_path / "out" / "failed").iterdir())


def _killed_mid_study(config: Path, store: ResultStore, how: signal.Signals):  # type: ignore[no-untyped-def]
    """Start a driver, send it `how` once a run is stored (its pool folder, if local, named by
    its pid first), and wait for what it started to end: (the driver, its processes, seconds)."""
    driver = _start(config)
    try:
        _wait_finished(store, 1, driver)
        children = descendants(driver.pid)
        if yaml.safe_load(config.read_text())["backend"] == "local":
            assert _pool_folders(driver.pid), "the pool's folder is named by its driver's pid"
        os.kill(driver.pid, how)
        driver.wait(timeout=60)
        took = _gone_within(children, 10)
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        driver.communicate()
    return driver, children, took


@pytest.mark.parametrize("how", [signal.SIGKILL])  # SIGTERM: test_sigterm_ends_a_study_like_ctrl_c
def test_the_pool_of_a_killed_local_driver_ends_with_it(tmp_path: Path, how: signal.Signals) -> None:
    """SIGKILL (or SIGTERM to the driver alone, as `kill PID` sends it) mid-study: within seconds
    no process the driver started runs, and no pool folder of that driver is left."""
    config, store = _study(tmp_path, "local")
    driver, children, took = _killed_mid_study(config, store, how)
    assert len(children) >= 2, children  # the two pool processes (and multiprocessing's tracker)
    print(f"{how.name}: the driver's processes were gone {took:.1f} s after it")
    if how == signal.SIGKILL:
        # Its folder stays until the next pool starts (nothing runs in a process killed so), which removes it.
        again = _start(config)
        try:
            deadline = time.monotonic() + 120
            while not _pool_folders(again.pid):
                assert again.poll() is None and time.monotonic() < deadline, again.communicate()[0][-3000:]
                time.sleep(0.1)
            again.send_signal(signal.SIGTERM)
            _ended(again)
        finally:
            if again.poll() is None:
                os.killpg(again.pid, signal.SIGKILL)
                again.communicate()
        assert _pool_folders(again.pid) == []
    assert _pool_folders(driver.pid) == []


def test_a_killed_driver_leaves_no_process_of_its_own_ray(tmp_path: Path) -> None:
    """SIGKILL of a driver that started a Ray of its own: Ray ends its GCS, raylet and workers
    with the driver; the runner's reaper ends the raylet's agents too (they wait a minute on the
    dead GCS otherwise)."""
    config, store = _study(tmp_path, "ray")
    _, children, took = _killed_mid_study(config, store, signal.SIGKILL)
    print(f"the {len(children)} processes of the driver's Ray were gone {took:.1f} s after it")
