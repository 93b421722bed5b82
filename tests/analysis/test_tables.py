"""Tables from a constructed store with known answers; failed and missing cells stay visible."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tests.analysis.fakes import fill_store, make_study
from wdrbo_dist.analysis.load import Metric, load_study
from wdrbo_dist.analysis.report import summarize
from wdrbo_dist.analysis.tables import MAIN_TITLE, build_tables, markdown_report
from wdrbo_dist.storage.atomic import write_parquet_atomic

BASE = {"wdrbo": 0.1, "erbo": 0.2, "gp-ucb": 0.3}
SEEDS = [100, 101, 102, 103]
EVALS, INIT = 6, 2
SE_0123 = math.sqrt(5 / 3) / 2  # standard error of [0, 1, 2, 3]


def regret_of(spec):
    """Constant regret per step: base + 0.01 * (seed - 100). Some runs fail or are missing."""
    if spec.problem == "newsvendor" and spec.algorithm == "gp-ucb":
        return "boom"  # the whole cell fails
    if spec.problem == "ackley" and spec.algorithm == "erbo" and spec.seed == 101:
        return "solver exploded"
    if spec.problem == "ackley" and spec.algorithm == "erbo" and spec.seed == 102:
        return None  # missing
    return np.full(spec.evaluations, BASE[spec.algorithm] + 0.01 * (spec.seed - 100))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    study = make_study(tmp_path_factory.mktemp("tables"), ["ackley", "newsvendor"], list(BASE), SEEDS, evaluations=EVALS, init_size=INIT)
    fill_store(study, regret_of, wall_time=4.0)
    return load_study([study])


def cell(frame: pd.DataFrame, problem: str, algorithm: str) -> pd.Series:
    match = frame[(frame["problem"] == problem) & (frame["algorithm"] == algorithm)]
    assert len(match) == 1
    return match.iloc[0]


def test_runs_have_a_status_each(data):
    assert data.counts() == {"expected": 24, "finished": 18, "failed": 5, "missing": 1}
    failed = data.runs[data.runs["status"] == "failed"]
    assert set(failed["error"]) == {"RuntimeError: boom", "RuntimeError: solver exploded"}
    assert len(data.steps) == 18 * EVALS


def test_final_regret_mean_and_se(data):
    tables = build_tables(data)
    wdrbo = cell(tables.final_regret, "ackley", "wdrbo")
    assert (wdrbo.n_expected, wdrbo.n_finished, wdrbo.n_failed, wdrbo.n_missing) == (4, 4, 0, 0)
    assert wdrbo.final_cumulative_regret_mean == pytest.approx(EVALS * (0.1 + 0.015))
    assert wdrbo.final_cumulative_regret_se == pytest.approx(EVALS * 0.01 * SE_0123)
    erbo = cell(tables.final_regret, "ackley", "erbo")  # seeds 100 and 103 only
    assert (erbo.n_finished, erbo.n_failed, erbo.n_missing) == (2, 1, 1)
    assert erbo.final_cumulative_regret_mean == pytest.approx(EVALS * (0.2 + 0.015))
    assert erbo.final_cumulative_regret_se == pytest.approx(EVALS * 0.03 / 2)  # sd of {0, .03}*6 / sqrt 2
    dead = cell(tables.final_regret, "newsvendor", "gp-ucb")
    assert dead.n_failed == 4 and math.isnan(dead.final_cumulative_regret_mean)


def test_failed_and_missing_cells_are_shown(data):
    tables = build_tables(data)
    main = tables.display["paper"][MAIN_TITLE]
    assert main.loc["Ackley", "WDRBO"] == "0.690 ± 0.039"
    assert main.loc["Ackley", "ERBO"].endswith("[2/4; 1 failed, 1 missing]")
    assert main.loc["Newsvendor", "GP-UCB"] == "FAILED (4/4)"
    text = markdown_report(data, tables)
    assert "FAILED (4/4)" in text and "1 failed, 1 missing" in text
    assert "ackley\\|erbo\\|s102 | paper | missing" in text
    assert "RuntimeError: solver exploded" in text
    listed = tables.problems
    assert set(listed["label"]) == {"ackley|erbo|s101", "ackley|erbo|s102"} | {
        f"newsvendor|gp-ucb|s{s}" for s in SEEDS}


def test_ranks_use_complete_seeds_only(data):
    ranks = build_tables(data).ranks
    ackley = ranks[ranks["problem"] == "ackley"].set_index("algorithm")
    # seeds 100 and 103 have all three algorithms; the order is always wdrbo < erbo < gp-ucb
    assert ackley["n_blocks"].iloc[0] == 2
    assert list(ackley.loc[["wdrbo", "erbo", "gp-ucb"], "average_rank"]) == [1.0, 2.0, 3.0]
    news = ranks[ranks["problem"] == "newsvendor"]
    assert (news["n_blocks"] == 0).all() and news["average_rank"].isna().all()
    overall = ranks[ranks["problem"] == "overall"].set_index("algorithm")
    assert overall.loc["wdrbo", "average_rank"] == 1.0 and overall.loc["wdrbo", "n_blocks"] == 1


def test_rank_ties_are_averaged(tmp_path):
    study = make_study(tmp_path, ["ackley"], ["wdrbo", "erbo", "gp-ucb"], [1, 2], evaluations=EVALS, init_size=INIT)
    # seed 1: wdrbo = erbo < gp-ucb -> 1.5, 1.5, 3; seed 2: gp-ucb < erbo < wdrbo -> 3, 2, 1
    values = {(1, "wdrbo"): 0.1, (1, "erbo"): 0.1, (1, "gp-ucb"): 0.5,
              (2, "wdrbo"): 0.3, (2, "erbo"): 0.2, (2, "gp-ucb"): 0.1}
    fill_store(study, lambda s: np.full(EVALS, values[(s.seed, s.algorithm)]))
    ranks = build_tables(load_study([study])).ranks
    got = ranks[ranks["problem"] == "ackley"].set_index("algorithm")["average_rank"]
    assert got.to_dict() == {"wdrbo": 2.25, "erbo": 1.75, "gp-ucb": 2.0}
    wil = build_tables(load_study([study])).wilcoxon.set_index("baseline")
    assert (wil.loc["erbo", "wins"], wil.loc["erbo", "ties"], wil.loc["erbo", "losses"]) == (0, 1, 1)


def test_wilcoxon_table_pairs_and_holm(data):
    tests = build_tables(data).wilcoxon
    assert len(tests) == 4  # 2 problems x 2 baselines: none dropped
    full = cell(tests.rename(columns={"baseline": "algorithm"}), "ackley", "gp-ucb")
    # 4 pairs, all won: exact two-sided p = 2 / 2^4
    assert (full.n_pairs, full.wins, full.ties, full.losses) == (4, 4, 0, 0)
    assert full.pvalue == pytest.approx(0.125)
    assert full.rank_biserial == 1.0
    assert full.median_difference == pytest.approx(EVALS * 0.2)
    partial = cell(tests.rename(columns={"baseline": "algorithm"}), "ackley", "erbo")
    assert (partial.n_pairs, partial.n_unpaired) == (2, 2) and partial.pvalue == pytest.approx(0.5)
    none = cell(tests.rename(columns={"baseline": "algorithm"}), "newsvendor", "gp-ucb")
    assert none.n_pairs == 0 and math.isnan(none.pvalue) and math.isnan(none.pvalue_holm)
    # Holm over the 3 runnable tests: p = [0.125, 0.5, 0.125] -> [0.375, 0.5, 0.375]
    runnable = tests.dropna(subset=["pvalue"]).sort_values(["problem", "baseline"])
    np.testing.assert_allclose(sorted(runnable["pvalue_holm"]), [0.375, 0.375, 0.5])
    assert not tests["significant"].any()


def test_time_split_known_values(data):
    time = build_tables(data).time
    row = cell(time, "ackley", "wdrbo")
    assert row.wall_time_s_mean == pytest.approx(4.0) and row.wall_time_s_se == pytest.approx(0.0)
    assert row.time_fit_s_mean == pytest.approx(EVALS * 0.1)
    assert row.time_acquisition_s_mean == pytest.approx(EVALS * 0.2)
    assert row.inner_solve_s_mean == pytest.approx(EVALS * 0.05)
    assert row.time_truth_s_mean == pytest.approx(EVALS * 0.1)
    assert row.algorithm_s_mean == pytest.approx(EVALS * 0.3)
    assert row.other_s_mean == pytest.approx(4.0 - EVALS * 0.4)


def test_metric_choices(tmp_path):
    study = make_study(tmp_path, ["ackley"], ["wdrbo"], [100, 101], evaluations=EVALS, init_size=INIT)
    fill_store(study, lambda s: np.arange(1, EVALS + 1) * 0.1)  # r_t = 0.1 t
    exact = load_study([study]).runs["final_cumulative_regret"]
    np.testing.assert_allclose(exact, 0.1 * 21)
    reference = load_study([study], Metric("regret_reference")).runs["final_cumulative_regret"]
    np.testing.assert_allclose(reference, 0.1 * 21 + EVALS * 0.25)  # the fake's constant offset
    after_design = load_study([study], Metric(include_initial=False))
    np.testing.assert_allclose(after_design.runs["final_cumulative_regret"], 0.1 * (21 - 1 - 2))
    assert after_design.steps["step"].min() == INIT + 1
    with pytest.raises(ValueError):
        Metric("best_y")


def test_summarize_writes_csv_and_markdown(data, tmp_path):
    tables, files = summarize(data, tmp_path / "out")
    csv = pd.read_csv(files.folder / "tables" / "final_cumulative_regret.csv")
    assert len(csv) == 6 and set(csv.columns) >= {"n_failed", "n_missing", "final_cumulative_regret_mean"}
    assert pd.read_csv(files.folder / "tables" / "failed_or_missing_runs.csv")["status"].value_counts().to_dict() == {
        "failed": 5, "missing": 1}
    assert "FAILED (4/4)" in files.summary.read_text()


def test_unreadable_and_empty_stores(tmp_path):
    study = make_study(tmp_path, ["ackley"], ["wdrbo", "erbo"], [1, 2], evaluations=EVALS, init_size=INIT)
    nothing = build_tables(load_study([study]))  # no run at all: every cell says MISSING
    assert nothing.display["paper"][MAIN_TITLE].loc["Ackley"].tolist() == ["MISSING (2/2)", "MISSING (2/2)"]
    assert nothing.wilcoxon["n_pairs"].tolist() == [0]
    store = fill_store(study, lambda s: np.full(EVALS, 0.1))
    cut, columnless = study.runs[0], study.runs[1]
    # Not finished for the store (`wdrbo-dist run` sets it aside and runs it again): missing.
    store.records_path(cut.run_key).write_bytes(b"not a parquet file")
    # A parquet that reads and has the rows, but is not the one its json's checksum names: the
    # store catches it too (missing, run again), so the analysis never reads its numbers.
    write_parquet_atomic(pd.DataFrame({"step": np.arange(1, EVALS + 1)}), store.records_path(columnless.run_key))
    data = load_study([study])
    rows = data.runs.set_index("label")
    assert rows.loc[cut.label, "status"] == "missing"
    assert rows.loc[columnless.label, "status"] == "missing"
    assert data.counts()["failed"] == 0 and data.counts()["missing"] == 2


def test_wilcoxon_table_shows_the_ratio_its_test_inverts_and_what_the_seeds_allow(data):
    tables = build_tables(data)
    tests = tables.wilcoxon.set_index(["problem", "baseline"])
    full = tests.loc[("ackley", "gp-ucb")]  # 4 pairs: regret (0.3 + 0.01 k) / (0.1 + 0.01 k), k = 0..3
    ratios = np.array([0.30 / 0.10, 0.31 / 0.11, 0.32 / 0.12, 0.33 / 0.13])
    walsh = [(np.log(ratios[i]) + np.log(ratios[j])) / 2 for i in range(4) for j in range(i, 4)]
    assert full.scale == "log" and full.ratio == pytest.approx(math.exp(np.median(walsh)))
    assert math.isnan(full.low) and math.isnan(full.level)  # 4 pairs: no 95 % interval
    title = "WDRBO vs each baseline: paired Wilcoxon signed-rank tests on log-ratios, Holm-corrected"
    shown = tables.display["paper"][title]
    assert shown.loc[("Ackley", "GP-UCB"), "ratio baseline / ref."] == f"{full.ratio:.3g} (n too small: p ≥ 0.125)"
    note = shown.attrs["note"]
    assert "With 4 paired seeds (the most any test here has) the smallest two-sided p is 0.125" in note
    assert "Holm over these 3 tests needs at least 7 paired seeds" in note
    assert note in markdown_report(data, tables)
