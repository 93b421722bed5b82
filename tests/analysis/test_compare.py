"""`report A --compare B`: any two studies, as configs or output folders, compared cell by cell."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.analysis.fakes import fill_store
from tests.analysis.test_cli import regret_of, write_config
from wdrbo_dist.analysis.comparison import compare_cells, comparison_display
from wdrbo_dist.analysis.folder_study import study_from_folder
from wdrbo_dist.analysis.load import load_study
from wdrbo_dist.cli import main
from wdrbo_dist.study.config import load_study_config


def write_setting(folder, name: str, init_size: int, seeds: str = "[100, 101, 102]"):
    """The test study with another initial design size (and, optionally, other seeds)."""
    path = write_config(folder, name=name)
    text = path.read_text().replace("init_size: 2", f"init_size: {init_size}").replace("[100, 101, 102]", seeds)
    path.write_text(text)
    return path


def doubled(spec):
    """Twice the regret of the test study's run of the same cell and seed."""
    base = regret_of(spec)
    return base if isinstance(base, str) or base is None else 2 * np.asarray(base)


@pytest.fixture()
def two(tmp_path):
    a = write_config(tmp_path, name="init2")
    b = write_setting(tmp_path, "init3", init_size=3)
    fill_store(load_study_config(a, validate_runs=False), regret_of)
    fill_store(load_study_config(b, validate_runs=False), doubled)
    return a, b


def test_two_settings_of_one_profile_compare_cell_by_cell(two, tmp_path, capsys):
    a, b = two
    dash = tmp_path / "dash"
    assert main(["report", str(a), "--compare", str(b), "--dashboards", str(dash), "--no-mlflow"]) == 0
    out = capsys.readouterr().out
    folder = dash / "init2" / "compare_init3"
    assert f"comparison: {(folder / 'index.html').resolve()}" in out
    cells = pd.read_csv(folder / "comparison.csv").set_index(["problem", "algorithm"])
    assert list(cells.index) == [("ackley", "wdrbo"), ("ackley", "erbo"), ("newsvendor", "wdrbo"),
                                 ("newsvendor", "erbo")]
    # every paired seed doubles its regret: the Hodges-Lehmann ratio is 2; 3 pairs allow no 95 % interval
    ackley = cells.loc[("ackley", "wdrbo")]
    assert ackley["ratio"] == pytest.approx(2.0) and np.isnan(ackley["low"]) and np.isnan(ackley["high"])
    assert ackley["test"].startswith("Wilcoxon") and ackley["n_pairs"] == 3
    assert ackley["pvalue"] == pytest.approx(0.25)  # exact two-sided p of 3 positive differences
    assert ackley["smallest_p"] == pytest.approx(0.25)
    # newsvendor/erbo finished one seed in each study: not paired, Mann-Whitney U on 1 vs 1
    lone = cells.loc[("newsvendor", "erbo")]
    assert lone["n_pairs"] == 0 and lone["test"] == "Mann-Whitney U" and lone["ratio"] == pytest.approx(2.0)
    page = (folder / "index.html").read_text()
    assert "Ratio of final cumulative regrets, B / A" in page and "fig-ratio" in page
    assert (dash / "init2" / "index.html").is_file()  # A's own dashboard as well


def test_output_folders_compare_like_configs_and_unpaired_seeds_use_mann_whitney(two, tmp_path, capsys):
    a, _ = two
    c = write_setting(tmp_path, "other-seeds", init_size=2, seeds="[200, 201, 202]")
    fill_store(load_study_config(c, validate_runs=False), lambda s: np.full(s.evaluations, 0.2 + 0.01 * (s.seed - 200)))
    out_a, out_c = tmp_path / "results-init2", tmp_path / "results-other-seeds"
    dash = tmp_path / "dash"
    assert main(["summarize", str(out_a), "--compare", str(out_c), "--dashboards", str(dash)]) == 0
    capsys.readouterr()
    cells = pd.read_csv(dash / "init2" / "compare_other-seeds" / "comparison.csv").set_index(["problem", "algorithm"])
    row = cells.loc[("ackley", "wdrbo")]
    a_values, c_values = 6 * np.array([0.10, 0.11, 0.12]), 6 * np.array([0.20, 0.21, 0.22])
    assert row["n_pairs"] == 0 and row["test"] == "Mann-Whitney U"
    # the Hodges-Lehmann ratio: the median of every c_j / a_i
    assert row["ratio"] == pytest.approx(np.median(c_values[None, :] / a_values[:, None]))
    assert row["pvalue"] == pytest.approx(stats.mannwhitneyu(a_values, c_values, alternative="two-sided").pvalue)


