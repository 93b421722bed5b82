"""What the benchmark scripts share: one thread, set when this module is imported, and the
command-line arguments several of them take.

A script run as a file (`.venv/bin/python benchmarks/speed/routes.py`) has only its own folder
on sys.path, so each one starts with the same two lines, before any other import of its own:

    sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks`, `tests`

    from benchmarks import harness  # first: one thread, before NumPy or torch is imported

Importing this module sets every OpenMP / BLAS thread variable the user has not set to one
(`default_thread_environment`, as the CLI's driver does and a Ray task with num_cpus=1 runs),
so that NumPy and torch, imported after it, start one thread; the rest of a script's imports
are then ordinary imports at the top of the file. This module imports neither NumPy nor torch:
the helpers below import the package when they are called. The root goes at the end of sys.path
so that a PYTHONPATH given to a script (fidelity.py's `--paired-against` tree) comes first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from wdrbo_dist.execution.threads import default_thread_environment

if TYPE_CHECKING:
    from wdrbo_dist.run.spec import RunSpec

THREADS = 1  # every script measures one thread per run
default_thread_environment(THREADS)

ROOT = Path(__file__).resolve().parents[1]  # the repo root (configs/, docs/)
FIDELITIES = ("paper", "reference")


def count(text: str) -> int:
    """An argparse type for --seeds, --workers, --evaluations and the like: a whole number >= 1
    (else one line, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def option(text: str) -> tuple[str, object]:
    """An argparse type for --option: KEY=VALUE, the value read as `wdrbo-dist run --option` reads
    it (bool, int, float or string); `dict(args.option)` gives the options."""
    from wdrbo_dist.cli.usage import UsageError, parse_option

    try:
        return parse_option(text)
    except UsageError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--option ")) from None


def add_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """--option KEY=VALUE, any number of times (`option`)."""
    parser.add_argument("--option", action="append", type=option, default=[], metavar="KEY=VALUE", help=help)


def add_seeds(parser: argparse.ArgumentParser, default: int | None, help: str | None = "how many seeds") -> None:
    """--seeds N: how many seeds (`count`)."""
    parser.add_argument("--seeds", type=count, default=default, help=help)


def add_evaluations(parser: argparse.ArgumentParser, default: int | None = 100, help: str | None = None) -> None:
    """--evaluations N: evaluations per run (`count`)."""
    parser.add_argument("--evaluations", type=count, default=default, help=help)


def add_workers(parser: argparse.ArgumentParser, default: int = 2, help: str | None = None) -> None:
    """--workers N: runs side by side (`count`)."""
    parser.add_argument("--workers", type=count, default=default, help=help)


def add_algorithms(parser: argparse.ArgumentParser, every: bool = True, help: str | None = None) -> None:
    """--algorithms NAME ...: registered algorithms (default: every one, or None with every=False)."""
    from wdrbo_dist.acquisition.registry import ALGORITHMS

    parser.add_argument("--algorithms", nargs="+", choices=list(ALGORITHMS),
                        default=list(ALGORITHMS) if every else None, help=help)


def add_problems(parser: argparse.ArgumentParser, default: list[str] | None, help: str | None = None) -> None:
    """--problems NAME ...: registered problems."""
    from wdrbo_dist.problems import problem_names

    parser.add_argument("--problems", nargs="+", choices=problem_names(), default=default, help=help)


def add_fidelity(parser: argparse.ArgumentParser, default: str | None = "paper", help: str | None = None) -> None:
    """--fidelity paper|reference: the profile."""
    parser.add_argument("--fidelity", choices=list(FIDELITIES), default=default, help=help)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The runs a per-run benchmark measures: --algorithms (all), --problem, --evaluations, --seed."""
    from wdrbo_dist.problems import problem_names

    add_algorithms(parser)
    parser.add_argument("--problem", default="ackley", choices=problem_names())
    add_evaluations(parser)
    parser.add_argument("--seed", type=int, default=100)


def check_spec(spec: RunSpec) -> None:
    """The package's own check of a run (`validate_spec`), before any runs: a bad field is one
    line naming it and its allowed values, exit 2."""
    from wdrbo_dist.run.spec import validate_spec

    try:
        validate_spec(spec)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def checked_specs(args: argparse.Namespace, options: dict | None = None) -> dict[str, RunSpec]:
    """Each algorithm's run of `add_run_arguments`' fields (and `options`, for the algorithms
    that declare them), all checked before any runs: a bad field is one line and exit 2."""
    from wdrbo_dist.acquisition.registry import ALGORITHMS
    from wdrbo_dist.run.spec import RunSpec

    specs = {}
    for name in args.algorithms:
        declared = ALGORITHMS[name].declared_options()
        given = {key: value for key, value in (options or {}).items() if key in declared}
        specs[name] = RunSpec.make(algorithm=name, problem=args.problem, seed=args.seed, evaluations=args.evaluations,
                                   fidelity=getattr(args, "fidelity", "paper"), options=given)
        check_spec(specs[name])
    return specs


def add_published_arguments(parser: argparse.ArgumentParser, required: bool = False,
                            help: str = "the published code's checkout (unmodified, commit 75f891a)") -> None:
    """--published, --published-python and --cache: the fidelity benchmarks' published code
    (benchmarks/fidelity/published.py) and the folder that caches both codes' runs."""
    parser.add_argument("--published", required=required, help=help)
    parser.add_argument("--published-python", help="its venv's python (default: PUBLISHED/venv/bin/python)")
    parser.add_argument("--cache", default=str(Path("~/.cache/wdrbo-dist/fidelity").expanduser()))
