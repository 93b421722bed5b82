"""The headline numbers against independent computations on small fixed tables.

Ranks over problems by hand and by scipy's rankdata, Friedman by scipy, Nemenyi by scikit-posthocs,
the scores' t-intervals and the win rates' Clopper-Pearson intervals by hand, the bands by a
direct loop with the same seed.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scikit_posthocs
from scipy import stats

from wdrbo_dist.analysis.bands import median_band
from wdrbo_dist.analysis.intervals import clopper_pearson, median_interval
from wdrbo_dist.analysis.profiles import profile_bands
from wdrbo_dist.analysis.ranking import (
    block_matrix, critical_difference, groups_not_different, nemenyi_critical_difference,
)
from wdrbo_dist.analysis.scores import improvement_probabilities, normalised_scores, score_summary, win_scores

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


# The critical-difference table: six problems x four methods, three seeds each. A cell's seeds are
# (m, m, 100 m) or (0.9 m, m, 1.2 m): its median is m, its mean ranks it otherwise on p1.
MEDIANS = {"p1": (1, 2, 3, 4), "p2": (2, 1, 4, 3), "p3": (1, 3, 2, 4), "p4": (1, 2, 4, 3), "p5": (2, 1, 3, 4),
           "p6": (1, 2, 3, 3)}
CD_METHODS = ["w", "x", "y", "z"]


def cd_runs() -> pd.DataFrame:
    rows = []
    for problem, medians in MEDIANS.items():
        for method, m in zip(CD_METHODS, medians):
            seeds = (m, m, 100.0 * m) if (problem, method) == ("p1", "w") else (0.9 * m, m, 1.2 * m)
            rows += [{"fidelity": "paper", "problem": problem, "seed": s, "algorithm": method, "status": "finished",
                      "final_cumulative_regret": float(v)} for s, v in enumerate(seeds)]
    return pd.DataFrame(rows)


def test_one_block_per_problem_ranked_on_the_median_over_seeds():
    blocks = block_matrix(cd_runs(), "paper", CD_METHODS)
    assert list(blocks.index) == list(MEDIANS) and blocks.shape == (6, 4)  # problems, not problem x seed
    np.testing.assert_allclose(blocks.to_numpy(), np.array(list(MEDIANS.values()), dtype=float))
    cd = critical_difference(blocks)
    by_scipy = np.mean([stats.rankdata(row) for row in MEDIANS.values()], axis=0)
    np.testing.assert_allclose(cd.average_ranks[CD_METHODS].to_numpy(), by_scipy)
    assert cd.n_blocks == 6 and cd.average_ranks["w"] == pytest.approx(8 / 6)  # the mean would rank w last on p1


def test_friedman_and_nemenyi_over_problems_are_scipys_and_scikit_posthocs():
    blocks = block_matrix(cd_runs(), "paper", CD_METHODS)
    cd = critical_difference(blocks)
    expected = stats.friedmanchisquare(*(blocks[c] for c in CD_METHODS))
    assert cd.friedman_statistic == pytest.approx(expected.statistic)
    assert cd.friedman_pvalue == pytest.approx(expected.pvalue)
    oracle = scikit_posthocs.posthoc_nemenyi_friedman(blocks.reset_index(drop=True))
    np.testing.assert_allclose(cd.pvalues.loc[CD_METHODS, CD_METHODS].to_numpy(),
                               oracle.loc[CD_METHODS, CD_METHODS].to_numpy(), rtol=1e-6)


def test_a_problem_where_a_method_finished_no_seed_is_no_block():
    frame = cd_runs()
    frame.loc[(frame["problem"] == "p3") & (frame["algorithm"] == "z"), "status"] = "failed"
    cd = critical_difference(block_matrix(frame, "paper", CD_METHODS))
    assert cd.n_blocks == 5


def test_average_ranks_by_hand_and_by_rankdata():
    cd = critical_difference(matrix())
    # by hand: a = (1 + 1 + 1.5 + 1 + 2 + 1 + 1 + 1) / 8, b = (2 + 3 + 1.5 + 2 + 1 + 2 + 3 + 2) / 8
    assert cd.average_ranks["a"] == pytest.approx(9.5 / 8)
    assert cd.average_ranks["b"] == pytest.approx(16.5 / 8)
    assert cd.average_ranks["random"] == pytest.approx(22 / 8)


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


def test_normalised_scores_by_hand():
    scores = normalised_scores(runs()).set_index(["problem", "seed", "algorithm"])["score"]
    # random's geometric means: ackley (3 * 2 * 3 * 4)^(1/4), newsvendor (6 * 6 * 5 * 7)^(1/4)
    ackley, news = 72 ** 0.25, 1260 ** 0.25
    assert scores[("ackley", 2, "a")] == pytest.approx(1 - 1 / ackley)
    assert scores[("newsvendor", 3, "b")] == pytest.approx(1 - 6 / news)
    assert scores[("ackley", 4, "random")] == pytest.approx(1 - 4 / ackley)
    without = normalised_scores(runs()[runs()["algorithm"] != "random"])
    assert without["score"].isna().all()  # no anchor, no score


def test_a_problems_score_is_the_paired_log_ratio_t_interval_with_random_search_in_it():
    summary = score_summary(runs(), ["ackley", "newsvendor"], METHODS).set_index(["problem", "algorithm"])
    d = np.log([1 / 3, 1 / 2, 2 / 3, 1 / 4])  # a over random on ackley, seed by seed
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    row = summary.loc[("ackley", "a")]
    assert row["score"] == pytest.approx(1 - math.exp(d.mean()))
    assert (row["low"], row["high"]) == pytest.approx((1 - math.exp(d.mean() + half), 1 - math.exp(d.mean() - half)))
    assert row["n_pairs"] == 4 and row["flag"] == "conservative"  # fewer than 10 seeds
    # overall, two problems (nothing trimmed): the mean log-ratio, Welch-Satterthwaite t
    e = np.log([5 / 6, 4 / 6, 3 / 5, 4 / 7])
    se2 = np.array([d.var(ddof=1) / 4, e.var(ddof=1) / 4])
    dof = se2.sum() ** 2 / (se2**2 / 3).sum()
    centre, half = (d.mean() + e.mean()) / 2, stats.t.ppf(0.975, dof) * math.sqrt(se2.sum()) / 2
    overall = summary.loc[("overall", "a")]
    assert overall["score"] == pytest.approx(1 - math.exp(centre))
    expected = (1 - math.exp(centre + half), 1 - math.exp(centre - half))
    assert (overall["low"], overall["high"]) == pytest.approx(expected)
    # random search's own spread reaches the interval: the same geometric mean, noisier seeds, wider
    noisy = runs()
    pick = (noisy["algorithm"] == "random") & (noisy["problem"] == "ackley")
    noisy.loc[pick, "final_cumulative_regret"] = [1.0, 8.0, 3.0, 3.0 * 72 ** 0.25 / (24 ** 0.25)]
    wider = score_summary(noisy, ["ackley", "newsvendor"], METHODS).set_index(["problem", "algorithm"])
    assert wider.loc[("ackley", "a"), "high"] - wider.loc[("ackley", "a"), "low"] > row["high"] - row["low"]


def test_the_overall_score_is_robust_to_a_problem_where_random_search_has_little_regret():
    def study(random_regret: float) -> pd.DataFrame:
        rows = []
        for i, problem in enumerate(["p1", "p2", "p3", "p4", "p5"]):
            for seed in range(4):
                base = 1.0 + 0.1 * seed
                rnd = random_regret * base if problem == "p5" else 2.0 * base * (1 + 0.2 * i)
                rows += [{"fidelity": "paper", "problem": problem, "seed": seed, "algorithm": m, "status": "finished",
                          "final_cumulative_regret": v} for m, v in (("a", base * (1 + 0.05 * seed)), ("random", rnd))]
        return pd.DataFrame(rows)

    small, tiny = (score_summary(study(r), ["p1", "p2", "p3", "p4", "p5"], ["a", "random"]).set_index(
        ["problem", "algorithm"]).loc[("overall", "a")] for r in (0.1, 1e-6))
    assert small["score"] == pytest.approx(tiny["score"]) and small["low"] == pytest.approx(tiny["low"])
    assert small["score"] > 0  # the four others, where a halves random search's regret, decide


def test_win_rates_have_exact_clopper_pearson_intervals():
    low, high = clopper_pearson(10, 10)
    assert (float(low), float(high)) == pytest.approx((0.025 ** 0.1, 1.0))  # 0.69
    low, high = clopper_pearson(0, 3)
    assert (float(low), float(high)) == pytest.approx((0.0, 1 - 0.025 ** (1 / 3)))  # 0.71
    poi = improvement_probabilities(runs(), ["ackley", "newsvendor"], METHODS, reference="a")
    row = poi[(poi["baseline"] == "b") & (poi["problem"] == "overall")].iloc[0]
    # ackley: a wins 3 seeds and ties 1 -> 3.5 / 4; newsvendor: a wins 3 of 4 -> 0.75; pooled 6.5 of 8
    assert row["probability"] == pytest.approx((3.5 / 4 + 0.75) / 2)
    expected = (stats.beta.ppf(0.025, 6.5, 2.5), stats.beta.ppf(0.975, 7.5, 1.5))
    assert (row["low"], row["high"]) == pytest.approx(expected)
    ackley = poi[(poi["baseline"] == "random") & (poi["problem"] == "ackley")].iloc[0]
    assert ackley["probability"] == 1.0 and (ackley["low"], ackley["high"]) == pytest.approx((0.025 ** 0.25, 1.0))


def test_the_page_shows_the_exact_win_rate_interval_and_flags():
    from wdrbo_dist.analysis.summary_tables import _text

    assert _text(1.0, 0.025 ** 0.1, 1.0) == "1.00 [0.69, 1.00]"
    assert _text(0.0, 0.0, 1 - 0.025 ** (1 / 3)) == "0.00 [0.00, 0.71]"
    assert _text(0.5, 0.25, 0.75, "conservative") == "0.50 [0.25, 0.75]†"
    assert _text(0.5, math.nan, math.nan, "n too small") == "0.50 (n too small)"
    assert _text(-0.001, -0.004, 0.003) == "0.00 [0.00, 0.00]"
    assert _text(math.nan, math.nan, math.nan) == "n/a"


def test_the_median_band_is_the_order_statistics_interval():
    x = np.array([3.0, 1.0, 4.0, 1.5, 9.0])
    median, low, high, level = median_interval(x)  # n = 5: the widest pair, 1 - 2/32
    assert (median, low, high, level) == (3.0, 1.0, 9.0, pytest.approx(0.9375))
    assert all(np.isnan(v) for v in median_interval(x[:4])[1:])  # 87.5 % at most: n too small
    y = np.arange(1.0, 11.0) ** 2  # n = 10: between [x(2), x(9)] (97.9 %) and [x(3), x(8)] (89.1 %)
    g2, g3 = (stats.binom.cdf(10 - k, 10, 0.5) - stats.binom.cdf(k - 1, 10, 0.5) for k in (2, 3))
    share = (g2 - 0.95) / (g2 - g3)
    weight = 8 * share / (2 + 6 * share)  # Hettmansperger & Sheather (1986)
    _, low, high, level = median_interval(y)
    assert low == pytest.approx(weight * 9 + (1 - weight) * 4)
    assert high == pytest.approx(weight * 64 + (1 - weight) * 81) and level == 0.95
    steps = pd.DataFrame({"algorithm": "a", "seed": np.repeat(np.arange(5), 2), "step": np.tile([1, 2], 5),
                          "value": np.concatenate([[v, 10 * v] for v in x])})
    band = median_band(steps, ["algorithm", "step"], "value")
    assert band[["median", "low", "high"]].to_numpy().tolist() == [[3.0, 1.0, 9.0], [30.0, 10.0, 90.0]]


def test_profile_band_matches_a_direct_loop_with_the_same_seed():
    band = profile_bands(runs(), "paper", METHODS, "random", resamples=200, seed=3)
    a = band[band["algorithm"] == "a"]
    scores = normalised_scores(runs())
    own = scores[scores["algorithm"] == "a"]["score"].to_numpy()
    assert a["share"].to_numpy() == pytest.approx((own[:, None] > a["tau"].to_numpy()).mean(axis=0))
    rng = np.random.default_rng(3)
    tables = {p: np.array([TABLE[(p, s)] for s in range(1, 5)]) for p in ("ackley", "newsvendor")}
    picks = {p: rng.integers(0, 4, (200, 4)) for p in tables}
    shares = []
    for r in range(200):
        drawn = []
        for p, table in tables.items():
            rows = table[picks[p][r]]
            drawn.append(1 - rows[:, 0] / np.exp(np.log(rows[:, 2]).mean()))
        values = np.concatenate(drawn)
        shares.append((values[:, None] > a["tau"].to_numpy()).mean(axis=0))
    assert a["low"].to_numpy() == pytest.approx(np.quantile(shares, 0.025, axis=0))
    assert a["high"].to_numpy() == pytest.approx(np.quantile(shares, 0.975, axis=0))


def test_win_scores_count_ties_half():
    assert win_scores(np.array([1.0, 2.0, 3.0, np.nan]), np.array([2.0, 2.0, 1.0, 1.0])).tolist() == [1.0, 0.5, 0.0]
