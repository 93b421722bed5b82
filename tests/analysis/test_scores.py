"""The headline numbers against independent computations on a small fixed table.

Ranks by hand and by scipy's rankdata, the Friedman statistic by scipy's friedmanchisquare, the
Nemenyi p-values by scikit-posthocs, the bootstrap intervals by a direct loop with the same seed.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scikit_posthocs
from scipy import stats

from wdrbo_dist.analysis.bands import bootstrap_band
from wdrbo_dist.analysis.ranking import critical_difference, groups_not_different, nemenyi_critical_difference
from wdrbo_dist.analysis.scores import (
    improvement_probabilities, normalised_scores, stratified_bootstrap, win_scores,
)

# Final cumulative regret of three methods on two problems x four seeds (lower is better).
TABLE = {
    ("ackley", 1): (1.0, 2.0, 3.0),
    ("ackley", 2): (1.0, 3.0, 2.0),
    ("ackley", 3): (2.0, 2.0, 3.0),  # a tie between a and b
    ("ackley", 4): (1.0, 2.0, 4.0),
    ("newsvendor", 1): (5.0, 4.0, 6.0),
    ("newsvendor", 2): (4.0, 5.0, 6.0),
    ("newsvendor", 3): (3.0, 6.0, 5.0),
    ("newsvendor", 4): (4.0, 5.0, 7.0),
}
METHODS = ["a", "b", "random"]


def matrix() -> pd.DataFrame:
    index = pd.MultiIndex.from_tuples(list(TABLE), names=["problem", "seed"])
    return pd.DataFrame(list(TABLE.values()), index=index, columns=METHODS)


def runs() -> pd.DataFrame:
    rows = [{"fidelity": "paper", "problem": p, "seed": s, "algorithm": m, "status": "finished",
             "final_cumulative_regret": v} for (p, s), values in TABLE.items() for m, v in zip(METHODS, values)]
    return pd.DataFrame(rows)


def test_average_ranks_by_hand_and_by_rankdata():
    cd = critical_difference(matrix())
    # by hand: a = (1 + 1 + 1.5 + 1 + 2 + 1 + 1 + 1) / 8, b = (2 + 3 + 1.5 + 2 + 1 + 2 + 3 + 2) / 8
    assert cd.average_ranks["a"] == pytest.approx(9.5 / 8)
    assert cd.average_ranks["b"] == pytest.approx(16.5 / 8)
    assert cd.average_ranks["random"] == pytest.approx(22 / 8)
    by_scipy = np.mean([stats.rankdata(row) for row in TABLE.values()], axis=0)
    np.testing.assert_allclose(cd.average_ranks[METHODS].to_numpy(), by_scipy)
    assert list(cd.average_ranks.index) == ["a", "b", "random"] and cd.n_blocks == 8


def test_friedman_is_scipys_and_nemenyi_is_scikit_posthocs():
    m = matrix()
    cd = critical_difference(m)
    expected = stats.friedmanchisquare(*(m[c] for c in METHODS))
    assert cd.friedman_statistic == pytest.approx(expected.statistic)
    assert cd.friedman_pvalue == pytest.approx(expected.pvalue)
    oracle = scikit_posthocs.posthoc_nemenyi_friedman(m.reset_index(drop=True))
    np.testing.assert_allclose(cd.pvalues.loc[METHODS, METHODS].to_numpy(), oracle.loc[METHODS, METHODS].to_numpy(),
                               rtol=1e-6)


def test_critical_difference_is_demsars_table_value():
    # Demšar (2006), Table 5(a): q_0.05 = 2.343 for k = 3 and 2.569 for k = 4
    assert nemenyi_critical_difference(3, 8) == pytest.approx(2.343 * math.sqrt(3 * 4 / 48), rel=1e-3)
    assert nemenyi_critical_difference(4, 10) == pytest.approx(2.569 * math.sqrt(4 * 5 / 60), rel=1e-3)


def test_groups_are_maximal_runs_without_a_different_pair():
    order = ["w", "x", "y", "z"]
    different = pd.DataFrame(False, index=order, columns=order)
    for a, b in [("w", "y"), ("w", "z"), ("x", "z")]:
        different.loc[a, b] = different.loc[b, a] = True
    assert groups_not_different(order, different) == [["w", "x"], ["x", "y"], ["y", "z"]]
    assert groups_not_different(order, different & False) == [order]


def test_without_a_friedman_rejection_everything_is_one_group():
    flat = pd.DataFrame([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]], columns=["p", "q", "r"])
    cd = critical_difference(flat)
    assert cd.friedman_pvalue == 1.0 and cd.groups == [["p", "q", "r"]]
    two = critical_difference(flat[["p", "q"]])
    assert math.isnan(two.friedman_pvalue) and two.groups == [["p", "q"]]  # no test with 2 methods


def test_stratified_bootstrap_matches_a_direct_loop_with_the_same_seed():
    groups = [np.array([0.1, 0.5, 0.2, 0.9]), np.array([0.3, 0.4, 0.8])]
    got = stratified_bootstrap(groups, resamples=500, level=0.9, seed=7)
    rng = np.random.default_rng(7)
    draws = [rng.integers(0, g.size, size=(500, g.size)) for g in groups]
    values = []
    for r in range(500):
        values.append(np.mean([np.mean(g[d[r]]) for g, d in zip(groups, draws)]))
    assert got.estimate == pytest.approx((0.425 + 0.5) / 2)
    assert got.low == pytest.approx(np.quantile(values, 0.05))
    assert got.high == pytest.approx(np.quantile(values, 0.95))
    assert (got.n_groups, got.n_values) == (2, 7)


def test_normalised_scores_by_hand():
    scores = normalised_scores(runs()).set_index(["problem", "seed", "algorithm"])["score"]
    # random's mean: ackley 3.0, newsvendor 6.0
    assert scores[("ackley", 2, "a")] == pytest.approx(1 - 1 / 3)
    assert scores[("newsvendor", 3, "b")] == pytest.approx(1 - 6 / 6)
    assert scores[("ackley", 4, "random")] == pytest.approx(1 - 4 / 3)
    without = normalised_scores(runs()[runs()["algorithm"] != "random"])
    assert without["score"].isna().all()  # no anchor, no score


def test_probability_of_improvement_by_hand_with_its_interval():
    poi = improvement_probabilities(runs(), ["ackley", "newsvendor"], METHODS, reference="a", resamples=300)
    row = poi[(poi["baseline"] == "b") & (poi["problem"] == "overall")].iloc[0]
    # ackley: a wins 3 seeds and ties 1 -> 3.5 / 4; newsvendor: a wins 3 of 4 -> 0.75
    assert row["probability"] == pytest.approx((3.5 / 4 + 0.75) / 2)
    wins = [win_scores(np.array([1, 1, 2, 1.0]), np.array([2, 3, 2, 2.0])),
            win_scores(np.array([5, 4, 3, 4.0]), np.array([4, 5, 6, 5.0]))]
    expected = stratified_bootstrap(wins, resamples=300)
    assert (row["low"], row["high"]) == pytest.approx((expected.low, expected.high))
    assert row["low"] <= row["probability"] <= row["high"] and row["n_pairs"] == 8


def test_curve_band_resamples_whole_seeds():
    steps = pd.DataFrame({"algorithm": "a", "seed": np.repeat([1, 2, 3], 2), "step": np.tile([1, 2], 3),
                          "value": [1.0, 10.0, 2.0, 20.0, 3.0, 30.0]})
    band = bootstrap_band(steps, ["algorithm", "step"], "value", resamples=400, seed=3)
    rng = np.random.default_rng(3)
    draws = rng.integers(0, 3, size=(400, 3))
    curve = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    means = curve[draws].mean(axis=1)
    np.testing.assert_allclose(band["low"], np.quantile(means, 0.025, axis=0))
    np.testing.assert_allclose(band["high"], np.quantile(means, 0.975, axis=0))
    # the same draw for both steps: step 2's band is exactly 10 x step 1's
    assert band["high"].iloc[1] == pytest.approx(10 * band["high"].iloc[0])


def test_a_curve_band_drawn_a_slice_at_a_time_is_the_whole_draws(monkeypatch):
    """Memory is bounded (a few resamples at once) without changing a digit of the band."""
    from wdrbo_dist.analysis import bands

    rng = np.random.default_rng(1)
    steps = pd.DataFrame({"algorithm": "a", "seed": np.repeat(np.arange(40), 5), "step": np.tile(np.arange(1, 6), 40),
                          "value": rng.random(200)})
    steps.loc[7, "value"] = np.nan
    whole = bootstrap_band(steps, ["algorithm", "step"], "value", resamples=300)
    monkeypatch.setattr(bands, "DRAW_NUMBERS", 7 * 40 * 5)  # 7 resamples a slice
    pd.testing.assert_frame_equal(bootstrap_band(steps, ["algorithm", "step"], "value", resamples=300), whole,
                                  check_exact=True)


def test_summary_tables_show_intervals_and_no_negative_zero():
    from wdrbo_dist.analysis.summary_tables import _text

    assert _text(0.5, 0.25, 0.75) == "0.50 [0.25, 0.75]"
    assert _text(-0.001, -0.004, 0.003) == "0.00 [0.00, 0.00]"
    assert _text(math.nan, math.nan, math.nan) == "n/a"
