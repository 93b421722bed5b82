"""Short runs of every algorithm in both profiles, pinned in tests/data/pinned_records.parquet.

Where this machine's numerical fingerprint is the pins' (same CPU features, same kernels), the
records must be identical to the bit; elsewhere they must agree to `TOLERANCE` wherever the
trajectories cannot have parted yet (see `compared_rows`). A fidelity change writes the pins
again; a refactor shows that it changes no number against its base commit on this machine:

    .venv/bin/python tests/support/pinned_records.py --write
    .venv/bin/python tests/support/pinned_records.py --against REV
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

PINNED = Path(__file__).resolve().parents[1] / "data" / "pinned_records.parquet"
FINGERPRINT_FILE = PINNED.with_suffix(".json")
KEYS = ["fidelity", "algorithm", "evaluations", "problem"]

PROBLEM = "three-hump-camel"  # 2-D decision, 1-D context: every algorithm's code paths, cheaply
SEED, EVALUATIONS, INIT_SIZE = 7, 8, 5
FAST = {"raw_samples": 64, "num_restarts": 2}
# Longer runs where the GP's context basis is taken (from ~15 points on), and runs on two
# context dimensions long enough for the quadratic forms of fixed and fresh context sets.
LONGER_EVALUATIONS, LONGER = 25, ("wdrbo", "sbo-kde", "drbo-kde", "stableopt")
FORMS_PROBLEM, FORMS_EVALUATIONS, FORMS = "modified-branin", 50, ("sbo-kde", "drbo-kde", "wdrbo")

# Off the pins' machine: |now - pinned| <= TOLERANCE * (largest |pinned| of that column in the
# run). Kernels forced to other code paths here (ATen's default CPU capability, OpenBLAS's
# Sandybridge kernels, MKL's conditional reproducibility mode) moved the compared rows by at
# most 1.1e-9 of that scale; beta + 1e-6 moves them by 2e-5 (`--measure ENV...` prints both).
TOLERANCE = 1e-8


@dataclass(frozen=True)
class Case:
    fidelity: str
    algorithm: str
    evaluations: int
    problem: str


def _package(module: str, before_layers: str):  # type: ignore[no-untyped-def]
    """A module of the package, by its path now or, at a revision before the package's folders
    were its layers, by its old path: `--against` runs this file against older revisions too."""
    import importlib

    try:
        return importlib.import_module(f"wdrbo_dist.{module}")
    except ModuleNotFoundError:
        return importlib.import_module(f"wdrbo_dist.{before_layers}")


def cases() -> list[Case]:
    """Every algorithm in both profiles, then the longer runs of the basis and forms routes."""
    from wdrbo_dist.problems import FIDELITIES

    ALGORITHMS = _package("acquisition.registry", "algorithms").ALGORITHMS

    short = [Case(fidelity, algorithm, EVALUATIONS, PROBLEM) for fidelity in FIDELITIES for algorithm in ALGORITHMS]
    longer = [Case("paper", algorithm, LONGER_EVALUATIONS, PROBLEM) for algorithm in LONGER]
    forms = [Case("paper", algorithm, FORMS_EVALUATIONS, FORMS_PROBLEM) for algorithm in FORMS]
    return short + longer + forms


def pinned_runs(selected: list[Case] | None = None, options: dict | None = None) -> pd.DataFrame:
    """The records of `selected` cases (all by default), without the time columns, one thread."""
    import torch
    from threadpoolctl import threadpool_limits

    deterministic_part = _package("run.records", "records").deterministic_part
    RunSpec = _package("run.spec", "run").RunSpec
    run_one = _package("run.loop", "run").run_one

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    frames = []
    try:
        with threadpool_limits(limits=1):
            for case in selected or cases():
                spec = RunSpec.make(algorithm=case.algorithm, problem=case.problem, seed=SEED,
                                    evaluations=case.evaluations, init_size=INIT_SIZE, fidelity=case.fidelity,
                                    options={**FAST, **(options or {})})
                result = run_one(spec)
                assert result.ok, result.error
                frames.append(deterministic_part(result.records).assign(
                    algorithm=case.algorithm, fidelity=case.fidelity, evaluations=case.evaluations,
                    problem=case.problem))
    finally:
        torch.set_num_threads(before)
    return pd.concat(frames, ignore_index=True)


def numerical_fingerprint() -> str:
    """A hash of the CPU features the kernels dispatch on and of the bits NumPy, OpenBLAS,
    SciPy's L-BFGS-B and torch (MKL, ATen's vector kernels) give on fixed inputs, one thread.

    Equal fingerprints: the pins' kernels, so records must be identical. The probes cover each
    library whose forced alternatives moved the records here (`--measure`)."""
    import scipy.optimize
    import torch
    from threadpoolctl import threadpool_limits

    digest = hashlib.sha256()

    def add(value) -> None:
        digest.update(np.ascontiguousarray(np.asarray(value, dtype=np.float64)).tobytes())

    features = getattr(np._core._multiarray_umath, "__cpu_features__", {})
    digest.update(json.dumps(sorted(k for k, v in features.items() if v)).encode())
    digest.update(torch.backends.cpu.get_cpu_capability().encode())
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            rng = np.random.default_rng(20251)
            a = rng.standard_normal((67, 67))
            spd = a @ a.T + 67.0 * np.eye(67)
            grid = np.linspace(-20.0, 20.0, 4001)
            for ufunc in (np.exp, np.sin, np.cos, np.tanh, np.log1p, np.sqrt, np.expm1):
                add(ufunc(np.abs(grid) if ufunc in (np.log1p, np.sqrt) else grid))
            add(a @ a)
            add(np.linalg.cholesky(spd))
            add(np.linalg.solve(spd, a))
            add(np.linalg.eigh(spd)[0])
            add(np.linalg.svd(a, compute_uv=False))
            add(scipy.optimize.minimize(scipy.optimize.rosen, np.full(5, 0.3), method="L-BFGS-B").x)
            t, tg = torch.from_numpy(a), torch.from_numpy(grid)
            for op in (torch.exp, torch.sin, torch.tanh, torch.erf):
                add(op(tg).numpy())
            add(torch.sqrt(tg.abs()).numpy())
            add((t @ t).numpy())
            wide = torch.from_numpy(rng.standard_normal((512, 30)))
            add((wide @ torch.from_numpy(rng.standard_normal((30, 300)))).numpy())
            add(torch.linalg.cholesky(torch.from_numpy(spd)).numpy())
            add(torch.linalg.svdvals(t).numpy())
            add([float(tg[:n].sum()) for n in range(1, 40)])
    finally:
        torch.set_num_threads(before)
    return digest.hexdigest()[:16]


def compared_rows(records: pd.DataFrame, exact: bool) -> pd.DataFrame:
    """The rows a comparison holds: all of them where the kernels are the pins', elsewhere the
    short runs whole and the longer runs up to their first BO step (after it, last-bit
    differences may take another branch and the trajectories part)."""
    if exact or records["evaluations"].iloc[0] <= EVALUATIONS:
        return records
    return records.iloc[: int(records["is_initial"].sum()) + 1]


def differences(now: pd.DataFrame, pinned: pd.DataFrame, exact: bool) -> list[str]:
    """One line per pinned run whose records differ: the first differing step and column."""
    problems = []
    for key, expected in pinned.groupby(KEYS, sort=False):
        got = now[(now[KEYS] == list(key)).all(axis=1)].reset_index(drop=True)
        expected = expected.reset_index(drop=True)
        name = f"{key[1]} on {key[3]} ({key[0]}, {key[2]} evaluations)"
        values = _columns(expected)
        if len(got) != len(expected) or _columns(got) != values:
            problems.append(f"{name}: {len(got)} records with columns {_columns(got)}, "
                            f"pinned {len(expected)} with {values}")
            continue
        a = compared_rows(expected, exact)[values].to_numpy(np.float64)
        b = compared_rows(got, exact)[values].to_numpy(np.float64)
        both_nan = np.isnan(a) & np.isnan(b)
        if exact:
            bad = ~((a == b) | both_nan)
        else:
            bad = ~((np.abs(a - b) <= TOLERANCE * _scale(expected, values)) | both_nan)
        if bad.any():
            row, column = np.argwhere(bad)[0]
            problems.append(f"{name}: step {row + 1}, column {values[column]!r}: "
                            f"{float(b[row, column])!r}, pinned {float(a[row, column])!r}")
    return problems


def _columns(run: pd.DataFrame) -> list[str]:
    """The run's record columns: those with a value (a 1-D run has no x_1 in a 2-D table)."""
    return [c for c in run.columns if c not in KEYS and run[c].notna().any()]


