"""`wdrbo-dist summarize` and `report` on a study file whose store was filled with known runs."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
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
    # A's table and header are A's alone; B's profile is only drawn beside it
    assert "fidelity paper" in captured.out and "fidelity reference" not in captured.out
    assert (dash / "clitest" / "figures" / "fidelity_profiles.json").is_file()
    assert "1 failed, 1 missing" in page.read_text()
    assert "Fidelity: paper ·" in page.read_text() and "— <code>reference</code>" not in page.read_text()
    assert (dash / "clitest" / "compare_clitest-ref" / "index.html").is_file()  # and the page of the two


def _rewrite_stored_specs(folder: Path, version: str | None = None, **fields) -> int:
    """Set `fields` in the spec of every stored meta (finished and failed), sealed again: a store
    crafted by hand (another `version` wrote it: its keys are not checked against its specs)."""
    import json

    from wdrbo_dist.storage.integrity import seal

    count = 0
    for meta in [*folder.glob("runs/*.json"), *folder.glob("failed/*.json")]:
        data = json.loads(meta.read_text())
        data["spec"].update(fields)
        if version is not None:
            data["version"] = version
        meta.write_text(json.dumps(seal(data)))
        count += 1
    return count


@pytest.mark.parametrize("stored", ["/abs/path", "../x", "..", "a/../../b", "n" * 300])
def test_a_stored_study_name_never_takes_the_output_outside_the_dashboards(config, tmp_path, capsys, stored):
    folder = tmp_path / "results-clitest"
    outside = tmp_path / "outside"
    if stored.startswith("/"):
        stored = str(outside / "abs")
    assert _rewrite_stored_specs(folder, study=stored) == 11
    dash = tmp_path / "nest" / "dash"
    before = {p for p in tmp_path.rglob("*") if not p.is_relative_to(dash.parent)}
    assert main(["summarize", str(folder), "--dashboards", str(dash)]) == 0, capsys.readouterr().err
    assert (dash / "results-clitest" / "summary.md").is_file()  # the folder's name stands in for the study's
    after = {p for p in tmp_path.rglob("*") if not p.is_relative_to(dash.parent)}
    assert after == before and not outside.exists()
    assert main(["report", str(folder), "--dashboards", str(dash), "--no-mlflow"]) == 0
    assert (dash / "results-clitest" / "index.html").is_file()
    assert {p for p in tmp_path.rglob("*") if not p.is_relative_to(dash.parent)} == before


def test_a_stored_fidelity_that_is_no_fidelity_is_one_line_exit_2(config, tmp_path, capsys):
    folder = tmp_path / "results-clitest"
    _rewrite_stored_specs(folder, version="0.0.1", fidelity="../../evil")
    dash = tmp_path / "dash"
    assert main(["report", str(folder), "--dashboards", str(dash), "--no-mlflow"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "spec.fidelity: must be one of paper, reference" in line and len(line) < 400, line
    assert not list(tmp_path.rglob("*evil*")) and not dash.exists()


def test_study_folder_stays_inside_the_dashboards(tmp_path):
    from wdrbo_dist.analysis.report import study_folder

    assert study_folder(tmp_path, "ok-name") == tmp_path / "ok-name"
    for name in ("..", ".", "", "a/b", "/abs", "a\0b", "n" * 256):
        with pytest.raises(ValueError):
            study_folder(tmp_path, name)


def write_variants(folder: Path) -> Path:
    """The test study with two variants of WDRBO and no plain `wdrbo`."""
    path = write_config(folder, name="variants")
    variants = "algorithms:\n  - {name: wdrbo, options: {radius_constant: [0.1, 1.0]}}\n  - erbo"
    path.write_text(path.read_text().replace("algorithms: [wdrbo, erbo]", variants))
    fill_store(load_study_config(path, validate_runs=False), regret_of)
    return path


def test_reference_chooses_the_method_tested_against_the_others(config, tmp_path, capsys):
    dash = tmp_path / "dash"
    assert main(["summarize", str(config), "--dashboards", str(dash), "--reference", "erbo"]) == 0
    capsys.readouterr()
    tests = pd.read_csv(dash / "clitest" / "tables" / "wilcoxon.csv")
    assert set(tests["reference"]) == {"erbo"} and set(tests["baseline"]) == {"wdrbo"}
    assert "ERBO vs each baseline" in (dash / "clitest" / "summary.md").read_text()
    poi = pd.read_csv(dash / "clitest" / "tables" / "probability_of_improvement.csv")
    assert set(poi["reference"]) == {"erbo"}


def test_a_variant_label_is_a_reference_and_a_missing_one_is_one_line(tmp_path, capsys):
    path = write_variants(tmp_path)
    dash = tmp_path / "dash"
    assert main(["report", str(path), "--dashboards", str(dash), "--no-mlflow"]) == 0
    out = capsys.readouterr().out
    line = ("No reference method: 'wdrbo' is not a method of this study (the default reference; choose one with "
            "--reference LABEL; its methods: wdrbo[radius_constant=0.1], wdrbo[radius_constant=1.0], erbo)")
    assert line in out  # printed with the table, and on the page and in summary.md
    assert line in html.unescape((dash / "variants" / "index.html").read_text())
    assert line in (dash / "variants" / "summary.md").read_text()
    assert pd.read_csv(dash / "variants" / "tables" / "wilcoxon.csv").empty
    label = "wdrbo[radius_constant=0.1]"
    assert main(["report", str(path), "--dashboards", str(dash), "--no-mlflow", "--reference", label]) == 0
    assert "No reference method" not in capsys.readouterr().out
    tests = pd.read_csv(dash / "variants" / "tables" / "wilcoxon.csv")
    assert set(tests["reference"]) == {label} and set(tests["baseline"]) == {"wdrbo[radius_constant=1.0]", "erbo"}
    assert f"{label} vs each baseline" in html.unescape((dash / "variants" / "index.html").read_text())
    assert main(["summarize", str(path), "--dashboards", str(dash), "--reference", "nope"]) == 0
    assert "No reference method: 'nope' is not a method of this study (--reference;" in capsys.readouterr().out
