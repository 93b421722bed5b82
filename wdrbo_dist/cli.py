"""The `wdrbo-dist` command line: thin parsing over the package's functions.

Bad input prints one line naming the argument and its allowed values, and exits with 2
before any work starts.

Exit codes: 0 done; 1 some runs failed; 2 bad input (argument, config, unreachable store or
address); 69 runs lost to the infrastructure or the cluster gone (run the same command again);
75 `run` refused because another driver is at work on the output folder (retry later);
130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from wdrbo_dist.threads import default_thread_environment

# The driver hands out runs and stores results; every run sets its own threads. One OpenMP /
# BLAS thread here, fixed before NumPy or torch is first imported, keeps the driver's thread
# pools off the cores the workers use (benchmarks/scaling.py --seeds 4 --backends local:
# 2 workers 1.80x one worker without it, 1.90x with it). Set them yourself to override.
default_thread_environment(1)


class UsageError(Exception):
    """A bad argument or config value; reported as one line with exit code 2."""


def _positive_int(name: str, value: int, minimum: int = 1) -> int:
    if value < minimum:
        raise UsageError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def _add_run_one(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run-one", help="run one algorithm x problem x seed and write its records")
    p.add_argument("--algorithm", required=True)
    p.add_argument("--problem", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--evaluations", type=int, default=100, help="total evaluations, initial design included")
    p.add_argument("--init-size", type=int, default=5)
    p.add_argument("--fidelity", default="paper", help="paper | reference")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE",
        help="an algorithm option or fidelity switch (repeatable); see `wdrbo-dist list`",
    )
    p.add_argument("--out", required=True, help="output parquet file")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_cmd_run_one)


def _add_list(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list the registered problems and algorithms")
    p.set_defaults(handler=_cmd_list)


def parse_option(text: str) -> tuple[str, bool | int | float | str]:
    """`key=value` with the value read as bool, int, float or string, in that order."""
    if "=" not in text:
        raise UsageError(f"--option must look like KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return key.strip(), lowered == "true"
    for cast in (int, float):
        try:
            return key.strip(), cast(raw)
        except ValueError:
            pass
    return key.strip(), raw


def _cmd_run_one(args: argparse.Namespace) -> int:
    from wdrbo_dist.run import RunSpec, run_one, validate_spec

    options = dict(parse_option(o) for o in args.option)
    spec = RunSpec.make(
        options=options,
        algorithm=args.algorithm,
        problem=args.problem,
        seed=args.seed,
        evaluations=args.evaluations,
        init_size=args.init_size,
        fidelity=args.fidelity,
        device=args.device,
    )
    try:
        validate_spec(spec)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not args.out.endswith(".parquet"):
        raise UsageError(f"--out must name a .parquet file, got {args.out!r}")
    result = run_one(spec, progress=not args.quiet, capture_errors=False)
    from wdrbo_dist.store import write_parquet_atomic

    write_parquet_atomic(result.records, args.out)
    final = result.summary()
    print(
        f"{spec.label}: {len(result.records)} evaluations in {result.wall_time_s:.1f} s, "
        f"final cumulative regret {final['final_cumulative_regret']:.4f} -> {args.out}"
    )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from wdrbo_dist.algorithms import ALGORITHMS
    from wdrbo_dist.problems import PROBLEMS, make_problem

    print("problems:")
    for name in PROBLEMS:
        problem = make_problem(name)
        print(f"  {name:<20} d_x={problem.dim_x} d_c={problem.dim_c}")
    print("algorithms:")
    for name, entry in ALGORITHMS.items():
        print(f"  {name:<20} {entry.description}")
        for option_name, option in entry.declared_options().items():
            note = f"; {option.note}" if option.note else ""
            print(f"      {option_name} (paper: {option.paper}, reference: {option.reference}){note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wdrbo-dist", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_one(sub)
    _add_list(sub)
    # Study and report commands live in their own modules, each adding its subcommands.
    from wdrbo_dist import cli_report, cli_study

    for module in (cli_study, cli_report):
        module.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except UsageError as exc:
        print(f"wdrbo-dist {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
