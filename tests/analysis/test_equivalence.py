"""The equivalence test that decides every fidelity cell: TOST on the log-ratio, margin [0.8, 1.25].

(a) A simulation of regrets shaped like this field's (lognormal, log-sd 0.3 and 0.8; a mixture
where 15 % of runs are stuck at a bad decision, log shifted up by 1.5, on both sides or on one
side only) at 5, 10, 15 and 40 seeds a side, unpaired and paired: the 90 % interval covers the
true log-ratio within 2 points of 90 % wherever the result says it is calibrated, and a true
ratio on the margin is called "equivalent" at most 7 % of the time (5 % + 2 points).
(b) Fixed examples against scipy's Welch and one-sample t-tests and a TOST worked by hand.
(c) The three verdicts, and the regrets the test refuses.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from wdrbo_dist.analysis.equivalence import (
    ALPHA, CALIBRATED_FROM, DIFFERENT, EQUIVALENT, LOG_MARGIN, MARGIN, UNDETERMINED, equivalence, one_sample,
    seeds_for_power, tost, welch,
)

# --- (a) the simulation -------------------------------------------------------------------------

REPETITIONS = 20_000  # per setting and margin; the Monte Carlo SE of a 90 % coverage is 0.2 points
SEED = 59
SEEDS = (5, 10, 15, 40)
LEVEL, TOLERANCE, SIZE_LIMIT = 0.90, 0.02, ALPHA + 0.02
STUCK_SHARE, STUCK_SHIFT, MIXTURE_LOG_SD = 0.15, 1.5, 0.3  # a stuck run pays exp(1.5) = 4.5 times the regret

Draw = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]  # log regrets of the given shape


def lognormal(sd: float) -> Draw:
    return lambda rng, size: rng.normal(0.0, sd, size)


def mixture(rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    return rng.normal(0.0, MIXTURE_LOG_SD, size) + STUCK_SHIFT * (rng.random(size) < STUCK_SHARE)


MIXTURE_MEAN_LOG = STUCK_SHARE * STUCK_SHIFT  # exact: 0.85 * 0 + 0.15 * 1.5; a lognormal's mean log is 0

LOG_SD_03, LOG_SD_08 = lognormal(0.3), lognormal(0.8)
# name: (our log regrets, the published code's, mean log ours - mean log published before the shift)
SHAPES: dict[str, tuple[Draw, Draw, float]] = {
    "lognormal, log-sd 0.3": (LOG_SD_03, LOG_SD_03, 0.0),
    "lognormal, log-sd 0.8": (LOG_SD_08, LOG_SD_08, 0.0),
    "mixture, both sides stuck 15 %": (mixture, mixture, 0.0),
    "mixture, our side alone stuck 15 %": (mixture, LOG_SD_03, MIXTURE_MEAN_LOG),
}


def simulate(seed: int = SEED, repetitions: int = REPETITIONS) -> list[dict[str, object]]:
    """Per shape, n and design: the 90 % interval's coverage of the true log-ratio and the share
    called equivalent when the true ratio is 1.25 (and 0.8 where the two sides differ in shape:
    with one shape a side, 0.8 is 1.25 seen from the other side, the same by symmetry)."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, (ours, theirs, offset) in SHAPES.items():
        for n in SEEDS:
            for design in ("unpaired", "paired"):
                row: dict[str, object] = {"shape": name, "n": n, "design": design}
                covered = []
                for truth in (LOG_MARGIN,) if ours is theirs else (LOG_MARGIN, -LOG_MARGIN):
                    a = ours(rng, (repetitions, n)) + (truth - offset)  # the true log-ratio is exactly `truth`
                    b = theirs(rng, (repetitions, n))
                    found = tost(*(one_sample(a - b) if design == "paired" else welch(a, b)))
                    covered.append((found["low90"] <= truth) & (truth <= found["high90"]))
                    inside = (found["low90"] > -LOG_MARGIN) & (found["high90"] < LOG_MARGIN)
                    assert np.array_equal(inside, found["p_tost"] < ALPHA)  # TOST is the interval's rule
                    row[f"equivalent at {math.exp(truth):.2f}"] = float(np.mean(inside))
                row["coverage"] = float(np.mean(covered))
                rows.append(row)
    return rows


