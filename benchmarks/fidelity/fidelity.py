"""Does the `reference` profile behave like the published code? Regret distributions side by side.

Runs both codes on the same algorithm x problem cells and seeds (200 and up: 100-114 are the
study's) with the issue's protocol, `--init_size 2 --running_rounds 100 --beta 1.5` for the
published `main.py` and `--fidelity reference --init-size 2 --evaluations 100` for ours, and
prints per cell the mean +- SE of the cumulative exact regret after 100 evaluations for each
code (the initial design included, as the published code counts it; both against the exact
optimum of the same QMC rule, method §5.3), their ratio, and a two-sided Mann-Whitney test with
Holm's correction over the cells shown. Bit-identical streams are not the goal (spec, Project
decision 1): the two codes draw their random numbers differently, so a cell agrees when its
two samples could come from one distribution.

Both sides are cached under --cache (published runs are slow: DRBO-KDE ~850 s a run here):
the published pickles in CACHE/published/Result, ours as JSON keyed by run key (so a new
package version runs again). Published runs are also kept in the committed ledger
(published.py), so they are run once per project, not once per machine. `--table-only`
prints what the ledger and the cache hold without running; `--only ours` needs no published code
(the ledger has its side).

A fidelity change (one that moves the reference profile's records) is shown with
`--paired-against REV`: our side also runs with the package as it is at git revision REV (a
scratch worktree; cached in CACHE/at-REV), and a second table compares the two per cell over
the same seeds (paired: each seed's runs share the initial design and the context draws).

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
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import numpy as np
import torch
from scipy.stats import mannwhitneyu

from benchmarks.fidelity.published import PublishedCode, PublishedRun, record_in_ledger
from wdrbo_dist.acquisition.registry import ALGORITHMS
from wdrbo_dist.analysis.statistics import (
    holm, mean_se, paired_wilcoxon, ratio_of_means_interval, significant_digits_format,
)
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
RATIO_LIMIT, ALPHA = 1.3, 0.05


def our_spec(algorithm: str, problem: str, seed: int) -> RunSpec:
    return RunSpec.make(
        algorithm=algorithm, problem=problem, seed=seed, evaluations=EVALUATIONS, init_size=INIT_SIZE,
        fidelity="reference",
    )


def published_regret(run: PublishedRun, cache: Path) -> float | None:
    """Cumulative exact regret of a published run: sum over all evaluations of E* - E f(x_t)."""
    if not run.done(cache):
        return None
    expected = np.asarray(run.load(cache)["stochastic_Y"], dtype=np.float64).reshape(-1)
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


@dataclass(frozen=True)
class Comparison:
    """Ours against the published code on one sample pair: the one comparison of both tables."""

    ratio: float  # of means, ours / published
    low: float  # its percentile-bootstrap 95% interval (NaN without 2 values a side)
    high: float
    p: float  # two-sided Mann-Whitney (NaN where a side has fewer than 3 runs)

    @property
    def text(self) -> str:
        interval = f" [{self.low:.2f}, {self.high:.2f}]" if math.isfinite(self.low) else ""
        return f"{self.ratio:.2f}{interval}"


def compare(ours: list[float], theirs: list[float]) -> Comparison:
    ratio = float(np.mean(ours) / np.mean(theirs)) if ours and theirs else math.nan
    low, high = ratio_of_means_interval(ours, theirs)
    p = math.nan
    if len(ours) >= 3 and len(theirs) >= 3:
        p = float(mannwhitneyu(ours, theirs, alternative="two-sided").pvalue)
    return Comparison(ratio, low, high, p)


def table(cells: list[tuple[str, str]], seeds: list[int], cache: Path) -> list[str]:
    rows, pvalues = [], []
    for algorithm, problem in cells:
        ours = [our_regret(cache, our_spec(algorithm, problem, s)) for s in seeds]
        theirs = [published_regret(PublishedRun(algorithm, problem, s), cache / "published") for s in seeds]
        ours_v = [v for v in ours if v is not None]
        theirs_v = [v for v in theirs if v is not None]
        comparison = compare(ours_v, theirs_v)
        rows.append((algorithm, problem, ours_v, theirs_v, comparison))
        pvalues.append(comparison.p)
    tested = [i for i, p in enumerate(pvalues) if math.isfinite(p)]
    adjusted = [math.nan] * len(rows)
    if tested:
        for i, q in zip(tested, holm([pvalues[i] for i in tested])):
            adjusted[i] = float(q)
    lines = [
        "| algorithm | problem | n ours / published | ours R_100 | published R_100 | ratio [95% CI] | Mann-Whitney p | Holm p | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (algorithm, problem, ours_v, theirs_v, comparison), q in zip(rows, adjusted):
        def cell(values: list[float]) -> str:
            if not values:
                return "-"
            summary = mean_se(values)
            return significant_digits_format(summary.mean, summary.se)

        verdict = "-"
        if math.isfinite(q):
            same = q >= ALPHA
            verdict = "agree" if same else "DIFFER"
            if not 1 / RATIO_LIMIT <= comparison.ratio <= RATIO_LIMIT:
                holds = comparison.low <= 1.0 <= comparison.high
                verdict += ", ratio" + (": CI holds 1" if holds else ": CI excludes 1")
        lines.append(
            f"| {algorithm} | {problem} | {len(ours_v)} / {len(theirs_v)} | {cell(ours_v)} | {cell(theirs_v)} | "
            f"{comparison.text} | {comparison.p:.3f} | {q:.3f} | {verdict} |"
        )
    return lines


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
    the last column compares their sum (ratio, bootstrap interval, Mann-Whitney over the seeds).
    """
    header = " | ".join(f"evaluations {a + 1}-{b}: ours / published" for a, b in PHASES)
    bo = f"evaluations {INIT_SIZE + 1}-{EVALUATIONS}: ratio [95% CI], Mann-Whitney p"
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
        comparison = compare(ours_bo, theirs_bo)
        cells_text.append(comparison.text + (f", {comparison.p:.3f}" if math.isfinite(comparison.p) else ""))
        lines.append(f"| {algorithm} | {problem} | {len(pairs)} | " + " | ".join(cells_text) + " |")
    return lines


