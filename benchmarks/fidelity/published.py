"""The published WDRBO code (frmicheli/WDRBO, commit 75f891a) as the fidelity benchmarks see it.

It is neither a dependency nor vendored: the benchmarks take the path of an unmodified checkout
and of a virtual environment it runs in, start its `main.py` as a subprocess and read the
pickles it writes. Set-up (once, outside the project):

    git -C <mirror> archive 75f891a | tar -x -C /scratch/published
    python3 -m venv /scratch/published/venv
    /scratch/published/venv/bin/pip install "torch==2.13.0" botorch==0.13.0 gpytorch==1.14 \\
        linear-operator==0.6 cvxpy==1.6.3 clarabel==0.10.0 scs==3.2.7.post2 numpy==2.2.3 scipy==1.15.2

(its requirements.txt pins these; the CPU build of torch 2.13.0 works with them).

Every finished run is also appended to the ledger, `benchmarks/fidelity/data/published_runs.jsonl`, which
is committed: a published run costs minutes to a quarter of an hour here, and a scratch folder
does not outlive its machine. A run in the ledger is not run again, and `load` reads it from there when its pickles are gone.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Our names -> the published CLI's (`--Optimizer`, `--TestProblem`), method §0.
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
LEDGER = Path(__file__).resolve().parent / "data" / "published_runs.jsonl"
# What the ledger keeps of a run: its history (for replays), the expected objective of each
# evaluation (for the regret) and its run time; the other pickles are derived from these.
LEDGER_KINDS = ("X", "Y", "contexts", "stochastic_Y", "time")
_ledger_lock = threading.Lock()


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

    def key(self) -> str:
        """Its identity in the ledger."""
        return f"{self.prefix()}{self.init_size}_{self.beta}"

    def done(self, cache: Path, ledger: Path = LEDGER) -> bool:
        return self.key() in read_ledger(ledger) or self.finished_in(cache)

    def finished_in(self, cache: Path) -> bool:
        return "time" in self.files(cache)  # main.py writes the time pickle last

    def load(self, cache: Path, ledger: Path = LEDGER) -> dict[str, np.ndarray | float]:
        """Its results: from the ledger where it is there, else from its pickles in `cache`."""
        entry = read_ledger(ledger).get(self.key())
        if entry is not None:
            return {kind: np.asarray(entry[kind], dtype=np.float64) if kind != "time" else float(entry[kind])
                    for kind in LEDGER_KINDS}
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
            code_rc = subprocess.call(
                self.command(code), cwd=cache, stdout=handle, stderr=subprocess.STDOUT,
                env={**os.environ, **THREAD_ENV},
            )
        if code_rc == 0 and self.finished_in(cache):
            record_in_ledger(self, cache)
        return code_rc


def read_ledger(path: Path = LEDGER) -> dict[str, dict]:
    """The ledger's runs by key; a line cut short by a crash is skipped (its run is run again)."""
    entries = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            entries[entry["key"]] = entry
    return entries


def record_in_ledger(run: PublishedRun, cache: Path, ledger: Path = LEDGER) -> bool:
    """Append a finished run's results to the ledger, once; False if it was there already."""
    data = run.load(cache, ledger=Path(os.devnull))  # its pickles, not the ledger's copy
    entry = {"key": run.key(), "algorithm": run.algorithm, "problem": run.problem, "seed": run.seed,
             "evaluations": run.evaluations, "init_size": run.init_size, "beta": run.beta, "commit": "75f891a"}
    for kind in LEDGER_KINDS:
        value = data[kind]
        entry[kind] = float(value) if kind == "time" else np.asarray(value, dtype=np.float64).tolist()
    return append_to_ledger(entry, ledger)


def append_to_ledger(entry: dict, ledger: Path) -> bool:
    """Append `entry` (it has a "key") to a JSON-lines ledger, once; False if its key was there."""
    with _ledger_lock:
        if entry["key"] in read_ledger(ledger):
            return False
        ledger.parent.mkdir(parents=True, exist_ok=True)
        torn = ledger.is_file() and ledger.stat().st_size and not ledger.read_bytes().endswith(b"\n")
        with ledger.open("a") as handle:  # one write of one line: a crash leaves at most a torn last line
            handle.write(("\n" if torn else "") + json.dumps(entry) + "\n")
    return True


def main() -> None:
    """Print how many published runs the ledger holds per algorithm x problem."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ledger", type=Path, default=LEDGER)
    args = parser.parse_args()
    cells: dict[tuple[str, str], list[int]] = {}
    for entry in read_ledger(args.ledger).values():
        cells.setdefault((entry["algorithm"], entry["problem"]), []).append(entry["seed"])
    for (algorithm, problem), seeds in sorted(cells.items()):
        print(f"{algorithm:<17} {problem:<18} {len(seeds):>3} runs, seeds {min(seeds)}..{max(seeds)}")
    print(f"{sum(len(s) for s in cells.values())} runs in {args.ledger}")


if __name__ == "__main__":
    main()
