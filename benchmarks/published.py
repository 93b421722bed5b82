"""The published WDRBO code (frmicheli/WDRBO, commit 75f891a) as the fidelity benchmarks see it.

It is neither a dependency nor vendored: the benchmarks take the path of an unmodified checkout
and of a virtual environment it runs in, start its `main.py` as a subprocess and read the
pickles it writes. Set-up (once, outside the project):

    git -C <mirror> archive 75f891a | tar -x -C /scratch/published
    python3 -m venv /scratch/published/venv
    /scratch/published/venv/bin/pip install "torch==2.13.0" botorch==0.13.0 gpytorch==1.14 \\
        linear-operator==0.6 cvxpy==1.6.3 clarabel==0.10.0 scs==3.2.7.post2 numpy==2.2.3 scipy==1.15.2

(its requirements.txt pins these; the CPU build of torch 2.13.0 works with them).
"""

from __future__ import annotations

import os
import pickle
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Our names -> the published CLI's (`--Optimizer`, `--TestProblem`), spec section 0.
ALGORITHMS = {
    "wdrbo": "WassersteinUCB",
    "erbo": "EmpiricalUCB",
    "gp-ucb": "UCB",
    "sbo-kde": "SBOKDE",
    "drbo-kde": "DRBOKDE",
    "drbo-mmd": "MMD",
    "drbo-mmd-minimax": "MMD_Minimax_Approx",
    "stableopt": "Stable",
}
PROBLEMS = {
    "ackley": "Ackley",
    "hartmann": "Hartmann",
    "modified-branin": "Modified_Branin",
    "newsvendor": "Continuous_Vendor",
    "portfolio-uniform": "portfolio_optimization",
    "portfolio-normal": "portfolio_normal_optimization",
    "three-hump-camel": "ThreeHumpCamel",
    "six-hump-camel": "SixHumpCamel",
}
THREAD_ENV = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


@dataclass(frozen=True)
class PublishedCode:
    """An unmodified checkout of the published code and the Python of its virtual environment."""

    folder: Path
    python: Path

    @staticmethod
    def at(folder: str, python: str | None = None) -> "PublishedCode":
        root = Path(folder).resolve()
        interpreter = Path(python) if python else root / "venv" / "bin" / "python"
        if not (root / "main.py").is_file():
            raise ValueError(f"--published: no main.py in {root}")
        if not interpreter.is_file():
            raise ValueError(f"--published-python: {interpreter} does not exist")
        return PublishedCode(root, interpreter)


@dataclass(frozen=True)
class PublishedRun:
    """One run of `main.py --init_size I --running_rounds T --repeat 1 --start_seed S`."""

    algorithm: str  # our name
    problem: str  # our name
    seed: int
    evaluations: int = 100
    init_size: int = 2
    beta: float = 1.5

    def prefix(self) -> str:
        """The start of its result files' names (main.py adds dim, mu, sigma and beta)."""
        return f"{ALGORITHMS[self.algorithm]}_{PROBLEMS[self.problem]}_{self.seed}_{self.evaluations}_"

    def files(self, cache: Path) -> dict[str, Path]:
        """Its pickles in `cache/Result`, by kind (X, Y, contexts, stochastic_Y, time, ...)."""
        found = {}
        for path in (cache / "Result").glob(self.prefix() + "*.pkl"):
            kind = path.name[:-4].split(f"_{self.beta}_", 1)[-1]
            found[kind] = path
        return found

    def done(self, cache: Path) -> bool:
        return "time" in self.files(cache)  # main.py writes the time pickle last

    def load(self, cache: Path) -> dict[str, np.ndarray | float]:
        out = {}
        for kind, path in self.files(cache).items():
            if path.stat().st_size:
                with path.open("rb") as handle:
                    out[kind] = pickle.load(handle)
        return out

    def command(self, code: PublishedCode) -> list[str]:
        return [
            str(code.python), str(code.folder / "main.py"), "--Optimizer", ALGORITHMS[self.algorithm],
            "--TestProblem", PROBLEMS[self.problem], "--init_size", str(self.init_size),
            "--running_rounds", str(self.evaluations), "--repeat", "1", "--start_seed", str(self.seed),
            "--beta", str(self.beta), "--device", "cpu",
        ]

    def run(self, code: PublishedCode, cache: Path) -> int:
        """Run it unmodified with cwd = `cache` (main.py writes ./Result there); returns the exit code."""
        for partial in self.files(cache).values():  # a run killed while pickling: main.py would skip it
            partial.unlink()
        logs = cache / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{self.prefix()}{self.init_size}.log"
        with log.open("w") as handle:
            return subprocess.call(
                self.command(code), cwd=cache, stdout=handle, stderr=subprocess.STDOUT,
                env={**os.environ, **THREAD_ENV},
            )
