"""Variants of one method run on the same seeds and compared: same method? At what speed?

A variant is a set of option settings: `--variant NAME:key=value,key=value` (values read as
`--option` reads them; `NAME:` alone is the profile's defaults), or a preset (`--preset`: a
comparison with the cells that show it). Options are science (hyperparameters, the published
code's faults); numerical routes are NumericalSettings, chosen by the run's device, not options.
Every (algorithm, problem) cell runs every variant on the same seeds (paired: each seed's runs share the initial design
and the context draws) and prints per variant the mean run time and final cumulative regret,
and against the first variant the paired time ratio, the paired regret difference with a
two-sided Wilcoxon test, and on how many seeds the records (machine columns aside) are the
same to the bit.

Two variants that agree to rounding give a few BO steps of the same trajectory, then part ways,
so they are "the same method" when the results' distribution over seeds is the same; with 6
seeds the smallest possible p is 0.031. Process settings that must give the same bits (`adam_gradient`,
`allocator`) must show the records identical on every seed.

Beside the run options, two settings of the process that runs (each run then gets a fresh
process, with a short warm-up run before the timed one; the runner's setting is the default):
    allocator=kept|default         glibc's thresholds raised (wdrbo_dist/execution/allocator.py) or not
    adam_gradient=direct|autograd  Adam takes the closed-form x-gradient or autograd's

    .venv/bin/python benchmarks/speed/paired.py --preset mmd-solver                  # DRBO-MMD's conic solvers
    .venv/bin/python benchmarks/speed/paired.py --preset mmd-solver --problems ackley newsvendor --seeds 10
    .venv/bin/python benchmarks/speed/paired.py --algorithms wdrbo --problems ackley \\
        --variant paper: --variant detached:wdrbo_L_detached=true
    .venv/bin/python benchmarks/speed/paired.py --preset allocator --dry-run         # the runs, not run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for `benchmarks` when run as a file

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import pandas as pd

from wdrbo_dist.analysis.statistics import mean_se, paired_wilcoxon, significant_digits_format
from wdrbo_dist.cli import parse_option
from wdrbo_dist.cli.usage import UsageError
from wdrbo_dist.run.records import deterministic_part
from wdrbo_dist.run.spec import RunSpec

# Settings of the process, not of the run: {key: (the runner's value, the other)}.
PROCESS_SETTINGS = {"allocator": ("kept", "default"), "adam_gradient": ("direct", "autograd")}

ALL_ALGORITHMS = ["erbo", "wdrbo", "gp-ucb", "sbo-kde", "drbo-kde", "drbo-mmd", "drbo-mmd-minimax", "stableopt"]


@dataclass(frozen=True)
class Preset:
    """A comparison: what it compares, its default cells and its variants
    (in --variant's syntax, so that the help shows how to write it by hand)."""

    about: str
    algorithms: list[str]
    problems: list[str]
    seeds: int
    variants: list[str]
    fidelity: str = "paper"
    expect_identical: bool = False


PRESETS: dict[str, Preset] = {
    "mmd-solver": Preset(
        "DRBO-MMD's conic solver: Clarabel (both profiles) or SCS at eps 1e-5 (the published solver, option "
        "mmd_solver). The worst case has one value but an ill-conditioned minimiser, so the envelope gradient, "
        "and the trajectory, differ early",
        ["drbo-mmd"], ["ackley"], 6, ["clarabel:mmd_solver=CLARABEL", "scs:mmd_solver=SCS"]),
    "adam-gradient": Preset(
        "Adam's gradient from the compiled kernel directly or through torch's autograd: the same bits, "
        "at what speed?",
        ALL_ALGORITHMS, ["ackley"], 3, ["autograd:adam_gradient=autograd", "direct:adam_gradient=direct"],
        expect_identical=True),
    "allocator": Preset(
        "glibc's default malloc thresholds or the kept memory of wdrbo_dist/execution/allocator.py: the same bits, "
        "at what speed (page faults beside)?",
        ["erbo", "wdrbo", "stableopt", "drbo-mmd-minimax"], ["ackley", "portfolio-uniform"], 2,
        ["default:allocator=default", "kept:allocator=kept"], expect_identical=True),
}


@dataclass
class Variant:
    name: str
    options: dict[str, object]
    process: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    seconds: float
    regret: float
    fallbacks: int
    digest: str
    faults: int | None = None


def variant(text: str) -> Variant:
    """An argparse type for --variant: NAME:key=value,key=value (NAME: alone: no options)."""
    name, colon, settings = text.partition(":")
    if not name or not colon:
        raise argparse.ArgumentTypeError(f"must look like NAME:key=value,... (NAME: for the defaults), got {text!r}")
    options: dict[str, object] = {}
    process: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in settings.split(","))):
        try:
            key, value = parse_option(item)
        except UsageError as error:
            raise argparse.ArgumentTypeError(str(error).replace("--option", f"variant {name!r}")) from None
        if key in PROCESS_SETTINGS:
            if value not in PROCESS_SETTINGS[key]:
                raise argparse.ArgumentTypeError(f"{key} must be one of {', '.join(PROCESS_SETTINGS[key])}, got {value!r}")
            process[key] = str(value)
        else:
            options[key] = value
    return Variant(name, options, process)