def run_ours_at(revision: str, cells: list[tuple[str, str]], seeds: list[int], cache: Path, workers: int) -> Path:
    """Our side with the package as it is at `revision` (a scratch git worktree, this script),
    cached in CACHE/at-<commit>; returns that cache."""
    root = harness.ROOT
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", f"{revision}^{{commit}}"],
                            capture_output=True, text=True)
    if commit.returncode != 0:
        raise SystemExit(f"error: --paired-against: {revision!r} is not a git revision of {root}")
    then = cache / f"at-{commit.stdout.strip()}"
    with tempfile.TemporaryDirectory(prefix="fidelity-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit.stdout.strip()],
                       check=True, capture_output=True)
        # The tree gives the package as it was; the benchmarks (this script, published.py, the
        # harness) stay this checkout's, which the script puts at the end of sys.path.
        shutil.rmtree(tree / "benchmarks", ignore_errors=True)
        try:
            command = [sys.executable, __file__, "--only", "ours", "--cache", str(then), "--seeds", str(len(seeds)),
                       "--workers", str(workers), "--cells", *[f"{a}:{p}" for a, p in cells]]
            print(f"ours at {revision} ({commit.stdout.strip()}):", flush=True)
            subprocess.run(command, env={**os.environ, "PYTHONPATH": str(tree)}, check=True, cwd=scratch,
                           stdout=subprocess.DEVNULL)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], check=False)
    return then


def regret_at(then: Path, algorithm: str, problem: str, seed: int) -> float | None:
    """Our R_100 of a cell and seed in another revision's cache (its run keys hash its version)."""
    found = sorted((then / "ours").glob(f"{algorithm}_{problem}_{seed}_*.json"))
    return float(json.loads(found[-1].read_text())["cumulative_regret"]) if found else None