def _scale(run: pd.DataFrame, values: list[str]) -> np.ndarray:
    """Each column's largest magnitude in the pinned run (1 where it is 0), which scales the tolerance."""
    scale = np.nanmax(np.abs(run[values].to_numpy(np.float64)), axis=0)
    return np.where(scale > 0, scale, 1.0)


def read_pins() -> tuple[pd.DataFrame, str]:
    return pd.read_parquet(PINNED), json.loads(FINGERPRINT_FILE.read_text())["fingerprint"]


def write_pins() -> None:
    PINNED.parent.mkdir(exist_ok=True)
    pinned_runs().to_parquet(PINNED, index=False)
    FINGERPRINT_FILE.write_text(json.dumps({"fingerprint": numerical_fingerprint()}, indent=1) + "\n")
    print(f"wrote {PINNED} and {FINGERPRINT_FILE.name}")


def records_at(revision: str, out: Path) -> None:
    """Run the pinned cases with the package as it is at `revision` (a scratch git worktree),
    this file's cases and this machine."""
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="pinned-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), revision],
                       check=True, capture_output=True)
        try:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run([sys.executable, __file__, "--emit", str(out)], env=env, check=True, cwd=scratch)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], check=False)


def against(revision: str) -> int:
    """0 when this checkout gives the records of `revision` to the bit on this machine; else 1,
    naming the first record of each run that differs."""
    with tempfile.TemporaryDirectory(prefix="pinned-") as scratch:
        base = Path(scratch) / "base.parquet"
        records_at(revision, base)
        then, now = pd.read_parquet(base), pinned_runs()
    found = differences(now, then, exact=True)
    for line in found:
        print(line)
    print(f"{'same records as' if not found else f'{len(found)} runs differ from'} {revision}")
    return 1 if found else 0


