"""The analysis commands of `wdrbo-dist`: summarize and report (added by cli.build_parser)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wdrbo_dist.cli.usage import UsageError, read_study
from wdrbo_dist.errors import ExitCode, one_line

METRICS = ("regret", "regret_reference")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="a study YAML file, e.g. configs/quick.yaml, or a study's output folder")
    p.add_argument("--metric", default="regret",
                   help="regret (against the exact optimum, default) | regret_reference (the published constants)")
    p.add_argument("--exclude-initial", action="store_true",
                   help="leave the initial design out of the cumulative regret")
    p.add_argument("--compare", metavar="CONFIG_OR_FOLDER",
                   help="another study (a YAML file or an output folder): a page comparing the two cell by cell "
                        "(compare_<name>/ in the dashboard folder); a study in the other fidelity profile is "
                        "also drawn side by side on the dashboard")
    p.add_argument("--dashboards", default="dashboards",
                   help="folder holding one sub-folder per study (default: dashboards)")
    p.add_argument("--reference", metavar="LABEL", default=None,
                   help="the method tested against every other, e.g. wdrbo[radius_constant=0.1] (default: wdrbo "
                        "where the study has it; the page says so when it has no such method)")


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("summarize", help="summary tables (CSV + markdown) of a study, from its parquet store")
    _common(p)
    p.set_defaults(handler=cmd_summarize)
    p = sub.add_parser("report", help="the HTML dashboard of a study; also logged to its MLflow parent run")
    _common(p)
    p.add_argument("--no-mlflow", action="store_true", help="write the dashboard only, log nothing to MLflow")
    p.set_defaults(handler=cmd_report)


def _check_dashboards(folder: str) -> None:
    from wdrbo_dist.storage.output_folder import FolderUnusable, check_folder

    try:
        check_folder(folder, "--dashboards")
    except FolderUnusable as exc:
        raise UsageError(str(exc)) from None


def _dashboard_write_failed(exc: OSError, folder: Path, command: str) -> int:
    """A write into the dashboard folder failed during work (a full disk): one line, exit 74."""
    from wdrbo_dist.storage.output_folder import reason

    print(f"wdrbo-dist {command}: error: cannot write {exc.filename or folder} ({reason(exc)}); the "
          f"study's store is untouched: free space and run the same command again", file=sys.stderr)
    return ExitCode.IO_ERROR


def _load_data(args: argparse.Namespace):
    """The study of `config` (with `--compare`'s drawn beside it when that is the other
    profile), and the two studies of the comparison page (None without `--compare`)."""
    from wdrbo_dist.analysis.load import Metric, load_study

    if args.metric not in METRICS:
        raise UsageError(f"--metric must be one of {', '.join(METRICS)}, got {args.metric!r}")
    metric = Metric(column=args.metric, include_initial=not args.exclude_initial)
    _check_dashboards(args.dashboards)
    study = read_study(args.config)
    other = read_study(args.compare) if args.compare else None
    beside = other is not None and bool(study.fidelity) and bool(other.fidelity) and study.fidelity != other.fidelity
    data = load_study([study, other] if beside else [study], metric)
    pair = (load_study([study], metric), load_study([other], metric)) if other is not None else None
    return study, data, pair


def _folders(args: argparse.Namespace, study, pair) -> tuple[Path, Path | None]:
    """The study's dashboard folder and its comparison's (None without one), both checked to lie
    inside --dashboards before anything is written: a study's name may come from a stored file."""
    from wdrbo_dist.analysis.report import study_folder

    try:
        folder = study_folder(Path(args.dashboards), study.name)
        return folder, study_folder(folder, f"compare_{pair[1].name}") if pair is not None else None
    except ValueError as exc:
        raise UsageError(f"--dashboards {args.dashboards}: the study's name {exc}") from None


def _write_comparison(args: argparse.Namespace, folder: Path, pair, page: bool) -> None:
    from wdrbo_dist.analysis.comparison import comparison_display, write_comparison
    from wdrbo_dist.analysis.tables import to_markdown

    a, b = pair
    cells, files = write_comparison(a, b, folder, (args.config, args.compare), page=page)
    print(f"\nA = {a.name} ({args.config}), B = {b.name} ({args.compare}): final cumulative regret, B / A")
    print(to_markdown(comparison_display(cells, "A", "B")))
    print(f"comparison: {(files.page if page else files.summary).resolve()}")


def cmd_summarize(args: argparse.Namespace) -> int:
    from wdrbo_dist.analysis.report import main_table_text, summarize

    study, data, pair = _load_data(args)
    folder, compare = _folders(args, study, pair)
    try:
        tables, files = summarize(data, folder, reference=args.reference)
    except OSError as exc:
        return _dashboard_write_failed(exc, folder, "summarize")
    print(main_table_text(data, tables))
    print(f"tables: {files.summary} and {len(files.tables)} files in {files.folder / 'tables'}")
    if pair is not None:
        _write_comparison(args, compare, pair, page=False)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from wdrbo_dist.analysis.report import aggregate_cells, build_report, main_table_text
    from wdrbo_dist.errors import redact
    from wdrbo_dist.tracking.publish import MlflowDown, MlflowUnavailable, log_report

    study, data, pair = _load_data(args)
    folder, compare = _folders(args, study, pair)
    uri = redact(study.tracking_uri)  # as messages show it
    source = args.config  # as the user named it: no machine path on the page
    try:
        tables, files = build_report(data, folder, source=source, reference=args.reference)
    except OSError as exc:
        return _dashboard_write_failed(exc, folder, "report")
    print(main_table_text(data, tables))
    if pair is not None:  # inside the dashboard folder: MLflow keeps it with the dashboard
        _write_comparison(args, compare, pair, page=True)
    status = ExitCode.OK
    if args.no_mlflow:
        pass
    elif Path(args.config).is_dir():
        print("MLflow: an output folder names no tracking store; nothing logged", file=sys.stderr)
    elif not study.tracking_enabled:
        print("MLflow: tracking_uri is none; nothing logged", file=sys.stderr)
    else:
        try:
            cells = aggregate_cells(data, tables, study.fidelity)
            ids = log_report(study.tracking_uri, study.name, files.folder, cells)
        except MlflowUnavailable as exc:
            print(f"MLflow: {redact(str(exc))}; nothing logged", file=sys.stderr)
        except MlflowDown as exc:
            print(f"MLflow: {redact(str(exc))}; the dashboard is written, nothing logged: "
                  "run `report` again once it answers", file=sys.stderr)
            status = ExitCode.RUNS_FAILED
        except Exception as exc:  # noqa: BLE001 - the dashboard is written; say why MLflow is not
            print(f"MLflow: logging to {uri} failed: {redact(one_line(exc, named=True))}", file=sys.stderr)
            status = ExitCode.RUNS_FAILED
        else:
            print(f"MLflow: dashboard logged to parent run {ids['parent_run_id']} and "
                  f"{len(ids['aggregate_run_ids'])} aggregate runs (tag role=aggregate) in {uri}")
            from wdrbo_dist.tracking.views import ui_lines

            for line in ui_lines({"the runs": ids["runs_view"], **ids["comparison_views"]}, uri):
                print(line)
    print(f"dashboard: {files.page.resolve()}")
    return status