@pytest.fixture(scope="module")
def simulated() -> list[dict[str, object]]:
    return simulate()


def calibrated(n: int) -> bool:
    """What the module says of an interval on n seeds a side."""
    return equivalence(np.arange(1.0, n + 1), np.arange(1.0, n + 1)).calibrated


def test_the_simulation_covers_every_shape_seed_count_and_design(simulated) -> None:
    assert REPETITIONS >= 2000 and set(SEEDS) == {5, 10, 15, 40}
    assert len(simulated) == len(SHAPES) * len(SEEDS) * 2


def test_the_90_interval_covers_within_two_points_wherever_it_is_called_calibrated(simulated) -> None:
    wrong = [f"{r['shape']}, n = {r['n']}, {r['design']}: {r['coverage']:.3f}" for r in simulated
             if calibrated(r["n"]) and abs(r["coverage"] - LEVEL) > TOLERANCE]
    assert not wrong, "\n".join(wrong)


def test_lognormal_regrets_need_no_flag_and_stuck_runs_on_one_side_earn_it(simulated) -> None:
    """The flag is not a blanket: lognormal intervals hold at every n; below CALIBRATED_FROM the
    one-sided mixture misses (86-88 % measured), and from it on every shape holds."""
    for r in simulated:
        if r["shape"].startswith("lognormal") or r["n"] >= CALIBRATED_FROM:
            assert abs(r["coverage"] - LEVEL) <= TOLERANCE, r
    one_sided = [r for r in simulated if r["shape"].endswith("alone stuck 15 %") and r["n"] < CALIBRATED_FROM]
    assert one_sided and all(r["coverage"] < LEVEL - TOLERANCE for r in one_sided)
    assert [calibrated(n) for n in SEEDS] == [n >= CALIBRATED_FROM for n in SEEDS] == [False, False, True, True]


def test_a_true_ratio_on_the_margin_is_called_equivalent_at_most_seven_percent_of_the_time(simulated) -> None:
    wrong = [f"{r['shape']}, n = {r['n']}, {r['design']}: {key} {r[key]:.3f}" for r in simulated
             for key in ("equivalent at 1.25", "equivalent at 0.80") if r.get(key, 0.0) > SIZE_LIMIT]
    assert not wrong, "\n".join(wrong)


def test_seeds_needed_give_about_eighty_percent_power_at_ratio_one() -> None:
    """Log-sd 0.3 a side: (1.645 + 1.282)^2 * 0.18 / log(1.25)^2 = 30.96, so 31 seeds a side; at
    31 the TOST calls a true ratio of 1 equivalent 76-82 % of the time: the normal approximation
    asks a little too few, as the t's tails at 30 (paired) to 60 (Welch) df cost 1-3 points."""
    assert seeds_for_power(2 * 0.3**2) == 31
    rng = np.random.default_rng(SEED)
    a, b = rng.normal(0, 0.3, (REPETITIONS, 31)), rng.normal(0, 0.3, (REPETITIONS, 31))
    assert 0.76 <= float(np.mean(tost(*welch(a, b))["p_tost"] < ALPHA)) <= 0.82
    assert 0.76 <= float(np.mean(tost(*one_sample(a - b))["p_tost"] < ALPHA)) <= 0.82


# --- (b) fixed examples -------------------------------------------------------------------------

OURS = [412.0, 455.0, 498.0, 530.0, 471.0]
PUBLISHED = [440.0, 501.0, 389.0, 460.0, 515.0, 478.0]


