"""The `run-one` command: one algorithm x problem x seed, its records to a parquet file."""

from __future__ import annotations

import argparse

from wdrbo_dist.cli.usage import UsageError, parse_option


def add_commands(sub: argparse._SubParsersAction) -> None:
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
    from wdrbo_dist.atomic import write_parquet_atomic

    write_parquet_atomic(result.records, args.out)
    final = result.summary()
    print(
        f"{spec.label}: {len(result.records)} evaluations in {result.wall_time_s:.1f} s, "
        f"final cumulative regret {final['final_cumulative_regret']:.4f} -> {args.out}"
    )
    return 0
