"""The `wdrbo-dist` command line: thin parsing over the package's functions.

Bad input prints one line naming the argument and its allowed values, and exits with 2
before any work starts. The exit codes are `wdrbo_dist.errors.ExitCode` (`--help` lists them).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from wdrbo_dist.execution.threads import default_thread_environment

# The driver hands out runs and stores results; every run sets its own threads. One OpenMP /
# BLAS thread here, fixed before NumPy or torch is first imported, keeps the driver's thread
# pools off the cores the workers use (benchmarks/runner/workers.py --seeds 4 --backends local:
# 2 workers 1.80x one worker without it, 1.90x with it). Set them yourself to override.
default_thread_environment(1)

from wdrbo_dist.cli.usage import UsageError, parse_option  # noqa: E402 - after the thread settings
from wdrbo_dist.errors import ExitCode  # noqa: E402

__all__ = ["UsageError", "build_parser", "main", "parse_option"]


def _add_list(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list the registered problems and algorithms")
    p.set_defaults(handler=_cmd_list)


def _cmd_list(args: argparse.Namespace) -> int:
    from wdrbo_dist.acquisition.registry import ALGORITHMS
    from wdrbo_dist.problems import PROBLEMS, make_problem

    print("problems:")
    for name in PROBLEMS:
        problem = make_problem(name)
        print(f"  {name:<20} d_x={problem.dim_x} d_c={problem.dim_c}")
    print("algorithms:")
    for name, entry in ALGORITHMS.items():
        print(f"  {name:<20} {entry.description}")
        for option_name, option in entry.read_options().items():
            note = f"; {option.note}" if option.note else ""
            print(f"      {option_name} (paper: {option.paper}, reference: {option.reference}){note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    epilog = "exit codes: " + "; ".join(f"{code:d} {code.meaning}" for code in ExitCode)
    parser = argparse.ArgumentParser(prog="wdrbo-dist", description=__doc__, epilog=epilog)
    sub = parser.add_subparsers(dest="command", required=True)
    # Each command group lives in its own module, which adds its subcommands.
    from wdrbo_dist.cli import report, run_one, study

    run_one.add_commands(sub)
    _add_list(sub)
    for module in (study, report):
        module.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except UsageError as exc:
        print(f"wdrbo-dist {args.command}: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
