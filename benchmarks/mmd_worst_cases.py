"""DRBO-MMD's working-set solver alone, timed on the worst cases of one real run.

A whole run's time moves by 10 % from hour to hour on a shared VM, more than a change to the
solver's Python does; replaying the same calls takes the GP and Adam out. The first use records
every `prepare` (one BO step's program) and `solve` (one worst case) of one DRBO-MMD run to
`--calls`; each use then replays them `--repeats` times on the package's `WorkingSetSolver` and
prints ms per worst case (min and median over the repeats), the restricted programs solved, and
a hash of every answer: two versions with the same hash give the same records. One thread.

    .venv/bin/python benchmarks/mmd_worst_cases.py --calls /tmp/ackley_calls.pkl   # records, then replays
    .venv/bin/python benchmarks/mmd_worst_cases.py --calls /tmp/ackley_calls.pkl --first 3000 --repeats 15
    PYTHONPATH=<a worktree of another version> .venv/bin/python benchmarks/mmd_worst_cases.py --calls /tmp/ackley_calls.pkl
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wdrbo_dist.threads import default_thread_environment

default_thread_environment(1)  # one thread per run, as a Ray task with num_cpus=1

from wdrbo_dist.acquisition import mmd_working_set  # noqa: E402

if TYPE_CHECKING:
    from wdrbo_dist.run import RunSpec


def record(spec: RunSpec, path: Path) -> int:
    """Run `spec`, keeping every call of its working-set solver; returns the worst cases."""
    from wdrbo_dist.run import run_one

    calls: list[tuple[Any, ...]] = []
    solver = mmd_working_set.WorkingSetSolver
    prepare, solve = solver.prepare, solver.solve

    def recording_prepare(self: Any, program: Any) -> None:
        calls.append(("prepare", program))
        prepare(self, program)

    def recording_solve(self: Any, c: Any, key: Any = 0) -> Any:
        calls.append(("solve", c.copy(), key))
        return solve(self, c, key)

    solver.prepare, solver.solve = recording_prepare, recording_solve  # type: ignore[method-assign]
    try:
        result = run_one(spec)
    finally:
        solver.prepare, solver.solve = prepare, solve  # type: ignore[method-assign]
    if result.error:
        raise SystemExit(f"the run failed: {result.error}")
    path.write_bytes(pickle.dumps(calls))
    return sum(call[0] == "solve" for call in calls)


def replay(calls: list[tuple[Any, ...]], restricted_solver: str) -> tuple[float, int, str]:
    """(seconds in `solve`, restricted programs solved, a hash of the answers) for one replay."""
    solver = mmd_working_set.WorkingSetSolver(restricted_solver=restricted_solver)
    digest = hashlib.sha256()
    seconds = 0.0
    for call in calls:
        if call[0] == "prepare":
            solver.prepare(call[1])
            continue
        start = time.perf_counter()
        x = solver.solve(call[1], call[2])
        seconds += time.perf_counter() - start
        digest.update(b"none" if x is None else x.tobytes())
    return seconds, solver.programs, digest.hexdigest()[:16]


def main() -> None:
    from paired_variants import check_spec, count  # torch and the run machinery: not for `replay` alone

    from wdrbo_dist.acquisition.drbo_mmd import DRBOMMD
    from wdrbo_dist.run import RunSpec

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=Path, required=True, help="recorded calls (written first if missing)")
    parser.add_argument("--problem", default="ackley")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--evaluations", type=count, default=100)
    parser.add_argument("--repeats", type=count, default=3)
    parser.add_argument("--first", type=count, default=None, help="replay only the first N recorded calls")
    parser.add_argument(
        "--restricted-solver", choices=mmd_working_set.RESTRICTED_SOLVERS,
        default=DRBOMMD.OPTIONS["mmd_restricted_solver"].paper,  # what a recorded (paper) run uses
        help="what solves the restricted programs (option mmd_restricted_solver; default: the paper profile's)",
    )
    args = parser.parse_args()
    if not args.calls.exists() and not args.calls.parent.is_dir():
        parser.error(f"--calls: no folder {str(args.calls.parent)!r} to record into")
    if not args.calls.exists():
        spec = RunSpec.make(algorithm="drbo-mmd", problem=args.problem, seed=args.seed, evaluations=args.evaluations)
        check_spec(spec)
        print(f"recorded {record(spec, args.calls)} worst cases of {spec.label} to {args.calls}")
    try:
        calls = pickle.loads(args.calls.read_bytes())[: args.first]
    except Exception as error:  # not a file this script wrote
        parser.error(f"--calls: {str(args.calls)!r} is not a recording of this script ({type(error).__name__})")
    worst_cases = sum(call[0] == "solve" for call in calls)
    times = []
    for repeat in range(args.repeats):
        seconds, programs, digest = replay(calls, args.restricted_solver)
        times.append(1e3 * seconds / worst_cases)
        print(f"replay {repeat}: {times[-1]:.3f} ms per worst case, {programs} restricted programs, answers {digest}")
    print(f"{worst_cases} worst cases: min {min(times):.3f}, median {statistics.median(times):.3f} ms per worst case")


if __name__ == "__main__":
    main()
