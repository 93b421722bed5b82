"""The pure statistics on small samples whose answers are worked out by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from wdrbo_dist.analysis.statistics import (
    average_ranks,
    block_ranks,
    grouped_mean_se,
    holm,
    mean_se,
    paired_wilcoxon,
    rank_biserial,
    ratio_of_means_interval,
    signed_rank_sums,
    significant_digits_format,
)


def test_mean_se_by_hand():
    # mean 2.5; deviations ±1.5, ±0.5 -> sd^2 = (2*2.25 + 2*0.25) / 3 = 5/3; se = sqrt(5/3) / 2
    stat = mean_se([1.0, 2.0, 3.0, 4.0])
    assert stat.n == 4
    assert stat.mean == pytest.approx(2.5)
    assert stat.se == pytest.approx(math.sqrt(5 / 3) / 2)
    assert stat.se == pytest.approx(0.6454972244)


def test_mean_se_edge_cases():
    one = mean_se([7.0])
    assert (one.mean, one.n) == (7.0, 1) and math.isnan(one.se)
    empty = mean_se([])
    assert empty.n == 0 and math.isnan(empty.mean) and math.isnan(empty.se)
    with_nan = mean_se([1.0, np.nan, 3.0])  # NaN is "no data", not a value
    assert with_nan.n == 2 and with_nan.mean == 2.0 and with_nan.se == pytest.approx(1.0)


def test_grouped_mean_se_matches_mean_se():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"g": np.repeat(["a", "b", "c"], [5, 1, 3]), "v": rng.normal(size=9)})
    out = grouped_mean_se(frame, ["g"], "v").set_index("g")
    for g, group in frame.groupby("g"):
        expected = mean_se(group["v"])
        assert out.loc[g, "n"] == expected.n
        assert out.loc[g, "mean"] == pytest.approx(expected.mean)
        if expected.n > 1:
            assert out.loc[g, "se"] == pytest.approx(expected.se)
        else:
            assert math.isnan(out.loc[g, "se"])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "+inf", "-inf"])
def test_nan_and_infinities_are_not_data_for_either_estimator(bad: float):
    # 1 and 3 are the data (mean 2, sd sqrt 2, se 1); the bad value is dropped, not counted.
    direct = mean_se([1.0, bad, 3.0])
    frame = pd.DataFrame({"g": ["a", "a", "a", "b", "b"], "v": [1.0, bad, 3.0, bad, bad]})
    grouped = grouped_mean_se(frame, ["g"], "v").set_index("g")
    assert (direct.n, direct.mean) == (2, 2.0) and direct.se == pytest.approx(1.0)
    assert (grouped.loc["a", "n"], grouped.loc["a", "mean"]) == (2, 2.0) and grouped.loc["a", "se"] == pytest.approx(1.0)
    # A group of nothing but bad values has no data: n = 0, mean and se undefined, as for mean_se.
    assert grouped.loc["b", "n"] == 0 and math.isnan(grouped.loc["b", "mean"]) and math.isnan(grouped.loc["b", "se"])
    nothing = mean_se([bad, bad])
    assert nothing.n == 0 and math.isnan(nothing.mean) and math.isnan(nothing.se)


def test_both_infinities_in_one_group_are_dropped_too():
    frame = pd.DataFrame({"g": ["a"] * 5, "v": [np.inf, 1.0, -np.inf, 3.0, np.nan]})
    [row] = grouped_mean_se(frame, ["g"], "v").to_dict("records")
    direct = mean_se(frame["v"])
    assert (row["n"], row["mean"]) == (direct.n, direct.mean) == (2, 2.0)
    assert row["se"] == pytest.approx(direct.se)


def test_holm_known_vector():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> monotone 0.06
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02])


def test_holm_nan_is_not_in_the_family_and_caps_at_one():
    adjusted = holm([0.01, np.nan, 0.04, 0.03, 0.005])
    assert math.isnan(adjusted[1])
    np.testing.assert_allclose(adjusted[[0, 2, 3, 4]], [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.5, 0.6]), [1.0, 1.0])
    assert np.isnan(holm([np.nan])).all()
    np.testing.assert_allclose(holm([0.2]), [0.2])


def test_block_ranks_with_ties_and_incomplete_blocks():
    matrix = pd.DataFrame(
        {"wdrbo": [1.0, 3.0, 0.5], "erbo": [2.0, 1.0, np.nan], "gp-ucb": [2.0, 2.0, 9.0]},
        index=[100, 101, 102],
    )
    ranks = block_ranks(matrix)
    assert list(ranks.index) == [100, 101]  # seed 102 lacks erbo: not ranked
    np.testing.assert_allclose(ranks.loc[100], [1.0, 2.5, 2.5])
    np.testing.assert_allclose(ranks.loc[101], [3.0, 1.0, 2.0])
    mean, n_blocks = average_ranks(matrix)
    assert n_blocks == 2
    np.testing.assert_allclose(mean[["wdrbo", "erbo", "gp-ucb"]], [2.0, 1.75, 2.25])


def test_average_ranks_without_complete_blocks():
    matrix = pd.DataFrame({"a": [1.0, np.nan], "b": [np.nan, 2.0]})
    mean, n_blocks = average_ranks(matrix)
    assert n_blocks == 0 and mean.isna().all()


def _exact_two_sided_p(d: np.ndarray) -> float:
    """Enumerate all 2^n sign patterns of the ranks 1..n (no ties, no zeros)."""
    n = len(d)
    ranks = np.argsort(np.argsort(np.abs(d))) + 1
    t_plus = ranks[d > 0].sum()
    stat = min(t_plus, n * (n + 1) / 2 - t_plus)
    count = 0
    for signs in itertools.product((0, 1), repeat=n):
        t = sum(r for r, s in zip(range(1, n + 1), signs) if s)
        count += min(t, n * (n + 1) / 2 - t) <= stat
    return count / 2**n


def test_wilcoxon_by_hand():
    # d = baseline - reference = [1, -2, 3, 4, 5, -6, 7]: T+ = 20, T- = 8, statistic 8.
    # Subsets of {1..7} with sum <= 8: 1+1+1+2+2+3+4+5+5 = 24, so p = 2 * 24 / 128 = 0.375.
    reference = np.zeros(7)
    baseline = np.array([1.0, -2.0, 3.0, 4.0, 5.0, -6.0, 7.0])
    result = paired_wilcoxon(reference, baseline)
    assert result.n_pairs == 7
    assert (result.wins, result.ties, result.losses) == (5, 0, 2)
    assert result.statistic == 8.0
    assert result.pvalue == pytest.approx(0.375)
    assert result.rank_biserial == pytest.approx((20 - 8) / 28)
    assert result.median_difference == 3.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_wilcoxon_matches_exhaustive_enumeration(seed):
    rng = np.random.default_rng(seed)
    n = 10
    reference = rng.normal(size=n)
    baseline = reference + rng.normal(loc=0.3, size=n)
    result = paired_wilcoxon(reference, baseline)
    assert result.pvalue == pytest.approx(_exact_two_sided_p(baseline - reference))


def test_wilcoxon_all_one_direction():
    # All 5 differences positive: only the all-positive and all-negative patterns are as
    # extreme, p = 2/32; the effect size is +1.
    result = paired_wilcoxon([1, 2, 3, 4, 5], [2, 4, 6, 8, 10])
    assert result.pvalue == pytest.approx(2 / 32)
    assert result.wins == 5 and result.rank_biserial == 1.0
    flipped = paired_wilcoxon([2, 4, 6, 8, 10], [1, 2, 3, 4, 5])
    assert flipped.losses == 5 and flipped.rank_biserial == -1.0 and flipped.pvalue == pytest.approx(2 / 32)


def test_wilcoxon_ties_zeros_and_missing_pairs():
    reference = np.array([1.0, 2.0, 3.0, 4.0, 5.0, np.nan])
    baseline = np.array([1.0 + 1e-14, 3.0, 2.0, 6.0, 5.0, 1.0])  # two ties (one by rounding), one NaN
    result = paired_wilcoxon(reference, baseline)
    assert result.n_pairs == 5
    assert (result.wins, result.ties, result.losses) == (2, 2, 1)
    # nonzero d = [1, -1, 2]: ranks [1.5, 1.5, 3]; T+ = 4.5, T- = 1.5
    assert signed_rank_sums([1.0, -1.0, 2.0, 0.0]) == (4.5, 1.5, 3)
    # the test is on the log-ratios [0, log 1.5, log 2/3, log 1.5, 0]: three tied ranks, T+ = 4, T- = 2
    assert result.scale == "log" and result.rank_biserial == pytest.approx((4 - 2) / 6)
    assert 0 < result.pvalue <= 1


def test_wilcoxon_degenerate_inputs():
    equal = paired_wilcoxon([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert equal.pvalue == 1.0 and equal.ties == 3 and math.isnan(equal.rank_biserial)
    empty = paired_wilcoxon([np.nan, 1.0], [2.0, np.nan])
    assert empty.n_pairs == 0 and math.isnan(empty.pvalue)
    with pytest.raises(ValueError):
        paired_wilcoxon([1.0], [1.0, 2.0])
    assert math.isnan(rank_biserial([0.0, 0.0]))


def test_mean_se_formatting():
    assert significant_digits_format(12.3456, 0.0456) == "12.346 ± 0.046"
    assert significant_digits_format(599.7, 33.0) == "600 ± 33"
    assert significant_digits_format(1.5, math.nan) == "1.5 ± n/a"
    assert significant_digits_format(6.0, 1e-16) == "6 ± 0"
    assert significant_digits_format(math.nan, 1.0) == "n/a"


# --- rank tests and the intervals they invert (rank_intervals.py) --------------------------------

FIXED = [  # paired log-ratios of a few seeds, some with ties and zeros
    [0.3, 0.5, 0.2, 0.9, 0.4, 0.1],
    [0.3, -0.5, 0.2, 0.9, 0.4, 0.1, 0.6, 0.25],
    [0.2, 0.2, -0.2, 0.4, 0.0, 0.5, 0.7, 0.1, 0.3, 0.6],
    [0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
    [-1.0, 2.0, 0.5, 0.7, 1.1, 0.4, 0.9, -0.2, 0.3, 1.5, 0.8, 0.6],
    list(np.linspace(-0.2, 1.0, 15)),
]


def test_exact_null_distributions_match_enumeration():
    from wdrbo_dist.analysis.rank_intervals import rank_sum_cdf, signed_rank_cdf

    for n in (1, 3, 6, 9):
        sums = [sum(r for r, s in zip(range(1, n + 1), signs) if s) for signs in itertools.product((0, 1), repeat=n)]
        counts = np.bincount(sums, minlength=n * (n + 1) // 2 + 1)
        np.testing.assert_allclose(signed_rank_cdf(n), np.cumsum(counts) / 2**n)
    for m, n in ((2, 3), (3, 3), (4, 6)):
        us = [sum(1 for j in range(m + n) if j not in a for i in a if j > i)
              for a in map(set, itertools.combinations(range(m + n), m))]
        counts = np.bincount(us, minlength=m * n + 1)
        np.testing.assert_allclose(rank_sum_cdf(m, n), np.cumsum(counts) / counts.sum())


@pytest.mark.parametrize("d", FIXED, ids=lambda d: f"n{len(d)}")
def test_the_signed_rank_interval_excludes_zero_exactly_when_p_is_below_alpha(d):
    from wdrbo_dist.analysis.rank_intervals import signed_rank

    d = np.array(d)
    for shift in np.linspace(-1.5, 1.5, 61):  # every position of 0 against the interval
        for alpha in (0.05, 0.1, 0.2):
            r = signed_rank(d - shift, alpha)
            excludes = math.isfinite(r.low) and not (r.low <= 0 <= r.high)
            assert excludes == (r.pvalue < alpha), (shift, alpha, r)
    r = signed_rank(d)
    i, j = np.triu_indices(d.size)
    assert r.estimate == pytest.approx(np.median((d[i] + d[j]) / 2))  # Hodges-Lehmann
    if not (d == 0).any() and len(set(np.abs(d))) == d.size:  # no zeros, no ties: scipy's exact test
        assert r.pvalue == pytest.approx(stats.wilcoxon(d, method="exact").pvalue)


@pytest.mark.parametrize("n_a, n_b", [(4, 5), (6, 6), (3, 9)])
def test_the_rank_sum_interval_excludes_zero_exactly_when_p_is_below_alpha(n_a, n_b):
    from wdrbo_dist.analysis.rank_intervals import rank_sum

    a = np.linspace(0.0, 1.0, n_a)
    b = np.linspace(0.3, 1.6, n_b)
    for shift in np.linspace(-2.0, 2.0, 81):
        r = rank_sum(a, b - shift)
        assert (math.isfinite(r.low) and not (r.low <= 0 <= r.high)) == (r.pvalue < 0.05), shift
    r = rank_sum(a, b)
    assert r.pvalue == pytest.approx(stats.mannwhitneyu(b, a, method="exact").pvalue)
    assert r.estimate == pytest.approx(np.median(b[None, :] - a[:, None]))


def test_paired_wilcoxon_ratio_interval_agrees_with_its_p_on_fixed_data():
    reference = np.array([1.0, 2.0, 1.5, 3.0, 2.5, 1.2, 0.8, 2.2, 1.9, 1.1])
    for factor in (0.8, 1.0, 1.1, 1.3, 1.6, 2.5):
        wobble = np.array([1.1, 0.9, 1.05, 0.95, 1.2, 0.85, 1.0, 1.15, 0.92, 1.08])
        result = paired_wilcoxon(reference, reference * factor * wobble)
        assert result.scale == "log" and result.level == pytest.approx(1 - 2 * 25 / 1024)  # 95.1 % at n = 10
        assert (not (result.low <= 1 <= result.high)) == (result.pvalue < 0.05), factor


def test_what_n_paired_seeds_allow():
    from wdrbo_dist.analysis.paired_tests import wilcoxon_note
    from wdrbo_dist.analysis.rank_intervals import seeds_for_holm, smallest_pvalue

    assert smallest_pvalue(5) == pytest.approx(0.0625) and smallest_pvalue(6) == pytest.approx(1 / 32)
    assert seeds_for_holm(7) == 9 and seeds_for_holm(1) == 6  # 7 * 2 / 2^9 < 0.05 <= 7 * 2 / 2^8
    five = paired_wilcoxon([1, 2, 3, 4, 5.0], [2, 4, 6, 8, 10.0])  # all five better: still p = 0.0625
    assert five.pvalue == pytest.approx(0.0625) and math.isnan(five.low) and five.estimate == pytest.approx(2.0)
    frame = pd.DataFrame({"n_pairs": [5] * 7, "pvalue": [0.0625] * 7})
    note = wilcoxon_note(frame, "wdrbo")
    assert "the smallest two-sided p is 0.0625, so none can be significant" in note
    assert "Holm over these 7 tests needs at least 9 paired seeds" in note


def test_ratio_interval_covers_the_ratio_and_tightens_with_data():
    rng = np.random.default_rng(1)
    few_a, few_b = rng.normal(10, 3, 10), rng.normal(10, 3, 10)
    low, high = ratio_of_means_interval(few_a, few_b)
    assert low < few_a.mean() / few_b.mean() < high
    many_a, many_b = rng.normal(10, 3, 1000), rng.normal(10, 3, 1000)
    many_low, many_high = ratio_of_means_interval(many_a, many_b)
    assert many_high - many_low < (high - low) / 5
    # with many data the bootstrap interval is the delta method's normal one
    ma, mb = many_a.mean(), many_b.mean()
    se = math.hypot(many_a.std(ddof=1) / mb, ma * many_b.std(ddof=1) / mb**2) / math.sqrt(1000)
    assert many_low == pytest.approx(ma / mb - 1.96 * se, abs=0.1 * se)
    assert many_high == pytest.approx(ma / mb + 1.96 * se, abs=0.1 * se)


def test_ratio_interval_excludes_one_for_a_clear_difference_and_is_reproducible():
    a, b = [2.0, 2.1, 1.9, 2.05, 1.95], [1.0, 1.1, 0.9, 1.05, 0.95]
    low, high = ratio_of_means_interval(a, b)
    assert 1.8 < low < 2.0 < high < 2.2
    assert ratio_of_means_interval(a, b) == (low, high)


def test_ratio_interval_undefined_without_enough_data():
    assert all(math.isnan(v) for v in ratio_of_means_interval([1.0], [1.0, 2.0]))
    assert all(math.isnan(v) for v in ratio_of_means_interval([1.0, 2.0], [math.nan, math.inf, 3.0]))
    assert all(math.isnan(v) for v in ratio_of_means_interval([1.0, 2.0], [-1.0, 1.0]))
