"""What `keep_freed_memory` (wdrbo_dist/allocator.py) changes in a run: time, page faults, records.

Each run happens in a fresh process (the setting is per process and cannot be undone), with
glibc's default thresholds ("default") and with the kept memory ("kept"), alternating, one
thread. Prints per cell the mean run time of each, the minor page faults, and whether the
records (time columns aside) are identical.

    .venv/bin/python benchmarks/allocator.py
    .venv/bin/python benchmarks/allocator.py --algorithms stableopt --problems portfolio-uniform --repeats 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from paired_variants import check_spec, count  # one thread in this process too, before torch

from wdrbo_dist.run import RunSpec

CHILD = """
import hashlib, json, resource, sys, time
from wdrbo_dist.threads import default_thread_environment
default_thread_environment(1)
from wdrbo_dist.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[3] == "kept" else False
import torch
torch.set_num_threads(1)
from wdrbo_dist.records import deterministic_part
from wdrbo_dist.run import RunSpec, run_one
spec = RunSpec(algorithm=sys.argv[1], problem=sys.argv[2], seed=int(sys.argv[4]), evaluations=int(sys.argv[5]))
start = time.perf_counter()
result = run_one(spec)
seconds = time.perf_counter() - start
import pandas as pd
digest = hashlib.sha256(pd.util.hash_pandas_object(deterministic_part(result.records)).values.tobytes()).hexdigest()
print(json.dumps({"seconds": seconds, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
                  "digest": digest, "kept": kept}))
"""


def run(algorithm: str, problem: str, mode: str, seed: int, evaluations: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, algorithm, problem, mode, str(seed), str(evaluations)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=["erbo", "wdrbo", "stableopt", "drbo-mmd-minimax"])
    parser.add_argument("--problems", nargs="+", default=["ackley", "portfolio-uniform"])
    parser.add_argument("--repeats", type=count, default=2, help="runs of each mode, alternating")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--evaluations", type=int, default=100)
    args = parser.parse_args()
    for algorithm in args.algorithms:  # bad input: one line, exit 2, before any run
        for problem in args.problems:
            check_spec(RunSpec(algorithm=algorithm, problem=problem, seed=args.seed, evaluations=args.evaluations))
    print(f"{'problem':<18} {'algorithm':<17} {'default s':>9} {'kept s':>7} {'kept/default':>12} "
          f"{'faults default':>14} {'faults kept':>11}  records")
    for problem in args.problems:
        for algorithm in args.algorithms:
            results: dict[str, list[dict]] = {"default": [], "kept": []}
            for _ in range(args.repeats):
                for mode in results:
                    results[mode].append(run(algorithm, problem, mode, args.seed, args.evaluations))
            seconds = {mode: sum(r["seconds"] for r in rs) / len(rs) for mode, rs in results.items()}
            faults = {mode: sum(r["faults"] for r in rs) // len(rs) for mode, rs in results.items()}
            same = len({r["digest"] for rs in results.values() for r in rs}) == 1
            applied = all(r["kept"] for r in results["kept"])
            print(f"{problem:<18} {algorithm:<17} {seconds['default']:>9.1f} {seconds['kept']:>7.1f} "
                  f"{seconds['kept'] / seconds['default']:>12.2f} {faults['default']:>14,} {faults['kept']:>11,}  "
                  f"{'identical' if same else 'DIFFER'}{'' if applied else ' (not applied here)'}")


if __name__ == "__main__":
    main()
