"""Ray in these tests keeps token authentication on: one token per test process, in the
environment before Ray is imported (Ray's token loader keeps the first token it reads), so
nothing is written to ~/.ray and every Ray started here and its workers use it.

The tests that leave a Ray whole share one (`shared_ray`) instead of starting and stopping one
each; a test that needs a Ray of its own in this process asks for `own_ray` first."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))

HERE = Path(__file__).parent
_shared: dict[str, Path] = {}  # "attempts": its attempts log, while the shared Ray is up


@pytest.fixture
def shared_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local Ray in this process, shared by the tests of this folder that leave it whole: 2 CPUs
    on 127.0.0.1, whose workers register every problem of this folder (a worker process setup
    hook) and append each attempt to the log yielded, emptied for each test. It is shut down by
    the next test that starts a Ray of its own here (`own_ray`) or after this folder's last test."""
    import ray

    from raising_problem import ATTEMPTS_ENV

    if "attempts" not in _shared:
        assert not ray.is_initialized(), "a Ray a test started is still up"
        attempts = tmp_path_factory.mktemp("shared-ray") / "attempts.log"
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", runtime_env={
            "env_vars": {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
                         ATTEMPTS_ENV: str(attempts)},
            "worker_process_setup_hook": "raising_problem.register_every_problem",
        })
        _shared["attempts"] = attempts
    _shared["attempts"].write_text("")
    yield _shared["attempts"]


def _stop_shared_ray() -> None:
    if _shared.pop("attempts", None) is not None:
        import ray

        ray.shutdown()


@pytest.fixture
def own_ray() -> None:
    """For a test that starts a Ray of its own in this process (which would otherwise find the
    shared one up and use it): the shared Ray is shut down first."""
    _stop_shared_ray()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The shared Ray ends with the last test of this folder, before tests elsewhere run."""
    if nextitem is None or Path(nextitem.path).parent != HERE:
        _stop_shared_ray()
