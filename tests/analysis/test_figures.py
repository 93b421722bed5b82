"""Figures carry the numbers they claim to show (checked on constructed data)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.analysis.fakes import fill_store, make_study
from wdrbo_dist.analysis.figures import build_figures
from wdrbo_dist.problems import make_problem
from wdrbo_dist.analysis.load import load_study

EVALS = 5


def regret_of(spec):
    base = {"wdrbo": 0.1, "erbo": 0.2, "drbo-mmd": 0.4}[spec.algorithm]
    return np.full(EVALS, base + 0.01 * spec.seed)  # seeds 0, 1, 2


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("figures")
    studies = []
    for fidelity in ("paper", "reference"):
        study = make_study(tmp, ["ackley", "newsvendor"], ["wdrbo", "erbo", "drbo-mmd"], [0, 1, 2],
                           evaluations=EVALS, init_size=2, fidelity=fidelity, name=f"f-{fidelity}")
        fill_store(study, regret_of if fidelity == "paper" else (lambda s: None if s.problem == "newsvendor" else regret_of(s)))
        studies.append(study)
    return {item.key: item for item in build_figures(load_study(studies))}


def traces(item, name):
    return [t for t in item.figure.data if t.name == name and t.mode == "lines" and t.fill is None]


def test_figure_set(items):
    assert set(items) == {
        f"{kind}_{fidelity}" for kind in ("fig1_cumulative_regret_main", "fig2_cumulative_regret",
                                          "fig3_instantaneous_regret", "time_per_run", "regret_vs_time")
        for fidelity in ("paper", "reference")
    } | {"fidelity_profiles"}


def test_fig1_shows_main_text_methods_only(items):
    names = {t.name for t in items["fig1_cumulative_regret_main_paper"].figure.data}
    assert names == {"WDRBO", "ERBO"}
    assert "DRBO-MMD" in {t.name for t in items["fig2_cumulative_regret_paper"].figure.data}


def test_cumulative_curve_and_band(items, tmp_path):
    fig = items["fig2_cumulative_regret_paper"]
    line = traces(fig, "WDRBO")[0]  # the first panel: ackley
    # r = 0.1 + 0.01 k, k = 0, 1, 2: the median curve is seed 1's, R_t = 0.11 t; SE = t 0.01 / sqrt(3)
    t = np.arange(1, EVALS + 1)
    np.testing.assert_allclose(line.x, t)
    np.testing.assert_allclose(line.y, 0.11 * t)
    np.testing.assert_allclose(np.asarray(line.customdata)[:, 0].astype(float), 0.11 * t)  # the mean
    np.testing.assert_allclose(np.asarray(line.customdata)[:, 1].astype(float), 0.01 * t / math.sqrt(3))
    # three seeds allow no 95 % interval of the median: no band, and the hover says why
    assert not [tr for tr in fig.figure.data if tr.name == "WDRBO" and tr.fill == "toself"]
    assert all("n too small" in str(c) for c in np.asarray(line.customdata)[:, 3])
    inst = traces(items["fig3_instantaneous_regret_paper"], "ERBO")[0]
    np.testing.assert_allclose(inst.y, np.full(EVALS, 0.21))
    # five seeds: the band is [min, max] over the seeds (93.75 %), 0.10 t to 0.14 t
    study = make_study(tmp_path, ["ackley"], ["wdrbo"], [0, 1, 2, 3, 4], evaluations=EVALS, init_size=2)
    fill_store(study, regret_of)
    five = build_figures(load_study([study]))[0].figure
    band = [tr for tr in five.data if tr.name == "WDRBO" and tr.fill == "toself"][0]
    upper, lower = np.asarray(band.y[:EVALS]), np.asarray(band.y[EVALS:])[::-1]
    np.testing.assert_allclose(upper, 0.14 * t)
    np.testing.assert_allclose(lower, 0.10 * t)


def test_missing_problem_panel_is_labelled(items):
    texts = [t.text for t in items["fig2_cumulative_regret_reference"].figure.data if t.mode == "text"]
    assert texts == [("no finished runs",)]


def test_time_bars_stack_to_the_total(items):
    fig = items["time_per_run_paper"].figure
    bars = [t for t in fig.data if t.type == "bar" and t.xaxis in ("x", None)]
    # per step: fit .1, acquisition .2 (inner .05), truth .1, step .5 -> other .1 per step
    stack = {t.name: t.y[0] for t in bars}
    assert stack["GP fit"] == pytest.approx(0.1 * EVALS)
    assert stack["acquisition (excl. inner)"] == pytest.approx(0.15 * EVALS)
    assert stack["inner solves"] == pytest.approx(0.05 * EVALS)
    assert stack["truth (QMC)"] == pytest.approx(0.1 * EVALS)
    assert stack["other"] == pytest.approx(0.1 * EVALS)
    assert sum(stack.values()) == pytest.approx(0.5 * EVALS)


def test_toy_curves_optima():
    curves = make_problem("toy-general", "paper").landscape()
    x = curves["x"]
    # E_P* f is maximised at |x| = 0.23875 (method §4.9), E_P^ f at x = 0 (ERBO's target), and the
    # robust objective close to |x| = 0.24007; the grid step is 0.005.
    assert abs(abs(x[np.argmax(curves["e_true"])]) - 0.23875) <= 0.0025
    assert abs(x[np.argmax(curves["e_centre"])]) <= 0.0025
    assert abs(abs(x[np.argmax(curves["robust"])]) - 0.24007) <= 0.0025
    assert np.max(curves["e_true"]) == pytest.approx(curves["optimal_value"], abs=1e-4)


def test_figures_of_a_study_without_finished_runs(tmp_path):
    study = make_study(tmp_path, ["ackley", "toy-general"], ["wdrbo", "erbo"], [0, 1], evaluations=EVALS, init_size=2)
    items = {item.key: item for item in build_figures(load_study([study]))}
    assert "toy_general_paper" in items and "regret_vs_time_paper" not in items
    notes = [t.text for t in items["fig2_cumulative_regret_paper"].figure.data if t.mode == "text"]
    assert notes == [("no finished runs",)]
