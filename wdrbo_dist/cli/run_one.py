"""The `run-one` command: one algorithm x problem x seed, its records to a parquet file.

An `--out` that cannot be written stops before the run; a write that fails after it (a full
disk) puts the records in a folder elsewhere, named on the error line (exit 74).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wdrbo_dist.cli.usage import UsageError, parse_option
from wdrbo_dist.errors import ExitCode


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
    from wdrbo_dist.run.spec import RunSpec, validate_spec
    from wdrbo_dist.run.loop import run_one

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
    from wdrbo_dist.storage.output_folder import FolderUnusable, check_folder

    try:
        if Path(args.out).is_dir():
            raise FolderUnusable(f"--out {args.out}: is a folder; name a .parquet file")
        check_folder(Path(args.out).parent, f"--out {args.out}: its folder")
    except FolderUnusable as exc:
        raise UsageError(str(exc)) from None
    result = run_one(spec, progress=not args.quiet, capture_errors=False)
    from wdrbo_dist.storage.atomic import write_parquet_atomic

    try:
        write_parquet_atomic(result.records, args.out)
    except OSError as exc:
        return _keep(result, args.out, exc)
    final = result.summary()
    print(
        f"{spec.label}: {len(result.records)} evaluations in {result.wall_time_s:.1f} s, "
        f"final cumulative regret {final['final_cumulative_regret']:.4f} -> {args.out}"
    )
    return 0


def _keep(result, out: str, exc: OSError) -> int:
    """The run finished but `out` cannot be written: its records go elsewhere, named in one line."""
    from wdrbo_dist.storage.atomic import write_parquet_atomic
    from wdrbo_dist.storage.output_folder import keep_elsewhere, reason

    name = Path(out).name
    folder, why = keep_elsewhere(result.spec.label.replace("|", "_"),
                                 lambda root: write_parquet_atomic(result.records, root / name))
    kept = f"the records are in {folder / name}" if folder is not None else f"the records are lost too ({why})"
    print(f"wdrbo-dist run-one: error: cannot write {out} ({reason(exc)}); the run "
          f"finished and {kept}", file=sys.stderr)
    return ExitCode.IO_ERROR