def test_unpaired_is_welchs_t_on_the_log_regrets() -> None:
    found = equivalence(OURS, PUBLISHED)
    la, lb = np.log(OURS), np.log(PUBLISHED)
    welch_t = stats.ttest_ind(la, lb, equal_var=False)
    assert found.p_difference == pytest.approx(welch_t.pvalue, rel=1e-10)
    assert found.df == pytest.approx(welch_t.df, rel=1e-10)
    assert found.ratio == pytest.approx(math.exp(la.mean() - lb.mean()), rel=1e-12)
    for level, low, high in ((0.90, found.low90, found.high90), (0.95, found.low95, found.high95)):
        interval = welch_t.confidence_interval(level)
        assert (low, high) == pytest.approx((math.exp(interval.low), math.exp(interval.high)), rel=1e-10)
    # Each one-sided test is Welch's t of log a - log(bound) against log b, one-sided
    lower = stats.ttest_ind(la - math.log(MARGIN[0]), lb, equal_var=False, alternative="greater")
    upper = stats.ttest_ind(la - math.log(MARGIN[1]), lb, equal_var=False, alternative="less")
    assert (found.p_lower, found.p_upper) == pytest.approx((lower.pvalue, upper.pvalue), rel=1e-10)
    assert found.p_tost == max(found.p_lower, found.p_upper)
    assert (found.n_a, found.n_b, found.design) == (5, 6, "unpaired")


def test_paired_is_the_one_sample_t_on_the_per_seed_log_ratios() -> None:
    ours, theirs = OURS, PUBLISHED[:5]
    found = equivalence(ours, theirs, paired=True)
    d = np.log(ours) - np.log(theirs)
    one = stats.ttest_1samp(d, 0.0)
    assert found.p_difference == pytest.approx(one.pvalue, rel=1e-10)
    assert found.df == 4
    interval = one.confidence_interval(0.90)
    assert (found.low90, found.high90) == pytest.approx((math.exp(interval.low), math.exp(interval.high)), rel=1e-10)
    assert found.p_upper == pytest.approx(stats.ttest_1samp(d, math.log(1.25), alternative="less").pvalue, rel=1e-10)
    assert found.p_lower == pytest.approx(stats.ttest_1samp(d, math.log(0.8), alternative="greater").pvalue,
                                          rel=1e-10)


def test_a_tost_worked_by_hand() -> None:
    """Four seeds, per-seed log-ratios d = 0.15, -0.05, 0.15, -0.05 (regrets of any size: the seed's
    level cancels). Mean 0.05; deviations +-0.1, so s^2 = 4 * 0.01 / 3 and SE = s / 2 = 0.057735.
    Against log 0.8 = -0.22314: t = (0.05 + 0.22314) / 0.057735 = 4.7310, p = P(T_3 > 4.7310) = 0.0089.
    Against log 1.25 = +0.22314: t = (0.05 - 0.22314) / 0.057735 = -2.9989, p = P(T_3 < -2.9989) = 0.0289.
    TOST p = 0.0289 < 0.05: equivalent. The 90 % interval 0.05 +- 2.3534 * 0.057735 = [-0.0859, 0.1859],
    as ratios [0.918, 1.204], inside [0.8, 1.25]: the same verdict read off the interval."""
    d = np.array([0.15, -0.05, 0.15, -0.05])
    theirs = np.array([100.0, 250.0, 40.0, 800.0])
    found = equivalence(theirs * np.exp(d), theirs, paired=True)
    se = math.sqrt(4 * 0.01 / 3) / 2
    assert se == pytest.approx(0.057735, abs=1e-6)
    assert found.p_lower == pytest.approx(stats.t.sf(4.7310, 3), abs=1e-5)
    assert found.p_upper == pytest.approx(stats.t.cdf(-2.9989, 3), abs=1e-5)
    assert (round(found.p_lower, 4), round(found.p_upper, 4), round(found.p_tost, 4)) == (0.0089, 0.0289, 0.0289)
    assert (round(found.low90, 3), round(found.high90, 3)) == (0.918, 1.204)
    assert found.ratio == pytest.approx(math.exp(0.05))
    assert found.verdict == EQUIVALENT


# --- (c) verdicts and refusals ------------------------------------------------------------------

def test_a_clearly_equivalent_cell() -> None:
    """Two codes within 1 % on ten tight seeds: the 90 % interval sits well inside the margin."""
    rng = np.random.default_rng(1)
    ours, theirs = 500 * np.exp(rng.normal(0, 0.05, 10)), 495 * np.exp(rng.normal(0, 0.05, 10))
    found = equivalence(ours, theirs)
    assert found.verdict == EQUIVALENT and found.p_tost < 1e-6
    assert MARGIN[0] < found.low90 < found.ratio < found.high90 < MARGIN[1]
    assert found.seeds_needed == 10  # never fewer than the cell has


