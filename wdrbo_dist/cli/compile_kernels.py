"""Compile the package's numba kernels ahead of the first run (`make install` calls this).

numba compiles a kernel at its first call and caches the machine code beside its module
(`cache=True`, keyed by the source and this CPU): on 2 cores mmd_ipm.py takes ~22 s and
ucb_kernels.py ~12 s, once per machine, which would otherwise land in a user's first run of
an algorithm that takes them (or in the test that happens to run first). A short real run of
each kernel's caller compiles exactly the signatures a study calls; a later process only loads
them.

    .venv/bin/python -m wdrbo_dist.cli.compile_kernels
"""

from __future__ import annotations

import time

from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.run.loop import run_one

# (algorithm, evaluations) on Three-Hump Camel, paper profile: the first run reaches mmd_ipm's
# solver and the pair kernels over fixed contexts (DRBO-MMD's grid; DRBO-KDE's samples and the
# minimax's grid call the same), the second ucb_kernels.py's mean-term kernel (ERBO's and WDRBO's
# Adam steps), the third the values over fresh contexts (DRBO-KDE's minimum), the fourth the
# minimum over fresh contexts with its gradient (StableOpt's Adam steps), the fifth GP-UCB's
# posterior kernel, the sixth the minimax's closed form (acquisition/mmd_minimax_kernel.py);
# every run compiles the scrambled Sobol draw (acquisition/sobol_kernel.py).
KERNEL_RUNS = (("drbo-mmd", 6), ("wdrbo", 6), ("drbo-kde", 6), ("stableopt", 6), ("gp-ucb", 6),
               ("drbo-mmd-minimax", 6))


def compile_kernels() -> None:
    for algorithm, evaluations in KERNEL_RUNS:
        started = time.perf_counter()
        spec = RunSpec(algorithm=algorithm, problem="three-hump-camel", seed=0, evaluations=evaluations,
                       init_size=5, fidelity="paper", options=(("num_restarts", 2), ("raw_samples", 64)))
        result = run_one(spec)
        if not result.ok:
            raise RuntimeError(f"compiling the kernels {algorithm} takes failed:\n{result.error}")
        print(f"compiled the kernels {algorithm} takes ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    compile_kernels()
