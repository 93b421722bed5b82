"""The environment variables that size OpenMP and BLAS thread pools, in one place.

They are read once, when NumPy or torch is first imported, so this module imports neither:
the CLI, the benchmarks and the local backend set them before those imports happen.
"""

from __future__ import annotations

import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def default_thread_environment(threads: int = 1) -> None:
    """Set every thread variable the user has not set to `threads`."""
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(threads))