def records_digest(records: pd.DataFrame) -> str:
    """A hash of the records less the machine's columns: equal digests, the same run to the bit."""
    return hashlib.sha256(pd.util.hash_pandas_object(deterministic_part(records)).values.tobytes()).hexdigest()


def mean_and_se(values: list[float]) -> str:
    summary = mean_se(values)
    return significant_digits_format(summary.mean, summary.se)


# One run in a fresh process, for the process settings: the allocator's thresholds are set
# before torch is imported and cannot be undone; a short warm-up run takes the imports and the
# kernels' first calls out of the timed one.
CHILD = """
import json, resource, sys, time
from wdrbo_dist.execution.threads import default_thread_environment
default_thread_environment(1)
job = json.loads(sys.argv[1])
if job["allocator"] == "kept":
    from wdrbo_dist.execution.allocator import keep_freed_memory
    keep_freed_memory()
import torch
torch.set_num_threads(1)
from wdrbo_dist.acquisition import optimize
import hashlib
import pandas as pd
from wdrbo_dist.run.records import deterministic_part
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.run.loop import run_one
if job["adam_gradient"] == "autograd":  # a plain function has no closed-form gradient to offer Adam
    adam_ascent = optimize.adam_ascent
    optimize.adam_ascent = lambda acquisition, *args: adam_ascent(lambda x: acquisition(x), *args)
spec = RunSpec.make(**job["spec"])
run_one(RunSpec.make(**{**job["spec"], "seed": 0, "evaluations": 4, "init_size": 2}), capture_errors=False)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
start = time.perf_counter()
result = run_one(spec, capture_errors=False)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "regret": float(result.records["cumulative_regret"].iloc[-1]),
                  "fallbacks": int(result.records["inner_fallbacks"].sum()), "digest": hashlib.sha256(pd.util.hash_pandas_object(deterministic_part(result.records)).values.tobytes()).hexdigest(),
                  "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}))
"""


def run_in_process(spec: RunSpec, process: Mapping[str, str]) -> Outcome:
    job = {"spec": {"algorithm": spec.algorithm, "problem": spec.problem, "seed": spec.seed,
                    "evaluations": spec.evaluations, "fidelity": spec.fidelity, "options": spec.options_dict},
           **{key: process.get(key, values[0]) for key, values in PROCESS_SETTINGS.items()}}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{spec.label} {spec.options_dict} {dict(process)} failed:\n{done.stderr[-2000:]}")
    return Outcome(**json.loads(done.stdout.strip().splitlines()[-1]))


Key = tuple[str, str, str, int]  # (algorithm, problem, variant, seed)


