"""Variants of one method (option settings) run on the same seeds, compared over seeds.

A numerical variant of an algorithm (another solver, another route to the same posterior)
changes the last digits of its first acquisition values, and a BO trajectory amplifies any
difference: after a few steps one seed's runs of two variants part ways. Two variants are then
"the same method" when the *distribution* of results over seeds is the same. `compare` runs
every variant of every algorithm x problem cell on the same seeds (paired: each seed's runs
share the initial design and context draws) on the local backend and prints, per variant, the
mean run time and final cumulative regret, and against the first variant the paired
difference with a two-sided Wilcoxon test. With few seeds the test can only flag large
differences (6 seeds: the smallest possible p is 0.031).

Used by `mmd_routes.py` (DRBO-MMD's inner solvers) and `context_basis.py` (the GP's routes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence

from wdrbo_dist.threads import default_thread_environment

default_thread_environment(1)  # as the CLI's driver does, before NumPy or torch is imported

from wdrbo_dist.analysis.statistics import mean_se, paired_wilcoxon, significant_digits_format  # noqa: E402
from wdrbo_dist.backends import map_tasks  # noqa: E402
from wdrbo_dist.backends.task import Task  # noqa: E402
from wdrbo_dist.run import RunSpec, validate_spec  # noqa: E402
from wdrbo_dist.study import expected_cost  # noqa: E402

Cell = tuple[str, str, str]  # (algorithm, problem, variant)


def mean_and_se(values: list[float]) -> str:
    summary = mean_se(values)
    return significant_digits_format(summary.mean, summary.se)


def count(text: str) -> int:
    """An argparse type for --seeds and --workers: a whole number >= 1 (else one line, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def add_run_arguments(
    parser: argparse.ArgumentParser, problems: Sequence[str], seeds: int, algorithms: Sequence[str] | None = None
) -> None:
    """The arguments a paired comparison shares, with their defaults: --algorithms (where the
    comparison offers a choice) and --problems checked against the registries, --seeds,
    --evaluations and --workers whole numbers >= 1 (bad input: one line naming the allowed values,
    exit 2, before any run)."""
    from wdrbo_dist.algorithms import ALGORITHMS
    from wdrbo_dist.problems import problem_names

    if algorithms is not None:
        parser.add_argument("--algorithms", nargs="+", default=list(algorithms), choices=list(ALGORITHMS))
    parser.add_argument("--problems", nargs="+", default=list(problems), choices=problem_names())
    parser.add_argument("--seeds", type=count, default=seeds, help="how many seeds: --first-seed, --first-seed + 1, ...")
    parser.add_argument("--first-seed", type=count, default=100, help="the first seed (100: the study's)")
    parser.add_argument("--evaluations", type=count, default=100)
    parser.add_argument("--workers", type=count, default=2)


def check_spec(spec: RunSpec) -> None:
    """The package's own check of a run (`validate_spec`), before any runs: a bad field is one
    line naming it and its allowed values, exit 2."""
    try:
        validate_spec(spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def compare(
    algorithms: Sequence[str],
    problems: Sequence[str],
    variants: Mapping[str, Mapping[str, object]],
    seeds: int,
    evaluations: int,
    fidelity: str,
    workers: int,
    first_seed: int = 100,
) -> None:
    """Run every (algorithm, problem, variant) on seeds first_seed.. and print the comparison."""
    tasks, cell_of = [], {}
    for algorithm in algorithms:
        for problem in problems:
            for variant, options in variants.items():
                for seed in range(first_seed, first_seed + seeds):
                    spec = RunSpec.make(algorithm=algorithm, problem=problem, seed=seed, evaluations=evaluations,
                                        fidelity=fidelity, options=dict(options))
                    check_spec(spec)
                    tasks.append(Task(spec=spec, expected_cost=expected_cost(spec)))
                    cell_of[spec.run_key] = (algorithm, problem, variant)
    tasks.sort(key=lambda t: -t.expected_cost)  # the runner's policy: longest first
    print(f"{len(tasks)} runs on {workers} local workers (load before: {os.getloadavg()[0]:.2f}) ...", flush=True)
    start = time.monotonic()
    wall: dict[Cell, dict[int, float]] = {}
    regret: dict[Cell, dict[int, float]] = {}
    fallbacks: dict[Cell, int] = {}
    for outcome in map_tasks(tasks, "local", workers):
        result, spec = outcome.result, outcome.task.spec
        if not result.ok:
            raise SystemExit(f"{spec.label} {spec.options_dict} failed: {result.error}")
        cell = cell_of[spec.run_key]
        wall.setdefault(cell, {})[spec.seed] = result.wall_time_s
        regret.setdefault(cell, {})[spec.seed] = float(result.records["cumulative_regret"].iloc[-1])
        fallbacks[cell] = fallbacks.get(cell, 0) + int(result.records["inner_fallbacks"].sum())
    print(f"done in {time.monotonic() - start:.0f} s\n")

    first = next(iter(variants))
    print(f"{'algorithm':<17} {'problem':<16} {'variant':<12} {'run s':>12} {'final cumulative regret':>24} "
          f"{'fallbacks':>9}   paired vs {first}: median diff, lower/tied/higher, Wilcoxon p")
    for algorithm in algorithms:
        for problem in problems:
            base = regret[(algorithm, problem, first)]
            for variant in variants:
                cell = (algorithm, problem, variant)
                order = sorted(regret[cell])
                line = (f"{algorithm:<17} {problem:<16} {variant:<12} {mean_and_se([wall[cell][s] for s in order]):>12} "
                        f"{mean_and_se([regret[cell][s] for s in order]):>24} {fallbacks[cell]:>9}")
                if variant != first:
                    # reference = the first variant: its "wins" are seeds where this one's regret is higher
                    test = paired_wilcoxon([base[s] for s in order], [regret[cell][s] for s in order])
                    line += (f"   {test.median_difference:+.2f}, {test.losses}/{test.ties}/{test.wins}, "
                             f"p = {test.pvalue:.3f}")
                print(line)
    print(f"\n{seeds} seeds ({first_seed}..{first_seed + seeds - 1}), {evaluations} evaluations, {fidelity} profile; run s and regret: "
          "mean ± SE over seeds; median diff: this variant's regret minus the first's; lower/tied/higher: "
          "seeds where this variant's regret is so")
