"""Records do not depend on the CPU: NumPy's AVX-512 kernels are off wherever a run executes.

The pinned records (made on an AVX2 machine) are the end-to-end check on an AVX-512 one; these
tests pin the parts: the package's import, a process where NumPy came first, and a Ray node
that was started without the setting (as `ray start` on a cluster node is).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from wdrbo_dist.portable import PORTABLE_ENVIRONMENT, numpy_is_portable
from wdrbo_dist.records import deterministic_part
from wdrbo_dist.run import RunSpec

AVX512 = bool(getattr(np._core._multiarray_umath, "__cpu_features__", {}).get("AVX512F"))


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_ENVIRONMENT}
    return subprocess.run([sys.executable, "-W", "always", "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


def test_importing_the_package_first_gives_numpy_the_c_librarys_exp() -> None:
    out = _python("import wdrbo_dist, numpy, os; from wdrbo_dist.portable import numpy_is_portable; "
                  "print(numpy_is_portable(), os.environ['NPY_DISABLE_CPU_FEATURES'])")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "True"
    assert numpy_is_portable()  # this test process too (tests/conftest.py)


@pytest.mark.skipif(not AVX512, reason="NumPy's AVX-512 kernels exist only on a CPU with AVX-512")
def test_numpy_imported_before_the_package_is_caught_with_a_warning() -> None:
    out = _python("import numpy; from wdrbo_dist.portable import check_portable; print(check_portable())")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]
    assert "RuntimeWarning: NumPy was imported with its AVX-512 kernels" in out.stderr
    assert "NPY_DISABLE_CPU_FEATURES=" in out.stderr


def test_a_ray_node_started_without_the_setting_gives_the_records_of_this_process(monkeypatch) -> None:
    import ray

    from wdrbo_dist.backends import map_tasks
    from wdrbo_dist.backends.task import Task

    spec = RunSpec.make(algorithm="erbo", problem="three-hump-camel", seed=4, evaluations=7, init_size=5,
                        options={"raw_samples": 32, "num_restarts": 2})
    (here,) = [o.result for o in map_tasks([Task(spec=spec)], "serial", workers=1)]  # one thread, as on Ray
    for name in PORTABLE_ENVIRONMENT:  # the node's processes start without it
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        (outcome,) = list(map_tasks([Task(spec=spec)], "ray", workers=1))
    finally:
        ray.shutdown()
    assert outcome.result.ok, outcome.result.error
    pd.testing.assert_frame_equal(deterministic_part(outcome.result.records), deterministic_part(here.records),
                                  check_exact=True)