def test_a_clearly_different_cell() -> None:
    rng = np.random.default_rng(2)
    ours, theirs = 1000 * np.exp(rng.normal(0, 0.1, 10)), 500 * np.exp(rng.normal(0, 0.1, 10))
    found = equivalence(ours, theirs)
    assert found.verdict == DIFFERENT and 1 < found.low95 and found.low90 > MARGIN[1]
    assert found.ratio == pytest.approx(2.0, rel=0.15) and found.seeds_needed is None


def test_ten_seeds_can_hide_a_thirty_percent_shift_and_the_verdict_says_so() -> None:
    """Heavy-tailed regrets (log-sd 0.6), ours 30 % higher: no test of difference rejects, which
    the old rule called agreement; TOST says what the data hold, and how many seeds would decide."""
    rng = np.random.default_rng(3)
    theirs = 300 * np.exp(rng.normal(0, 0.6, 10))
    ours = 1.3 * 300 * np.exp(rng.normal(0, 0.6, 10))
    found = equivalence(ours, theirs)
    assert stats.mannwhitneyu(ours, theirs).pvalue >= 0.05 and found.p_difference >= 0.05
    assert found.verdict == UNDETERMINED
    assert found.low90 < MARGIN[0] or found.high90 > MARGIN[1]
    assert found.seeds_needed == seeds_for_power(float(np.var(np.log(ours), ddof=1) + np.var(np.log(theirs), ddof=1)))
    assert found.seeds_needed > 40


def test_identical_paired_records_are_equivalent() -> None:
    """A version that did not change an algorithm: every per-seed log-ratio is 0."""
    regrets = [491.0, 483.0, 512.0, 470.0]
    found = equivalence(regrets, regrets, paired=True)
    assert (found.ratio, found.low90, found.high90, found.p_tost, found.p_difference) == (1.0, 1.0, 1.0, 0.0, 1.0)
    assert found.verdict == EQUIVALENT
    unpaired = equivalence([5.0, 5.0, 5.0], [5.0, 5.0])
    assert unpaired.verdict == EQUIVALENT and unpaired.df == math.inf


def test_fewer_than_two_a_side_decide_nothing() -> None:
    found = equivalence([3.0], [2.0, 2.5])
    assert found.verdict == UNDETERMINED and found.ratio == pytest.approx(3.0 / math.sqrt(5.0))
    assert math.isnan(found.low90) and math.isnan(found.p_tost) and found.seeds_needed is None
    assert equivalence([], []).verdict == UNDETERMINED


@pytest.mark.parametrize("bad", [0.0, -1.5, math.nan, math.inf])
def test_regrets_without_a_log_are_refused(bad: float) -> None:
    """Cumulative exact regret is >= 0 and 0 only in degenerate runs; its log must exist."""
    with pytest.raises(ValueError, match="not finite and > 0.*log-ratio"):
        equivalence([1.0, 2.0, bad], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="not finite and > 0"):
        equivalence([1.0, 2.0, 3.0], [bad, 2.0, 3.0], paired=True)


def test_paired_samples_must_pair() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        equivalence([1.0, 2.0, 3.0], [1.0, 2.0], paired=True)


def test_the_result_is_frozen_and_the_margin_symmetric_on_the_log_scale() -> None:
    found = equivalence(OURS, PUBLISHED)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.verdict = DIFFERENT  # type: ignore[misc]
    assert math.log(MARGIN[0]) == pytest.approx(-LOG_MARGIN) and LOG_MARGIN == pytest.approx(math.log(1.25))


if __name__ == "__main__":  # the table in docs/results.md: coverage % (false "equivalent" % at the worse margin)
    print("| shape | design | " + " | ".join(f"n = {n}" for n in SEEDS) + " |\n|---|---|" + "---|" * len(SEEDS))
    table = simulate()
    for name in SHAPES:
        for design in ("unpaired", "paired"):
            cells = [r for r in table if r["shape"] == name and r["design"] == design]
            worse = [max(r["equivalent at 1.25"], r.get("equivalent at 0.80", 0.0)) for r in cells]
            text = [f"{100 * r['coverage']:.1f} ({100 * w:.1f})" for r, w in zip(cells, worse)]
            print(f"| {name} | {design} | " + " | ".join(text) + " |")
