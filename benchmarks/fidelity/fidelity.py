"""Does the `reference` profile behave like the published code? Regret distributions side by side.

Runs both codes on the same algorithm x problem cells and seeds (200 and up: 100-114 are the
study's) with the issue's protocol, `--init_size 2 --running_rounds 100 --beta 1.5` for the
published `main.py` and `--fidelity reference --init-size 2 --evaluations 100` for ours, and
prints per cell the mean +- SE of the cumulative exact regret after 100 evaluations for each
code (the initial design included, as the published code counts it; both against the exact
optimum of the same QMC rule, method §5.3) and an equivalence test of the two (TOST on the
log-ratio, `wdrbo_dist.analysis.equivalence`): the ratio of geometric means, ours / published,
with the 90 % interval TOST inverts, its p and the verdict: "equivalent" (the interval inside
[0.8, 1.25]), "different" (not, and the 95 % interval excludes 1) or "undetermined at this n",
with the seeds a side that would give 80 % power to show equivalence were the ratio 1.
Bit-identical streams are not the goal: the two codes draw their random numbers differently
(unpaired: Welch's t on the log regrets), so sameness is shown over seeds, and a p >= 0.05 of a
test of difference is not taken for it.

Both sides are cached under --cache (published runs are slow: DRBO-KDE ~850 s a run here):
the published pickles in CACHE/published/Result, ours as JSON keyed by run key (so a new
package version runs again). Published runs are also kept in the committed ledger
(published.py), so they are run once per project, not once per machine. `--table-only`
prints what the ledger and the cache hold without running; `--only ours` needs no published code
(the ledger has its side).

A fidelity change (one that moves the reference profile's records) is shown with
`--paired-against REV`: our side also runs with the package as it is at git revision REV, by
REV's own copy of this script in a scratch worktree (only it knows how REV's package is laid out;
cached in CACHE/at-REV; scripts before 0.23.0 also want `--published`), and a second table
decides per cell whether the two are equivalent over the same seeds (paired: each seed's runs
share the initial design and the context draws; the one-sample t on the per-seed log-ratios).

    .venv/bin/python benchmarks/fidelity/fidelity.py --published /scratch/published --seeds 10
    .venv/bin/python benchmarks/fidelity/fidelity.py --published /scratch/published --table-only
    .venv/bin/python benchmarks/fidelity/fidelity.py --published /scratch/published \\
        --cells wdrbo:ackley erbo:newsvendor --seeds 3 --workers 2
    .venv/bin/python benchmarks/fidelity/fidelity.py --only ours --paired-against v0.22.0
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import numpy as np
import torch

from benchmarks.fidelity.published import PublishedCode, PublishedRun, read_ledger, record_in_ledger
from wdrbo_dist.acquisition.registry import ALGORITHMS
from wdrbo_dist.analysis.equivalence import CALIBRATED_FROM, MARGIN, UNDETERMINED, VERDICTS, Equivalence, equivalence
from wdrbo_dist.analysis.statistics import mean_se, significant_digits_format, tie_mask
from wdrbo_dist.execution.backends import map_tasks
from wdrbo_dist.execution.task import Task
from wdrbo_dist.problems import PROBLEMS, make_problem
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.driver.study import run_captured

FIRST_SEED = 200
EVALUATIONS, INIT_SIZE = 100, 2
# The target: the cheap four on four problems, every other algorithm on Ackley and Branin.
CORE_PROBLEMS = ["ackley", "modified-branin", "newsvendor", "three-hump-camel"]
TARGET_CELLS = [(a, p) for p in CORE_PROBLEMS for a in ("wdrbo", "erbo", "gp-ucb", "sbo-kde")] + [
    (a, p) for p in ("ackley", "modified-branin") for a in ("drbo-mmd-minimax", "stableopt", "drbo-mmd", "drbo-kde")
]


def our_spec(algorithm: str, problem: str, seed: int) -> RunSpec:
    return RunSpec.make(
        algorithm=algorithm, problem=problem, seed=seed, evaluations=EVALUATIONS, init_size=INIT_SIZE,
        fidelity="reference",
    )


def published_regret(run: PublishedRun, cache: Path, ledger: dict[str, dict] | None = None) -> float | None:
    """Cumulative exact regret of a published run: sum over all evaluations of E* - E f(x_t).
    `ledger`: the ledger read once by the caller (a table reads it once, not twice a run)."""
    entry = (ledger or {}).get(run.key())
    if entry is not None:
        expected = np.asarray(entry["stochastic_Y"], dtype=np.float64).reshape(-1)
    elif run.done(cache):
        expected = np.asarray(run.load(cache)["stochastic_Y"], dtype=np.float64).reshape(-1)
    else:
        return None
    optimum = make_problem(run.problem, "reference").optimal_value
    return float(np.sum(optimum - expected))


def our_result_path(cache: Path, spec: RunSpec) -> Path:
    return cache / "ours" / f"{spec.algorithm}_{spec.problem}_{spec.seed}_{spec.run_key}.json"


def our_regret(cache: Path, spec: RunSpec) -> float | None:
    path = our_result_path(cache, spec)
    if not path.is_file():
        return None
    return float(json.loads(path.read_text())["cumulative_regret"])


def run_ours(cells: list[tuple[str, str]], seeds: list[int], cache: Path, workers: int) -> None:
    tasks = [
        Task(spec=our_spec(a, p, s), expected_cost=ALGORITHMS[a].relative_cost)
        for a, p in cells for s in seeds if our_regret(cache, our_spec(a, p, s)) is None
    ]
    if not tasks:
        return
    tasks.sort(key=lambda t: -t.expected_cost)
    print(f"ours: {len(tasks)} runs on {workers} local workers ...", flush=True)
    (cache / "ours").mkdir(parents=True, exist_ok=True)
    for outcome in map_tasks(tasks, "local", workers, run=run_captured):
        result, spec = outcome.result, outcome.task.spec
        if not result.ok:
            raise SystemExit(f"ours: {spec.label} failed:\n{result.error}")
        records = result.records
        payload = {
            "cumulative_regret": float(records["cumulative_regret"].iloc[-1]),
            "wall_time_s": result.wall_time_s,
            "fit_attempts_max": int(records["fit_attempts"].max()),
            "x": records.filter(like="x_").to_numpy().tolist(),
            "spec": spec.identity(),
        }
        our_result_path(cache, spec).write_text(json.dumps(payload))


def run_published(code: PublishedCode, runs: list[PublishedRun], cache: Path, workers: int) -> None:
    todo = [r for r in runs if not r.done(cache)]
    if not todo:
        return
    print(f"published: {len(todo)} runs on {workers} processes (cached in {cache}) ...", flush=True)

    def one(run: PublishedRun) -> None:
        start = time.monotonic()
        code_rc = run.run(code, cache)
        status = "ok" if code_rc == 0 and run.done(cache) else f"FAILED (exit {code_rc}, see {cache}/logs)"
        print(f"  published {run.algorithm} {run.problem} seed {run.seed}: {status}, "
              f"{time.monotonic() - start:.0f} s", flush=True)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, todo))


def decide(a: list[float], b: list[float], label: str, paired: bool = False) -> Equivalence:
    """The equivalence test of one cell (a / b); a regret it cannot take (<= 0) stops the script, naming the cell."""
    try:
        return equivalence(a, b, paired=paired)
    except ValueError as error:
        raise SystemExit(f"{label}: {error}") from None


def summary(values: list[float]) -> str:
    """mean ± SE, or '-' without values."""
    return significant_digits_format(mean_se(values).mean, mean_se(values).se) if values else "-"


def ratio_text(result: Equivalence) -> str:
    """'ratio [90 % interval]' ('-' without a value a side; the ratio alone below 2 a side)."""
    if not np.isfinite(result.ratio):
        return "-"
    return f"{result.ratio:.2f}" + (f" [{result.low90:.2f}, {result.high90:.2f}]" if np.isfinite(result.low90) else "")


def decision_cells(result: Equivalence) -> str:
    """'TOST p | verdict | seeds needed' (seeds needed for undetermined cells only)."""
    p = "-" if not np.isfinite(result.p_tost) else "< 0.001" if result.p_tost < 0.001 else f"{result.p_tost:.3f}"
    needed = str(result.seeds_needed) if result.verdict == UNDETERMINED and result.seeds_needed else ""
    return f"{p} | {result.verdict} | {needed}"


def counts(results: list[Equivalence]) -> str:
    """'N equivalent, M different, K undetermined at this n'."""
    return ", ".join(f"{sum(r.verdict == v for r in results)} {v}" for v in VERDICTS)


def calibration_note(results: list[Equivalence]) -> str:
    """A line under a table with cells below CALIBRATED_FROM seeds a side ('' when none)."""
    if all(r.calibrated for r in results):
        return ""
    return (f"\nBelow {CALIBRATED_FROM} seeds a side the 90% interval holds its level for lognormal regrets; when one "
            "side alone has stuck runs it covers 86-88% (tests/analysis/test_equivalence.py).")


DECISION_COLUMNS = "ratio [90% CI] | TOST p | verdict | seeds needed"


def table(cells: list[tuple[str, str]], seeds: list[int], cache: Path) -> tuple[list[str], list[Equivalence]]:
    """Per cell, ours against the published code: each code's R_100 and the equivalence test (unpaired)."""
    lines = [
        f"| algorithm | problem | n ours / published | ours R_100 | published R_100 | {DECISION_COLUMNS} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    results, ledger = [], read_ledger()
    for algorithm, problem in cells:
        ours = [our_regret(cache, our_spec(algorithm, problem, s)) for s in seeds]
        theirs = [published_regret(PublishedRun(algorithm, problem, s), cache / "published", ledger) for s in seeds]
        ours_v = [v for v in ours if v is not None]
        theirs_v = [v for v in theirs if v is not None]
        result = decide(ours_v, theirs_v, f"{algorithm} on {problem}")
        results.append(result)
        lines.append(
            f"| {algorithm} | {problem} | {len(ours_v)} / {len(theirs_v)} | {summary(ours_v)} | {summary(theirs_v)} | "
            f"{ratio_text(result)} | {decision_cells(result)} |"
        )
    return lines, results


# Where the regret of a run accrues: the initial design, then the early and the late BO steps.
PHASES = ((0, INIT_SIZE), (INIT_SIZE, 50), (50, EVALUATIONS))


def regret_per_evaluation(cache: Path, algorithm: str, problem: str, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(ours, published) regret of each evaluation, E* - E f(x_t); ours recomputed from its x."""
    run = PublishedRun(algorithm, problem, seed)
    path = our_result_path(cache, our_spec(algorithm, problem, seed))
    if not (run.done(cache / "published") and path.is_file()):
        return None
    truth = make_problem(problem, "reference")
    theirs = truth.optimal_value - np.asarray(run.load(cache / "published")["stochastic_Y"], dtype=np.float64).reshape(-1)
    x = torch.tensor(json.loads(path.read_text())["x"], dtype=torch.float64)
    ours = truth.optimal_value - truth.expected_value(x).reshape(-1).numpy()
    return ours, theirs


def phases(cells: list[tuple[str, str]], seeds: list[int], cache: Path) -> list[str]:
    """Per cell, the mean regret each code pays in each phase of a run (seeds with both codes).

    Both codes draw the initial design the same way (scrambled Sobol, method §1.2), so a difference
    there is chance, not method; the BO phases are where a difference of method would show, so
    the last column decides their sum by the equivalence test (unpaired, as the main table).
    """
    header = " | ".join(f"evaluations {a + 1}-{b}: ours / published" for a, b in PHASES)
    bo = f"evaluations {INIT_SIZE + 1}-{EVALUATIONS}: ratio [90% CI], TOST p, verdict"
    lines = [f"| algorithm | problem | seeds | {header} | {bo} |", "|---|---|---|" + "---|" * (len(PHASES) + 1)]
    for algorithm, problem in cells:
        pairs = [r for s in seeds if (r := regret_per_evaluation(cache, algorithm, problem, s)) is not None]
        if not pairs:
            continue
        cells_text = []
        for a, b in PHASES:
            ours = [float(o[a:b].sum()) for o, _ in pairs]
            theirs = [float(t[a:b].sum()) for _, t in pairs]
            cells_text.append(f"{significant_digits_format(mean_se(ours).mean, mean_se(ours).se)} / "
                              f"{significant_digits_format(mean_se(theirs).mean, mean_se(theirs).se)}")
        ours_bo = [float(o[INIT_SIZE:].sum()) for o, _ in pairs]
        theirs_bo = [float(t[INIT_SIZE:].sum()) for _, t in pairs]
        result = decide(ours_bo, theirs_bo, f"{algorithm} on {problem}, evaluations {INIT_SIZE + 1}-{EVALUATIONS}")
        p = f", {result.p_tost:.3f}" if math.isfinite(result.p_tost) else ""
        cells_text.append(f"{ratio_text(result)}{p}, {result.verdict}")
        lines.append(f"| {algorithm} | {problem} | {len(pairs)} | " + " | ".join(cells_text) + " |")
    return lines


def run_ours_at(revision: str, cells: list[tuple[str, str]], seeds: list[int], cache: Path, workers: int,
                published: list[str]) -> Path:
    """Our side with the package as it is at `revision`, run by that revision's own fidelity.py in a
    scratch git worktree (its harness calls its package; the cache format, ours/<cell>_<seed>_<key>.json
    with `cumulative_regret`, has not changed), cached in CACHE/at-<commit>; returns that cache.
    `published`: the --published arguments given, passed on (the script before 0.23.0 requires them)."""
    root = harness.ROOT
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", f"{revision}^{{commit}}"],
                            capture_output=True, text=True)
    if commit.returncode != 0:
        raise SystemExit(f"error: --paired-against: {revision!r} is not a git revision of {root}")
    then = cache.resolve() / f"at-{commit.stdout.strip()}"  # absolute: the script runs in the scratch folder
    with tempfile.TemporaryDirectory(prefix="fidelity-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit.stdout.strip()],
                       check=True, capture_output=True)
        script = tree / "benchmarks" / "fidelity" / "fidelity.py"
        try:
            if not script.is_file():
                raise SystemExit(f"error: --paired-against: {revision!r} has no benchmarks/fidelity/fidelity.py")
            command = [sys.executable, str(script), "--only", "ours", "--cache", str(then), "--seeds", str(len(seeds)),
                       "--workers", str(workers), *published, "--cells", *[f"{a}:{p}" for a, p in cells]]
            print(f"ours at {revision} ({commit.stdout.strip()}):", flush=True)
            done = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=scratch,
                                  stdout=subprocess.DEVNULL)
            if done.returncode != 0:
                raise SystemExit(f"error: --paired-against: {revision}'s fidelity.py exited {done.returncode} "
                                 "(its message above; a revision before 0.23.0 also needs --published)")
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], check=False)
    return then


def regret_at(then: Path, algorithm: str, problem: str, seed: int) -> float | None:
    """Our R_100 of a cell and seed in another revision's cache (its run keys hash its version)."""
    found = sorted((then / "ours").glob(f"{algorithm}_{problem}_{seed}_*.json"))
    return float(json.loads(found[-1].read_text())["cumulative_regret"]) if found else None


def paired_table(cells: list[tuple[str, str]], seeds: list[int], cache: Path, then: Path,
                 revision: str) -> tuple[list[str], list[Equivalence]]:
    """Per cell, our R_100 now against at `revision` on the same seeds: mean ± SE of each, the seeds
    where now's regret is lower / the same / higher, and the equivalence test of now / then, paired."""
    lines = [f"| algorithm | problem | seeds | R_100 at {revision} | R_100 now | lower/tied/higher | "
             f"{DECISION_COLUMNS} |", "|---|---|---|---|---|---|---|---|---|---|"]
    results = []
    for algorithm, problem in cells:
        pairs = [(t, n) for s in seeds
                 if (t := regret_at(then, algorithm, problem, s)) is not None
                 and (n := our_regret(cache, our_spec(algorithm, problem, s))) is not None]
        before, now = np.array([t for t, _ in pairs], dtype=float), np.array([n for _, n in pairs], dtype=float)
        result = decide(list(now), list(before), f"{algorithm} on {problem} (paired)", paired=True)
        results.append(result)
        tied = tie_mask(now, before)
        lower, higher = int(np.sum(~tied & (now < before))), int(np.sum(~tied & (now > before)))
        lines.append(f"| {algorithm} | {problem} | {len(pairs)} | {summary(list(before))} | {summary(list(now))} | "
                     f"{lower}/{int(tied.sum())}/{higher} | {ratio_text(result)} | {decision_cells(result)} |")
    return lines, results


def parse_cells(values: list[str] | None) -> list[tuple[str, str]]:
    """ALGORITHM:PROBLEM pairs; ValueError names the bad one and the allowed names."""
    if not values:
        return TARGET_CELLS
    cells = []
    for value in values:
        algorithm, _, problem = value.partition(":")
        if algorithm not in ALGORITHMS:
            raise ValueError(f"--cells: {value!r}: algorithm must be one of {', '.join(ALGORITHMS)}")
        if problem not in PROBLEMS:
            raise ValueError(f"--cells: {value!r}: problem must be one of {', '.join(PROBLEMS)}")
        cells.append((algorithm, problem))
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_published_arguments(parser, help="folder of the published code (unmodified, commit 75f891a); "
                                                  "not needed with --only ours or --table-only")
    harness.add_seeds(parser, 10, help=f"seeds {FIRST_SEED}, {FIRST_SEED + 1}, ...")
    parser.add_argument("--cells", nargs="*", help="ALGORITHM:PROBLEM (default: the issue's target cells)")
    harness.add_workers(parser, help="parallel runs of each code")
    parser.add_argument("--table-only", action="store_true", help="print what the cache holds, run nothing")
    parser.add_argument("--only", choices=["ours", "published"], help="run one code's side only")
    parser.add_argument("--phases", action="store_true",
                        help="also print where each code's regret accrues (initial design, early and late BO steps)")
    parser.add_argument("--paired-against", metavar="REV",
                        help="also run our side at git revision REV and compare it with ours now, seed by seed")
    args = parser.parse_args()
    if args.published is None and not (args.table_only or args.only == "ours"):
        parser.error("--published is needed unless --only ours or --table-only")
    if args.paired_against and subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{args.paired_against}^{{commit}}"],
            capture_output=True, cwd=Path(__file__).resolve().parent).returncode != 0:
        parser.error(f"--paired-against: {args.paired_against!r} is not a git revision of this repository")

    try:
        cells = parse_cells(args.cells)
        code = None if args.table_only or args.only == "ours" else PublishedCode.at(args.published, args.published_python)
    except ValueError as error:
        parser.error(str(error))  # one line, exit 2, before any work
    seeds = list(range(FIRST_SEED, FIRST_SEED + args.seeds))
    cache = Path(args.cache)
    (cache / "published").mkdir(parents=True, exist_ok=True)
    published_runs = [PublishedRun(a, p, s) for s in seeds for a, p in cells]
    for run in published_runs:  # runs finished in the cache by an older harness: into the ledger
        if run.finished_in(cache / "published"):
            record_in_ledger(run, cache / "published")
    then = None
    if args.paired_against and not args.table_only:
        passed_on = [] if args.published is None else ["--published", args.published] + (
            [] if args.published_python is None else ["--published-python", args.published_python])
        then = run_ours_at(args.paired_against, cells, seeds, cache, args.workers, passed_on)
    if not args.table_only:
        if args.only != "published":
            run_ours(cells, seeds, cache, args.workers)
        if args.only != "ours":
            assert code is not None
            run_published(code, published_runs, cache / "published", args.workers)
    lines, results = table(cells, seeds, cache)
    print("\n".join(lines))
    print(f"\n{counts(results)}")
    print(f"\nR_100: cumulative exact regret after {EVALUATIONS} evaluations ({INIT_SIZE} of them the initial "
          f"design), mean ± SE over seeds {seeds[0]}..{seeds[-1]}; ratio: ours / published, of geometric means, "
          f"with the 90% interval of Welch's t on the log regrets; TOST: two one-sided tests at 5% against the "
          f"margin [{MARGIN[0]}, {MARGIN[1]}]; equivalent: the 90% interval inside the margin (TOST p < 0.05); "
          f"different: not, and the 95% interval excludes 1; seeds needed: seeds a side for 80% TOST power were "
          f"the ratio 1, from the cell's log-spreads. Each cell stands alone: all cells are equivalent only if "
          f"each is (intersection-union), so no multiplicity correction is needed for that claim."
          + calibration_note(results))
    if args.paired_against:
        commit = subprocess.run(["git", "rev-parse", "--short=12", f"{args.paired_against}^{{commit}}"],
                                capture_output=True, text=True, cwd=Path(__file__).resolve().parent).stdout.strip()
        then = then or cache / f"at-{commit}"
        lines, results = paired_table(cells, seeds, cache, then, args.paired_against)
        print("\n" + "\n".join(lines))
        print(f"\n{counts(results)}")
        print(f"\nOurs now against ours at {args.paired_against} on the same seeds; lower/tied/higher: seeds where "
              "now's regret is so (tied: to 1e-9 relative); ratio: now / then, of geometric means, with the 90% "
              "interval of the one-sample t on the per-seed log-ratios; TOST, verdicts and seeds needed (pairs) as "
              "above; identical records give ratio 1 [1.00, 1.00], equivalent." + calibration_note(results))
    if args.phases:
        print("\n" + "\n".join(phases(cells, seeds, cache)))
        print("\nMean ± SE over the seeds both codes have of the regret summed over each phase's evaluations "
              "(the initial design is drawn the same way by both codes: a difference there is chance); the last "
              "column decides the BO steps alone, where a difference of method would show, by the equivalence "
              "test of the main table (no interval under 2 seeds)")


if __name__ == "__main__":
    main()