def run_all(jobs: list[tuple[Key, RunSpec, Variant]], workers: int) -> dict[Key, Outcome]:
    """Every job, longest first (the runner's policy), on `workers` local processes: the runner's
    own local backend, or with a process setting a fresh process per run."""
    from wdrbo_dist.execution.backends import map_tasks
    from wdrbo_dist.execution.task import Task
    from wdrbo_dist.driver.plan import expected_cost
    from wdrbo_dist.driver.study import run_captured

    jobs = sorted(jobs, key=lambda job: -expected_cost(job[1]))
    outcomes: dict[Key, Outcome] = {}
    if any(v.process for _, _, v in jobs):
        with ThreadPoolExecutor(workers) as pool:
            for key, outcome in zip([k for k, _, _ in jobs], pool.map(lambda job: run_in_process(job[1], job[2].process), jobs)):
                outcomes[key] = outcome
        return outcomes
    key_of = {spec.run_key: key for key, spec, _ in jobs}
    # First a short run of each algorithm per worker (most likely one on each): the pool's
    # processes then meet the timed runs with their imports done and the kernels compiled.
    warm_up = [replace(spec, seed=worker, evaluations=4, init_size=2)
               for spec in {job[1].algorithm: job[1] for job in jobs}.values() for worker in range(workers)]
    tasks = [Task(spec=spec, expected_cost=expected_cost(spec)) for spec in warm_up + [spec for _, spec, _ in jobs]]
    for done in map_tasks(tasks, "local", workers, run=run_captured):
        result, spec = done.result, done.task.spec
        if not result.ok:
            raise SystemExit(f"{spec.label} {spec.options_dict} failed: {result.error}")
        if spec.run_key not in key_of:
            continue  # a warm-up run
        outcomes[key_of[spec.run_key]] = Outcome(
            seconds=result.wall_time_s, regret=float(result.records["cumulative_regret"].iloc[-1]),
            fallbacks=int(result.records["inner_fallbacks"].sum()), digest=records_digest(result.records))
    return outcomes


def compare(
    algorithms: Sequence[str],
    problems: Sequence[str],
    variants: Sequence[Variant],
    seeds: int,
    evaluations: int,
    fidelity: str,
    workers: int,
    first_seed: int = 100,
    dry_run: bool = False,
) -> None:
    """Run every (algorithm, problem, variant) on seeds first_seed.. and print the comparison."""
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise SystemExit(f"error: two variants share a name: {names}")
    settings = [(sorted(v.options.items()), sorted(v.process.items())) for v in variants]
    if any(settings.count(s) > 1 for s in settings):
        raise SystemExit("error: two variants have the same settings")
    seed_range = range(first_seed, first_seed + seeds)
    jobs = []
    for algorithm in algorithms:
        for problem in problems:
            for v in variants:
                for seed in seed_range:
                    spec = RunSpec.make(algorithm=algorithm, problem=problem, seed=seed, evaluations=evaluations,
                                        fidelity=fidelity, options=dict(v.options))
                    harness.check_spec(spec)
                    jobs.append(((algorithm, problem, v.name, seed), spec, v))
    fresh = any(v.process for v in variants)
    print(f"{len(jobs)} runs on {workers} local workers{', each in a fresh process' if fresh else ''} "
          f"(load before: {os.getloadavg()[0]:.2f})", flush=True)
    for v in variants:
        print(f"  {v.name}: {', '.join(f'{k}={x}' for k, x in {**v.options, **v.process}.items()) or 'the defaults'}")
    if dry_run:
        return
    start = time.monotonic()
    outcomes = run_all(jobs, workers)
    print(f"done in {time.monotonic() - start:.0f} s\n")

    first = names[0]
    print(f"{'algorithm':<17} {'problem':<16} {'variant':<12} {'run s':>12} {'final cumulative regret':>24} "
          f"{'fallbacks':>9}" + (f" {'faults':>10}" if fresh else "")
          + f"   vs {first}: time ratio; median diff, lower/tied/higher, Wilcoxon p; records identical")
    for algorithm in algorithms:
        for problem in problems:
            base = {s: outcomes[(algorithm, problem, first, s)] for s in seed_range}
            for name in names:
                cell = {s: outcomes[(algorithm, problem, name, s)] for s in seed_range}
                line = (f"{algorithm:<17} {problem:<16} {name:<12} {mean_and_se([o.seconds for o in cell.values()]):>12} "
                        f"{mean_and_se([o.regret for o in cell.values()]):>24} {sum(o.fallbacks for o in cell.values()):>9}")
                if fresh:
                    line += f" {sum(o.faults or 0 for o in cell.values()) // seeds:>10,}"
                if name != first:
                    ratio = sum(cell[s].seconds / base[s].seconds for s in seed_range) / seeds
                    same = sum(cell[s].digest == base[s].digest for s in seed_range)
                    line += f"   {ratio:.3f}x; "
                    if same == seeds:
                        line += "the same regret on every seed"
                    else:
                        # reference = the first variant: its "wins" are seeds where this one's regret is higher
                        test = paired_wilcoxon([base[s].regret for s in seed_range], [cell[s].regret for s in seed_range])
                        line += (f"{test.median_difference:+.2f}, {test.losses}/{test.ties}/{test.wins}, "
                                 f"p = {test.pvalue:.3f}")
                    line += f"; {same}/{seeds}"
                print(line)
    print(f"\n{seeds} seeds ({first_seed}..{first_seed + seeds - 1}), {evaluations} evaluations, {fidelity} profile; "
          "run s and regret: mean ± SE over seeds; time ratio: mean over seeds of this variant's run time over the "
          "first's; median diff: this variant's regret minus the first's; lower/tied/higher: seeds where this "
          "variant's regret is so" + ("; faults: minor page faults per run" if fresh else ""))