def measure(environments: list[str]) -> None:
    """For each environment (`NAME=VALUE[,NAME=VALUE...]`): the largest scaled difference from the pins over the
    rows compared off the pins' machine, and whether the fingerprint told the kernels apart."""
    pinned, fingerprint = read_pins()
    with tempfile.TemporaryDirectory(prefix="pinned-") as scratch:
        for assignment in environments:
            out = Path(scratch) / "records.parquet"
            env = {**os.environ, **dict(pair.split("=", 1) for pair in assignment.split(","))}
            subprocess.run([sys.executable, __file__, "--emit", str(out)], env=env, check=True)
            printed = subprocess.run([sys.executable, __file__, "--fingerprint"], env=env, check=True,
                                     capture_output=True, text=True).stdout.strip()
            now = pd.read_parquet(out)
            worst = largest_scaled_difference(now, pinned)
            print(f"{assignment}: identical {now.equals(pinned)}, largest scaled difference {worst:.2e}, "
                  f"fingerprint {'same' if printed == fingerprint else 'other'}")


def largest_scaled_difference(now: pd.DataFrame, pinned: pd.DataFrame) -> float:
    """The largest |now - pinned| over the rows compared off the pins' machine, in units of
    each column's scale (what TOLERANCE bounds)."""
    worst = 0.0
    for key, expected in pinned.groupby(KEYS, sort=False):
        got = now[(now[KEYS] == list(key)).all(axis=1)]
        values = _columns(expected)
        a = compared_rows(expected, exact=False)[values].to_numpy(np.float64)
        b = compared_rows(got, exact=False)[values].to_numpy(np.float64)
        gap = np.abs(a - b) / _scale(expected, values)
        worst = max(worst, float(np.nanmax(np.where(np.isnan(a) & np.isnan(b), 0.0, gap))))
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="write the pins and their fingerprint from this code")
    group.add_argument("--against", metavar="REV", help="compare this checkout's records with REV's, on this machine")
    group.add_argument("--measure", nargs="+", metavar="NAME=VALUE",
                       help="how far records move from the pins under each environment (e.g. OPENBLAS_CORETYPE=Sandybridge)")
    group.add_argument("--emit", metavar="FILE", type=Path, help=argparse.SUPPRESS)
    group.add_argument("--fingerprint", action="store_true", help="print this machine's numerical fingerprint")
    args = parser.parse_args()
    if args.write:
        write_pins()
    elif args.against:
        return against(args.against)
    elif args.measure:
        measure(args.measure)
    elif args.emit:
        pinned_runs().to_parquet(args.emit, index=False)
    else:
        print(numerical_fingerprint())
    return 0


if __name__ == "__main__":
    sys.exit(main())