def paired_table(cells: list[tuple[str, str]], seeds: list[int], cache: Path, then: Path, revision: str) -> list[str]:
    """Per cell, our R_100 now against at `revision` on the same seeds: mean ± SE of each, the median
    paired difference (now - then), seeds lower/tied/higher, a two-sided Wilcoxon signed-rank test
    with Holm's correction over the cells, and on how many seeds the regret is the same."""
    rows = []
    for algorithm, problem in cells:
        pairs = [(t, n) for s in seeds
                 if (t := regret_at(then, algorithm, problem, s)) is not None
                 and (n := our_regret(cache, our_spec(algorithm, problem, s))) is not None]
        rows.append((algorithm, problem, pairs, paired_wilcoxon([t for t, _ in pairs], [n for _, n in pairs])))
    tested = [i for i, row in enumerate(rows) if math.isfinite(row[3].pvalue)]
    adjusted = [math.nan] * len(rows)
    for i, q in zip(tested, holm([rows[i][3].pvalue for i in tested]) if tested else []):
        adjusted[i] = float(q)
    lines = [f"| algorithm | problem | seeds | R_100 at {revision} | R_100 now | median diff | lower/tied/higher | "
             "Wilcoxon p | Holm p |", "|---|---|---|---|---|---|---|---|---|"]
    for (algorithm, problem, pairs, test), q in zip(rows, adjusted):
        def cell(values: list[float]) -> str:
            return significant_digits_format(mean_se(values).mean, mean_se(values).se) if values else "-"

        lines.append(f"| {algorithm} | {problem} | {len(pairs)} | {cell([t for t, _ in pairs])} | "
                     f"{cell([n for _, n in pairs])} | {test.median_difference:+.3g} | "
                     f"{test.wins}/{test.ties}/{test.losses} | {test.pvalue:.3f} | {q:.3f} |")
    return lines


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
        then = run_ours_at(args.paired_against, cells, seeds, cache, args.workers)
    if not args.table_only:
        if args.only != "published":
            run_ours(cells, seeds, cache, args.workers)
        if args.only != "ours":
            assert code is not None
            run_published(code, published_runs, cache / "published", args.workers)
    print("\n".join(table(cells, seeds, cache)))
    print(f"\nR_100: cumulative exact regret after {EVALUATIONS} evaluations ({INIT_SIZE} of them the initial "
          f"design), mean ± SE over seeds {seeds[0]}..{seeds[-1]}; ratio: ours / published; Mann-Whitney "
          f"two-sided, Holm over the tested cells (>= 3 runs a side); agree: Holm p >= {ALPHA}; "
          f"', ratio': outside 1/{RATIO_LIMIT}..{RATIO_LIMIT}; CI: percentile bootstrap of the ratio of "
          f"means, each code's seeds resampled (10,000 resamples)")
    if args.paired_against:
        commit = subprocess.run(["git", "rev-parse", "--short=12", f"{args.paired_against}^{{commit}}"],
                                capture_output=True, text=True, cwd=Path(__file__).resolve().parent).stdout.strip()
        then = then or cache / f"at-{commit}"
        print("\n" + "\n".join(paired_table(cells, seeds, cache, then, args.paired_against)))
        print(f"\nOurs at {args.paired_against} against ours now on the same seeds; median diff: now - then; "
              "lower/tied/higher: seeds where now's regret is so; Wilcoxon signed-rank, two-sided, Holm over the "
              "cells with a nonzero difference (p = 1 where every seed ties)")
    if args.phases:
        print("\n" + "\n".join(phases(cells, seeds, cache)))
        print("\nMean ± SE over the seeds both codes have of the regret summed over each phase's evaluations "
              "(the initial design is drawn the same way by both codes: a difference there is chance); the last "
              "column compares the BO steps alone, where a difference of method would show (untested under 3 seeds)")


if __name__ == "__main__":
    main()
