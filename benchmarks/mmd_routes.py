"""Do DRBO-MMD's inner-solve routes give the same study results, and at what cost?

The worst case of the MMD ball has one value but, with a low-rank Gram factor, an
ill-conditioned minimiser p*: two solvers that agree on p*^T u to 1e-8 can return quite
different p*, so the envelope gradient p*^T grad u, and with it the whole BO trajectory,
differs after a few BO steps (on Ackley, seed 100: from the third or fourth, between any two
routes), and one seed's final regret differs between routes. A route is then "the same method"
when the *distribution* of results over seeds is the same. This runs every route on the same
seeds (paired: each seed's runs share the initial design and context draws) and prints, per
route, the mean run time and the final cumulative regret, and against the first route the
paired difference with a two-sided Wilcoxon test.

Routes (every one solves the problem built once per run through CVXPY):
    working-set   certified restricted Clarabel programs (the default in both profiles)
    clarabel      the complete compiled program with Clarabel
    scs           the complete compiled program with SCS at eps 1e-5 (the published solver)

    .venv/bin/python benchmarks/mmd_routes.py                          # Ackley, 6 seeds, 2 workers (~6 min)
    .venv/bin/python benchmarks/mmd_routes.py --seeds 10 --problems ackley newsvendor
    .venv/bin/python benchmarks/mmd_routes.py --fidelity reference

With few seeds a Wilcoxon test can only flag large differences (6 seeds: the smallest
possible p is 0.031); it is a sanity check that no route changes the method, not a proof.
"""

from __future__ import annotations

import argparse
import os
import time

from wdrbo_dist.threads import default_thread_environment

default_thread_environment(1)  # as the CLI's driver does, before NumPy or torch is imported

from wdrbo_dist.analysis.statistics import mean_se, paired_wilcoxon, significant_digits_format  # noqa: E402
from wdrbo_dist.backends import map_tasks  # noqa: E402
from wdrbo_dist.backends.task import Task  # noqa: E402
from wdrbo_dist.run import RunSpec  # noqa: E402
from wdrbo_dist.study import expected_cost  # noqa: E402

ROUTES: dict[str, dict[str, object]] = {
    "working-set": {"mmd_solver": "CLARABEL", "mmd_equilibrate": False, "mmd_working_set": True},
    "clarabel": {"mmd_solver": "CLARABEL", "mmd_equilibrate": False, "mmd_working_set": False},
    "scs": {"mmd_solver": "SCS", "mmd_equilibrate": True, "mmd_working_set": False},
}


def mean_and_se(values: list[float]) -> str:
    summary = mean_se(values)
    return significant_digits_format(summary.mean, summary.se)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=["ackley"])
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=list(ROUTES))
    parser.add_argument("--seeds", type=int, default=6, help="seeds 100, 101, ...")
    parser.add_argument("--evaluations", type=int, default=100)
    parser.add_argument("--fidelity", default="paper", choices=["paper", "reference"])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    tasks, route_of = [], {}
    for problem in args.problems:
        for route in args.routes:
            for seed in range(100, 100 + args.seeds):
                spec = RunSpec.make(
                    algorithm="drbo-mmd", problem=problem, seed=seed, evaluations=args.evaluations,
                    fidelity=args.fidelity, options=ROUTES[route],
                )
                tasks.append(Task(spec=spec, expected_cost=expected_cost(spec)))
                route_of[spec.run_key] = route
    tasks.sort(key=lambda t: -t.expected_cost)  # the runner's policy: longest first
    load = os.getloadavg()[0]
    print(f"{len(tasks)} runs on {args.workers} local workers (load before: {load:.2f}) ...", flush=True)
    start = time.monotonic()
    wall: dict[tuple[str, str], dict[int, float]] = {}
    regret: dict[tuple[str, str], dict[int, float]] = {}
    fallbacks: dict[tuple[str, str], int] = {}
    for outcome in map_tasks(tasks, "local", args.workers):
        result, spec = outcome.result, outcome.task.spec
        if not result.ok:
            raise SystemExit(f"{spec.problem} {spec.options_dict} seed {spec.seed} failed: {result.error}")
        key = (spec.problem, route_of[spec.run_key])
        wall.setdefault(key, {})[spec.seed] = result.wall_time_s
        regret.setdefault(key, {})[spec.seed] = float(result.records["cumulative_regret"].iloc[-1])
        fallbacks[key] = fallbacks.get(key, 0) + int(result.records["inner_fallbacks"].sum())
    print(f"done in {time.monotonic() - start:.0f} s\n")

    first = args.routes[0]
    print(f"{'problem':<16} {'route':<12} {'run s':>12} {'final cumulative regret':>24} {'fallbacks':>9}   "
          f"paired vs {first}: median diff, lower/tied/higher, Wilcoxon p")
    for problem in args.problems:
        base = regret[(problem, first)]
        for route in args.routes:
            key = (problem, route)
            seeds = sorted(regret[key])
            line = (f"{problem:<16} {route:<12} {mean_and_se([wall[key][s] for s in seeds]):>12} "
                    f"{mean_and_se([regret[key][s] for s in seeds]):>24} {fallbacks[key]:>9}")
            if route != first:
                # reference = the first route: its "wins" are seeds where this route's regret is higher
                test = paired_wilcoxon([base[s] for s in seeds], [regret[key][s] for s in seeds])
                line += (f"   {test.median_difference:+.1f}, {test.losses}/{test.ties}/{test.wins}, "
                         f"p = {test.pvalue:.3f}")
            print(line)
    print(f"\n{args.seeds} seeds (100..{99 + args.seeds}), {args.evaluations} evaluations, {args.fidelity} profile; "
          "run s and regret: mean ± SE over seeds; median diff: this route's regret minus the first's; "
          "lower/tied/higher: seeds where this route's regret is so")

if __name__ == "__main__":
    main()
