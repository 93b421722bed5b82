"""The `wdrbo-dist` command line as a user runs it: a real subprocess of the console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from wdrbo_dist.run.records import CORE_COLUMNS, deterministic_part

CLI = [str(Path(sys.executable).with_name("wdrbo-dist"))]
FAST = ["--option", "raw_samples=32", "--option", "num_restarts=2"]


def wdrbo_dist(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=300)


def test_list_names_every_problem_and_algorithm() -> None:
    out = wdrbo_dist("list")
    assert out.returncode == 0, out.stderr
    for name in ("ackley", "portfolio-normal", "toy-general", "wdrbo", "erbo", "gp-ucb", "radius_constant"):
        assert name in out.stdout


def test_run_one_writes_one_row_per_evaluation_and_is_repeatable(tmp_path: Path) -> None:
    args = ["run-one", "--algorithm", "wdrbo", "--problem", "newsvendor", "--seed", "7", "--evaluations", "8", "--init-size", "4", *FAST]
    first = wdrbo_dist(*args, "--out", str(tmp_path / "a.parquet"))
    assert first.returncode == 0, first.stderr
    assert "newsvendor|wdrbo|s7: 8 evaluations" in first.stdout
    second = wdrbo_dist(*args, "--quiet", "--out", str(tmp_path / "b.parquet"))
    assert second.returncode == 0, second.stderr
    a, b = pd.read_parquet(tmp_path / "a.parquet"), pd.read_parquet(tmp_path / "b.parquet")
    assert len(a) == 8 and {"x_0", "c_0", *CORE_COLUMNS} <= set(a.columns)
    pd.testing.assert_frame_equal(deterministic_part(a), deterministic_part(b), check_exact=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--algorithm", "nope"], "algorithm: unknown 'nope'; allowed: wdrbo, erbo, gp-ucb"),
        (["--problem", "nope"], "problem: unknown 'nope'; allowed: ackley, hartmann"),
        (["--seed", "-3"], "seed: must be an integer >= 0, got -3"),
        (["--evaluations", "5"], "evaluations: must be an integer > init_size (5), got 5"),
        (["--fidelity", "exact"], "fidelity: unknown 'exact'; allowed: paper, reference"),
        (["--device", "cuda"], "device: 'cuda' is not available here; allowed: cpu"),
        (["--option", "beta"], "--option must look like KEY=VALUE"),
        (["--option", "radius=1"], "unknown option 'radius' for algorithm 'erbo'"),
        (["--out", "x.csv"], "--out must name a .parquet file"),
    ],
)
def test_bad_input_gets_one_clear_line_and_exit_code_2(args: list[str], message: str, tmp_path: Path) -> None:
    base = {"--algorithm": "erbo", "--problem": "ackley", "--seed": "1", "--evaluations": "10", "--out": str(tmp_path / "r.parquet")}
    flags = dict(zip(args[::2], args[1::2]))
    argv = ["run-one"]
    for key, value in {**base, **{k: v for k, v in flags.items() if k != "--option"}}.items():
        argv += [key, value]
    if "--option" in flags:
        argv += ["--option", flags["--option"]]
    out = wdrbo_dist(*argv)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert not (tmp_path / "r.parquet").exists()


def test_library_notices_go_to_the_log_and_their_errors_still_show(tmp_path, capsys) -> None:
    import logging

    from wdrbo_dist.cli.library_logs import library_logs_to, log_file

    path = log_file(tmp_path, "run")
    with library_logs_to(path, imports=("mlflow",)):  # MLflow sets its loggers to INFO on import
        logging.getLogger("ray._private.something").warning("a notice nobody can act on")
        logging.getLogger("mlflow.store").info("creating tables")
        logging.getLogger("mlflow.tracking").error("the server refused the run")
    logging.getLogger("ray").warning("after the block: not in the log")
    err = capsys.readouterr().err
    assert "a notice" not in err and "creating tables" not in err
    assert "mlflow.tracking: ERROR: the server refused the run" in err
    text = path.read_text()
    assert "a notice nobody can act on" in text and "creating tables" in text and "after the block" not in text


def test_list_shows_only_the_options_an_algorithm_reads(capsys) -> None:
    """Random search fits no GP and maximises no acquisition: `list` shows none of their options."""
    from wdrbo_dist.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    random_block = out.split("  random ", 1)[1].split("\n  ", 1)[0]
    assert "beta" not in random_block and "num_restarts" not in random_block
    wdrbo_block = out.split("  wdrbo ", 1)[1]
    assert "beta (paper: 1.5" in wdrbo_block
