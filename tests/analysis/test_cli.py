"""`wdrbo-dist summarize` and `report` on a study file whose store was filled with known runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.analysis.fakes import fill_store
from wdrbo_dist.cli import main
from wdrbo_dist.study.config import load_study_config


def write_config(folder: Path, name: str = "clitest", fidelity: str = "paper", tracking: str = "none") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\n"
        f"fidelity: {fidelity}\n"
        "problems: [ackley, newsvendor]\n"
        "algorithms: [wdrbo, erbo]\n"
        "seeds: [100, 101, 102]\n"
        "evaluations: 6\n"
        "init_size: 2\n"
        f"tracking_uri: {tracking}\n"
        f"output_dir: {folder / ('results-' + name)}\n"
    )
    return path


def regret_of(spec):
    if spec.problem == "newsvendor" and spec.algorithm == "erbo" and spec.seed == 102:
        return "diverged"
    if spec.problem == "newsvendor" and spec.algorithm == "erbo" and spec.seed == 101:
        return None
    base = 0.1 if spec.algorithm == "wdrbo" else 0.3
    return np.full(spec.evaluations, base + 0.01 * (spec.seed - 100))


@pytest.fixture()
def config(tmp_path):
    path = write_config(tmp_path)
    fill_store(load_study_config(path, validate_runs=False), regret_of)
    return path


def test_summarize_prints_the_main_table(config, tmp_path, capsys):
    code = main(["summarize", str(config), "--dashboards", str(tmp_path / "dash")])
    out = capsys.readouterr().out
    assert code == 0
    assert "| problem | WDRBO | ERBO |" in out
    # 6 steps x (0.1 + mean of .00, .01, .02) = 0.66 ± 6 * 0.01 / sqrt(3)
    assert "| Ackley | 0.660 ± 0.035 | 1.860 ± 0.035 |" in out
    assert "| Newsvendor | 0.660 ± 0.035 | 1.8 ± n/a [1/3; 1 failed, 1 missing] |" in out
    assert "12 expected, 10 finished, 1 failed, 1 missing" in out
    assert (tmp_path / "dash" / "clitest" / "summary.md").is_file()
    assert (tmp_path / "dash" / "clitest" / "tables" / "wilcoxon.csv").is_file()


def test_summarize_reference_metric(config, tmp_path, capsys):
    assert main(["summarize", str(config), "--metric", "regret_reference", "--dashboards", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| Ackley | 2.160 ± 0.035 |" in out  # + 6 x 0.25 offset of the fake records
    assert "published reference constant" in out


def test_bad_arguments_exit_2(config, tmp_path, capsys):
    assert main(["summarize", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["summarize", str(config), "--metric", "best_y"]) == 2
    assert "--metric must be one of regret, regret_reference" in capsys.readouterr().err
    assert main(["report", str(config), "--compare", str(tmp_path / "nowhere"), "--no-mlflow"]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "--no-mlflow"]) == 2
    assert "no finished or failed run here" in capsys.readouterr().err


def test_report_without_mlflow_and_with_a_comparison(config, tmp_path, capsys):
    other = write_config(tmp_path, name="clitest-ref", fidelity="reference")
    fill_store(load_study_config(other, validate_runs=False), regret_of)
    dash = tmp_path / "dash"
    code = main(["report", str(config), "--compare", str(other), "--dashboards", str(dash)])
    captured = capsys.readouterr()
    assert code == 0
    page = dash / "clitest" / "index.html"
    assert f"dashboard: {page.resolve()}" in captured.out
    assert "tracking_uri is none" in captured.err
    assert "fidelity paper" in captured.out and "fidelity reference" in captured.out
    assert (dash / "clitest" / "figures" / "fidelity_profiles.json").is_file()
    assert "1 failed, 1 missing" in page.read_text()
    assert (dash / "clitest" / "compare_clitest-ref" / "index.html").is_file()  # and the page of the two
