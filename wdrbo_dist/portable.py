"""Records that do not depend on the CPU they were computed on.

NumPy picks its exp and log kernels by CPU when it is imported: on a CPU with AVX-512 its own
vectorised ones, elsewhere the C library's, and the two differ in the last bit (195 of 4,001
exps on [-20, 0] on an AMD EPYC with AVX-512). The GP fit runs on NumPy, so one run gave
other records on an AVX-512 machine than on an AVX2 one: 1e-13 apart from the first BO step,
and a 25-evaluation run's trajectory parted. With NumPy's AVX-512 kernels off, the records of
both machines are the same to the bit (`tests/test_pinned_records.py`, made on AVX2, passes on
AVX-512). NumPy reads `NPY_DISABLE_CPU_FEATURES` once, at its import, so this module imports
nothing heavy: the package sets the variable when it is imported (`set_portable_environment`),
which comes first in the CLI, in local pool processes and in Ray workers (they import the
package to unpickle a task, before NumPy: tests/test_portable.py), and `check_portable` warns
in a process where NumPy came first (a notebook that imported it, say).
"""

from __future__ import annotations

import os
import warnings

# NumPy 2.4's names of its AVX-512 dispatch targets (one not on the CPU is ignored).
PORTABLE_ENVIRONMENT = {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}
_checked: bool | None = None


def set_portable_environment() -> None:
    """Set each portable variable the user has not set (before NumPy's import, to count)."""
    for name, value in PORTABLE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def numpy_is_portable() -> bool:
    """Does NumPy's exp agree with the C library's, bit for bit, on a probe of 4,001 points?"""
    import math

    import numpy as np

    probe = np.linspace(-20.0, 0.0, 4001)
    return bool(np.array_equal(np.exp(probe), np.array([math.exp(v) for v in probe.tolist()])))


def check_portable() -> bool:
    """Warn once per process when NumPy's kernels here are not the portable ones."""
    global _checked
    if _checked is None:
        _checked = numpy_is_portable()
        if not _checked:
            names = " ".join(f"{k}='{v}'" for k, v in PORTABLE_ENVIRONMENT.items())
            warnings.warn(
                "NumPy was imported with its AVX-512 kernels before wdrbo_dist could turn them off: "
                "records of this process may differ in the last digits from other machines'. "
                f"Import wdrbo_dist before NumPy, or set {names}", RuntimeWarning, stacklevel=2,
            )
    return _checked