def main() -> None:
    presets = "\n".join(f"  {name}: {p.about}\n      {' '.join('--variant ' + v for v in p.variants)}"
                        for name, p in PRESETS.items())
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"presets (their cells: --preset NAME --dry-run):\n{presets}")
    parser.add_argument("--preset", choices=list(PRESETS), help="a comparison, with its cells")
    parser.add_argument("--variant", action="append", type=variant, default=[], metavar="NAME:key=value,...",
                        help="a variant (at least two, or a preset); the first is the reference")
    harness.add_algorithms(parser, every=False, help="default: the preset's")
    harness.add_problems(parser, None, help="default: the preset's, else ackley")
    harness.add_seeds(parser, None, help="how many seeds: --first-seed, --first-seed + 1, ... (default: "
                                         "the preset's, else 6)")
    parser.add_argument("--first-seed", type=harness.count, default=100, help="the first seed (100: the study's)")
    harness.add_evaluations(parser)
    harness.add_fidelity(parser, None, help="the profile (default: the preset's, else paper)")
    harness.add_workers(parser)
    parser.add_argument("--dry-run", action="store_true", help="check the runs and print the variants, run nothing")
    args = parser.parse_args()
    preset = PRESETS.get(args.preset) if args.preset else None
    if preset is not None and args.variant:
        parser.error("--preset brings its variants: give --variant without it")
    variants = [variant(text) for text in preset.variants] if preset else args.variant
    if len(variants) < 2:
        parser.error("give at least two --variant NAME:key=value,... or a --preset")
    if preset is None and not args.algorithms:
        parser.error("--algorithms is needed without a --preset")
    compare(args.algorithms or preset.algorithms, args.problems or (preset.problems if preset else ["ackley"]),
            variants, args.seeds or (preset.seeds if preset else 6), args.evaluations,
            args.fidelity or (preset.fidelity if preset else "paper"), args.workers, first_seed=args.first_seed,
            dry_run=args.dry_run)
    if preset is not None and preset.expect_identical:
        print(f"(--preset {args.preset}: the records must be identical on every seed)")


if __name__ == "__main__":
    main()