def test_a_folder_reads_back_its_runs_under_their_stored_keys(two, tmp_path):
    a, _ = two
    study = study_from_folder(tmp_path / "results-init2")
    config = load_study_config(a, validate_runs=False)
    assert study.name == "init2" and study.fidelity == "paper"
    assert {s.run_key for s in study.runs} == {s.run_key for s in config.runs} - {
        s.run_key for s in config.runs if s.problem == "newsvendor" and s.algorithm == "erbo" and s.seed == 101}
    data = load_study([study])
    assert data.counts() == {"expected": 11, "finished": 10, "failed": 1, "missing": 0}


def test_a_study_against_itself_is_ratio_one_and_not_significant(two):
    a, _ = two
    data = load_study([load_study_config(a, validate_runs=False)])
    cells = compare_cells(data, data)
    assert np.allclose(cells["ratio"], 1.0) and not cells["significant"].any()
    # identical records: marked so and left out of the Holm family
    assert (cells["test"] == "identical").all() and cells["pvalue_holm"].isna().all()


def test_a_report_of_an_output_folder_logs_nothing_and_says_why(two, tmp_path, capsys):
    dash = tmp_path / "dash"
    assert main(["report", str(tmp_path / "results-init2"), "--dashboards", str(dash)]) == 0
    assert "an output folder names no tracking store" in capsys.readouterr().err
    assert (dash / "init2" / "index.html").is_file() and (dash / "init2" / "tables" / "nemenyi.csv").is_file()


def test_n_is_the_seeds_each_number_uses_and_identical_cells_leave_the_holm_family(tmp_path):
    a = write_config(tmp_path, name="few")
    b = write_setting(tmp_path, "more", init_size=2, seeds="[100, 101, 102, 103, 104]")
    fill_store(load_study_config(a, validate_runs=False), regret_of)
    # B: WDRBO's runs are A's bit for bit (and two more seeds), ERBO's doubled
    fill_store(load_study_config(b, validate_runs=False),
               lambda s: (regret_of(s) if s.seed <= 102 else np.full(s.evaluations, 0.5)) if s.algorithm == "wdrbo"
               else doubled(s) if s.seed <= 102 else np.full(s.evaluations, 0.9))
    da, db = (load_study([load_study_config(p, validate_runs=False)]) for p in (a, b))
    cells = compare_cells(da, db).set_index(["problem", "algorithm"])
    erbo = cells.loc[("ackley", "erbo")]
    # paired over the 3 common seeds: both means and n use those, whatever else B finished
    assert (erbo["n_a"], erbo["n_b"], erbo["finished_a"], erbo["finished_b"], erbo["n_pairs"]) == (3, 3, 3, 5, 3)
    assert erbo["mean_b"] == pytest.approx(2 * erbo["mean_a"])
    # WDRBO: B ran two more seeds, so the records differ; its common seeds are equal: ratio 1
    assert cells.loc[("ackley", "wdrbo"), "test"] != "identical"
    display = comparison_display(compare_cells(da, db), "A", "B")
    assert display.loc[("Ackley", "ERBO"), "B: R_T (n)"].endswith("(3)")
    same = compare_cells(da, da)
    assert (same["test"] == "identical").all() and same["pvalue_holm"].isna().all()
    assert "left out of the Holm family" in display.attrs["note"]


def test_identical_cells_are_marked_and_the_others_holm_corrected_among_themselves(tmp_path):
    a = write_config(tmp_path, name="base")
    b = write_setting(tmp_path, "changed", init_size=2)
    fill_store(load_study_config(a, validate_runs=False), regret_of)
    fill_store(load_study_config(b, validate_runs=False),
               lambda s: regret_of(s) if s.algorithm == "wdrbo" else doubled(s))
    da, db = (load_study([load_study_config(p, validate_runs=False)]) for p in (a, b))
    cells = compare_cells(da, db).set_index(["problem", "algorithm"])
    assert list(cells["test"] == "identical") == [True, False, True, False]
    # the family is the two ERBO cells: p = 0.25 (3 pairs) and 1 (one seed a side) -> Holm 0.5 and 1
    assert list(cells.loc[[("ackley", "erbo"), ("newsvendor", "erbo")], "pvalue"]) == pytest.approx([0.25, 1.0])
    assert list(cells.loc[[("ackley", "erbo"), ("newsvendor", "erbo")], "pvalue_holm"]) == pytest.approx([0.5, 1.0])
    assert cells.loc[[("ackley", "wdrbo"), ("newsvendor", "wdrbo")], "pvalue_holm"].isna().all()
    display = comparison_display(compare_cells(da, db), "A", "B")
    assert display.loc[("Ackley", "WDRBO"), "verdict (α=0.05)"] == "identical"
    assert display.loc[("Ackley", "WDRBO"), "ratio B / A"] == "1 (identical records)"
