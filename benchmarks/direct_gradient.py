"""Whole runs with Adam's gradient from the compiled kernel directly or through torch's autograd.

ERBO's, WDRBO's, SBO-KDE's and GP-UCB's Adam steps are one compiled call whose x-gradient the
kernel returns (`Acquisition.value_and_gradient`); DRBO-KDE's, DRBO-MMD's, the minimax's and
StableOpt's (since stop 41) are a pair kernel's values with a function of them whose backward
pass is written out in autograd's operations. Adam takes them without autograd, which gives
the same bits (tests/acquisition/test_compiled_adam_pass.py). This times both routes in one process, the
routes alternated within each seed so that the machine's drift hits both alike, checks that the
records are the same and prints seconds per run and the ratio, paired per seed. One thread.

    .venv/bin/python benchmarks/direct_gradient.py                          # every algorithm with the route; 3 seeds
    .venv/bin/python benchmarks/direct_gradient.py --algorithms erbo --seeds 5
"""

from __future__ import annotations

import argparse
import time

from paired_variants import count  # sets one thread per process before torch is imported

from wdrbo_dist.allocator import keep_freed_memory  # noqa: E402

keep_freed_memory()

from wdrbo_dist.acquisition import optimize  # noqa: E402
from wdrbo_dist.algorithms import ALGORITHMS  # noqa: E402
from wdrbo_dist.problems import problem_names  # noqa: E402
from wdrbo_dist.records import MACHINE_COLUMNS  # noqa: E402
from wdrbo_dist.run import RunSpec, run_one  # noqa: E402

ROUTES = ("autograd", "direct")


def timed_run(spec: RunSpec, route: str) -> tuple[float, object]:
    """Seconds and records (less the machine's columns) of one run; `autograd` hands Adam the
    acquisition as a plain function, which has no closed-form gradient to offer."""
    adam_ascent = optimize.adam_ascent
    if route == "autograd":
        optimize.adam_ascent = lambda acquisition, *args: adam_ascent(lambda x: acquisition(x), *args)
    try:
        start = time.perf_counter()
        result = run_one(spec, capture_errors=False)
        return time.perf_counter() - start, result.records.drop(columns=list(MACHINE_COLUMNS))
    finally:
        optimize.adam_ascent = adam_ascent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS),
                        choices=list(ALGORITHMS))
    parser.add_argument("--problem", default="ackley", choices=problem_names())
    parser.add_argument("--seeds", type=count, default=3)
    parser.add_argument("--first-seed", type=count, default=100)
    args = parser.parse_args()
    print(f"{'algorithm':<10} {'seed':>5} {'autograd s':>11} {'direct s':>9} {'ratio':>6}")
    for algorithm in args.algorithms:
        # A short run first: imports and the kernels' first calls, once per process.
        run_one(RunSpec.make(algorithm=algorithm, problem=args.problem, seed=0, evaluations=4, init_size=2,
                             fidelity="paper"), capture_errors=False)
        ratios = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            spec = RunSpec.make(algorithm=algorithm, problem=args.problem, seed=seed, evaluations=100, fidelity="paper")
            seconds, records = {}, {}
            for route in ROUTES if seed % 2 == 0 else ROUTES[::-1]:
                seconds[route], records[route] = timed_run(spec, route)
            if not records["autograd"].equals(records["direct"]):
                raise SystemExit(f"{algorithm} seed {seed}: the two routes gave different records")
            ratios.append(seconds["direct"] / seconds["autograd"])
            print(f"{algorithm:<10} {seed:>5} {seconds['autograd']:>11.2f} {seconds['direct']:>9.2f} {ratios[-1]:>6.3f}")
        print(f"{algorithm:<10} mean ratio {sum(ratios) / len(ratios):.3f} (records equal on every seed)")


if __name__ == "__main__":
    main()
