"""DRBO-MMD's working-set solver in instructions per worst case, counted by valgrind.

On a shared VM a replay's time moves by 20-40 % between identical runs, more than a trim of the
solver's Python is worth; an instruction count does not move (~0.01 % between repeats). This
replays recorded worst cases (a `mmd_worst_cases.py --calls` recording) under
`valgrind --tool=callgrind`, once with N worst cases and once with none (imports, unpickling),
and prints the difference per worst case. The replay imports the solver's module only (no
torch), so a count takes about a minute per 1,000 worst cases. Under valgrind OpenBLAS picks
other kernels, so the answers' hash differs from a native replay's; it is the same for two
versions of the solver that give the same answers. Needs valgrind (Debian: `apt install valgrind`).

    .venv/bin/python benchmarks/mmd_instructions.py --calls /tmp/ackley_calls.pkl                      # 1,000 from the start
    .venv/bin/python benchmarks/mmd_instructions.py --calls /tmp/ackley_calls.pkl --start 21000        # late BO steps
    .venv/bin/python benchmarks/mmd_instructions.py --calls /tmp/ackley_calls.pkl --profile /tmp/cg.out   # then callgrind_annotate
    PYTHONPATH=<a worktree of another version> .venv/bin/python benchmarks/mmd_instructions.py --calls ...
"""

from __future__ import annotations

import argparse
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

from wdrbo_dist.threads import default_thread_environment

default_thread_environment(1)  # one thread, as a Ray task with num_cpus=1 (and a deterministic count)


def replay(path: Path, start: int, worst_cases: int) -> None:
    """Child process: replay `worst_cases` recorded worst cases from the first BO step at or
    after call `start` (`mmd_worst_cases.replay`, which imports no torch); prints the worst cases,
    the restricted programs and the answers' hash."""
    from mmd_worst_cases import replay as replay_calls

    calls = pickle.loads(path.read_bytes())
    while start < len(calls) and calls[start][0] != "prepare":
        start += 1
    chosen, solved = [], 0
    for call in calls[start:]:
        if call[0] == "solve":
            if solved == worst_cases:
                break
            solved += 1
        chosen.append(call)
    _, programs, digest = replay_calls(chosen)
    print(f"replayed {solved} {programs} {digest}")


def counted(path: Path, start: int, worst_cases: int, profile: Path | None) -> tuple[int, int, int, str]:
    """(instructions, worst cases, restricted programs, answers' hash) of one replay under callgrind
    (its profile written to `profile` if given)."""
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile or '/dev/null'}", sys.executable, __file__,
               "--calls", str(path), "--start", str(start), "--worst-cases", str(worst_cases), "--replay"]
    done = subprocess.run(command, capture_output=True, text=True)
    collected = re.search(r"Collected : (\d+)", done.stderr)
    replayed = re.search(r"replayed (\d+) (\d+) (\w+)", done.stdout)
    if done.returncode != 0 or collected is None or replayed is None:
        raise SystemExit(f"the replay under valgrind failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return int(collected.group(1)), int(replayed.group(1)), int(replayed.group(2)), replayed.group(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=Path, required=True, help="a recording of benchmarks/mmd_worst_cases.py --calls")
    parser.add_argument("--start", type=int, default=0, help="the first BO step at or after this recorded call")
    parser.add_argument("--worst-cases", type=int, default=1000, help="worst cases to replay")
    parser.add_argument("--profile", type=Path, default=None,
                        help="keep callgrind's profiles, FILE and FILE.baseline (the empty replay), for callgrind_annotate")
    parser.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)  # the child under valgrind
    args = parser.parse_args()
    if args.start < 0 or args.worst_cases < (0 if args.replay else 1):  # the baseline replays none
        parser.error("--start must be >= 0 and --worst-cases >= 1")
    if not args.calls.is_file():
        parser.error(f"--calls: no file {str(args.calls)!r} (record one with benchmarks/mmd_worst_cases.py --calls)")
    if args.replay:
        replay(args.calls, args.start, args.worst_cases)
        return
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed here (Debian: apt install valgrind)")
    try:
        calls = pickle.loads(args.calls.read_bytes())
        recorded = [call[0] for call in calls[args.start :]]
    except Exception as error:  # not a file mmd_worst_cases.py wrote
        parser.error(f"--calls: {str(args.calls)!r} is not a recording of mmd_worst_cases.py ({type(error).__name__})")
    if "prepare" not in recorded or "solve" not in recorded[recorded.index("prepare") :]:
        parser.error(f"--calls: no BO step recorded at or after call {args.start}")
    if args.profile is not None and not args.profile.parent.is_dir():
        parser.error(f"--profile: no folder {str(args.profile.parent)!r}")
    baseline_profile = None if args.profile is None else args.profile.with_name(args.profile.name + ".baseline")
    total, worst_cases, programs, digest = counted(args.calls, args.start, args.worst_cases, args.profile)
    baseline, _, _, _ = counted(args.calls, args.start, 0, baseline_profile)
    per_case = (total - baseline) / worst_cases
    print(f"{worst_cases} worst cases from call {args.start}: {programs} restricted programs, answers {digest}"
          f" (under valgrind), {per_case / 1e6:.3f} M instructions per worst case")


if __name__ == "__main__":
    main()
