"""The study commands of `wdrbo-dist`: run, status, submit (added by cli.build_parser)."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from wdrbo_dist.cli.usage import UsageError
from wdrbo_dist.errors import ExitCode, one_line

if TYPE_CHECKING:
    from wdrbo_dist.driver.report import StudyReport


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a study (resumes: finished runs are skipped)")
    p.add_argument("config", help="a study YAML file, e.g. configs/quick.yaml")
    p.add_argument("--backend", help="serial | local | ray (default: the config's)")
    p.add_argument("--workers", type=int, help="runs in parallel (default: the config's)")
    p.add_argument("--address", help="ray only: `auto`, HOST:PORT or ray://HOST:10001 to join a cluster")
    p.add_argument("--force", action="store_true", help="re-run every run, finished ones included")
    p.add_argument("--rerun-failed", action="store_true", help="re-run the runs that failed before")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("status", help="a done / failed / missing matrix of a study")
    p.add_argument("config", help="a study YAML file, or a study's output folder")
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("submit", help="submit a study to a Ray cluster through the Ray Jobs API")
    p.add_argument("config")
    p.add_argument("--address", required=True, help="the Jobs API of the head node, http://HEAD:8265")
    p.add_argument("--workers", type=int, help="runs in flight on the cluster (default: the config's)")
    p.add_argument("--working-dir", default=".", help="the folder uploaded with the job (default: .)")
    p.add_argument("--force", action="store_true")
    p.add_argument("--rerun-failed", action="store_true")
    p.add_argument("--no-wait", action="store_true", help="return after submitting, do not follow the logs")
    p.set_defaults(handler=cmd_submit)


def _load(path: str, validate_runs: bool = True):
    from wdrbo_dist.study.config import ConfigError, load_study_config

    try:
        return load_study_config(path, validate_runs=validate_runs)
    except ConfigError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def report_lines(report: "StudyReport") -> list[str]:
    """The end-of-study summary of a `StudyReport`: counts, then one line per run to look at."""
    from wdrbo_dist.tracking.views import ui_lines

    p = report.plan
    out = [
        f"study {report.study.name}: {len(p.runs)} runs; this command: {len(report.finished)} finished, "
        f"{len(report.failed)} failed, {f'{len(report.lost)} lost, ' if report.lost else ''}"
        f"{len(p.finished)} skipped (already finished), "
        f"{len(p.failed)} skipped (failed before) in {report.wall_time_s:.1f} s",
    ]
    if report.cluster_gone:
        out.append(f"cluster gone: {report.cluster_gone}; {report.not_done} runs not done, every finished run "
                   f"is in the store; run the same command again when the cluster is back (exit {ExitCode.UNAVAILABLE:d})")
    elif report.write_error:
        out.append(f"output folder not writable: {report.write_error}; the runs in flight were cancelled, "
                   f"{report.not_done} runs not done, every run stored before is kept"
                   f"{'; ' + report.kept_elsewhere if report.kept_elsewhere else ''}; "
                   f"free space and run the same command again (exit {ExitCode.IO_ERROR:d})")
    elif report.interrupted:
        out.append(f"interrupted: {report.not_done} runs not done; run the same command again to finish them")
    for outcome in report.lost:
        out.append(f"LOST {outcome.task.spec.label} [{outcome.task.spec.run_key}] after {outcome.attempts} "
                   f"attempts: {one_line(outcome.lost)} (not FAILED: the same command runs it again)")
    for result in report.failed:
        last = (result.error or "").strip().splitlines()[-1:] or ["(no traceback)"]
        out.append(f"FAILED {result.spec.label} [{result.spec.run_key}]: {one_line(last[0])}")
    for spec in p.failed:
        out.append(f"FAILED before {spec.label} [{spec.run_key}] (re-run with --rerun-failed)")
    if report.failed or p.failed:
        out.append(f"tracebacks: {report.study.output_dir / 'failed'}/<run_key>.json")
    if report.store_warning:
        out.append(f"warning: {report.store_warning}")
    out.extend(f"warning: {w}" for w in report.tracking_warnings[:5])
    if report.runs_address:
        out += ui_lines({"": report.runs_address}, report.study.tracking_uri)
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from wdrbo_dist.execution.names import BACKENDS

    if args.backend is not None and args.backend not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {args.backend!r}")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be an integer >= 1, got {args.workers}")
    study = _load(args.config)
    backend = args.backend or study.backend
    if args.address and backend != "ray":
        raise UsageError(f"--address applies to the ray backend only (backend is {backend}); add --backend ray")
    from wdrbo_dist.execution.ray_backend import ClusterUnreachable
    from wdrbo_dist.storage.lock import FolderInUse
    from wdrbo_dist.storage.output_folder import FolderUnusable, OtherStudy, OutputWriteError, check_folder
    from wdrbo_dist.driver.study import run_study
    from wdrbo_dist.tracking.connection import TrackingError

    from wdrbo_dist.cli.ctrl_c import CtrlC
    from wdrbo_dist.cli.library_logs import library_logs_to, log_file, mention
    from wdrbo_dist.cli.progress import Progress

    libraries = (("mlflow",) if study.tracking_enabled else ()) + (("ray",) if backend == "ray" else ())
    ctrl_c = CtrlC()
    try:
        check_folder(study.output_dir)  # before the log file goes there
        with ctrl_c.terminate_interrupts(), library_logs_to(log_file(study.output_dir, "run"), libraries) as log:
            report = run_study(
                study, backend=backend, workers=args.workers, address=args.address,
                force=args.force, rerun_failed=args.rerun_failed, echo=_stderr, ctrl_c=ctrl_c,
                progress=None if args.quiet else (lambda tasks: Progress(tasks, True, _stderr)),
            )
    except KeyboardInterrupt:
        if ctrl_c.signum != signal.SIGTERM:
            raise
        print("terminated", file=sys.stderr)  # SIGTERM before or after the study loop
        return ExitCode.TERMINATED
    except (TrackingError, ClusterUnreachable, FolderUnusable, OtherStudy) as exc:
        raise UsageError(str(exc)) from None
    except FolderInUse as exc:
        print(f"wdrbo-dist run: error: {exc}", file=sys.stderr)
        return ExitCode.IN_USE
    except OutputWriteError as exc:
        print(f"wdrbo-dist run: error: {exc}; no run started; free space and run again", file=sys.stderr)
        return ExitCode.IO_ERROR
    for line in report_lines(report):
        print(line, flush=True)
    mention(log)
    if report.cluster_gone:
        from wdrbo_dist.execution.ray_backend import exit_if_abandoned

        exit_if_abandoned(ctrl_c.exit_code(report.exit_code))
    return ctrl_c.exit_code(report.exit_code)


def status_matrix(study) -> list[str]:
    """Rows problem x columns algorithm, each cell `done/failed/missing` over the seeds; then
    one line per damaged run (counted missing: `run` sets its files aside and runs it again)."""
    from wdrbo_dist.driver.plan import study_status

    status = study_status(study)
    width = max(len(p) for p in study.problems) + 2
    col = max(9, *(len(a) + 2 for a in study.algorithms))
    lines = [
        f"study {study.name} ({study.fidelity}, {len(study.seeds)} seeds, {study.evaluations} evaluations) "
        f"in {study.output_dir}",
        "cells: done/failed/missing over seeds",
        ("".ljust(width) + "".join(a.ljust(col) for a in study.algorithms)).rstrip(),
    ]
    for problem in study.problems:
        row = problem.ljust(width)
        for algorithm in study.algorithms:
            d, f, m = status.cells[(problem, algorithm)]
            row += f"{d}/{f}/{m}".ljust(col)
        lines.append(row.rstrip())
    d, f, m = status.totals
    lines.append(f"total: {d} done, {f} failed, {m} missing of {len(study.runs)}")
    lines.extend(f"{line} (counted missing; `run` sets it aside and runs it again)" for line in status.damaged)
    return lines + [line for line in status.notes if line]


def _study_of_folder(folder: Path):
    """The study an output folder's `study.json` names (the config it ran with), kept in this folder."""
    import json

    from wdrbo_dist.study.config import ConfigError, parse_study_config

    try:
        config = json.loads((folder / "study.json").read_text())["config"]
        return parse_study_config({**config, "output_dir": str(folder)}, source=folder / "study.json",
                                  validate_runs=False)
    except FileNotFoundError:
        raise UsageError(f"{folder}: no study.json here, so not a study's output folder; give the study file") from None
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:
        raise UsageError(f"{folder / 'study.json'}: unreadable ({one_line(exc, named=True)}); give the study file") from None


def cmd_status(args: argparse.Namespace) -> int:
    path = Path(args.config)
    study = _study_of_folder(path) if path.is_dir() else _load(args.config, validate_runs=False)
    for line in status_matrix(study):
        print(line)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    if not args.address.startswith(("http://", "https://")):
        raise UsageError(f"--address must be the Jobs API URL http(s)://HEAD:8265, got {one_line(repr(args.address), 100)}")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be an integer >= 1, got {args.workers}")
    study = _load(args.config)  # validated here, before anything is uploaded
    from wdrbo_dist.execution.submit import SubmitError, check_durable, submit_study

    try:
        check_durable(study.raw)  # results never go to Ray's temporary job folder
    except SubmitError as exc:
        raise UsageError(f"{args.config}: {exc}") from None

    extra = (["--force"] if args.force else []) + (["--rerun-failed"] if args.rerun_failed else []) + ["--quiet"]
    from wdrbo_dist.cli.library_logs import library_logs_to, log_file, mention

    try:
        with library_logs_to(log_file(study.output_dir, "submit"), ("ray",)) as log:
            job_id, status = submit_study(
                Path(args.config), args.address, study.name, Path(args.working_dir),
                workers=args.workers, extra_args=extra, wait=not args.no_wait,
            )
    except SubmitError as exc:
        raise UsageError(str(exc)) from None
    print(f"job {job_id}: {status}")
    mention(log)
    if args.no_wait:
        return 0
    return 0 if status == "SUCCEEDED" else 1
