"""Every interval the report prints holds its level at 3, 5, 10 and 15 seeds, or the page says
it does not: a simulation of lognormal and heavy-tailed regrets (coverage_simulation.py).

Calibrated (no flag): the coverage is within 2 points of 95 % (of the exact level a rank test
allows, which the page prints); conservative (†): at least 93 %; n too small: no interval at all.
"""

from __future__ import annotations

import math

import pytest

from tests.analysis.coverage_simulation import DISTRIBUTIONS, REPETITIONS, SEEDS, coverage_table
from wdrbo_dist.analysis.intervals import CONSERVATIVE, LEVEL, TOLERANCE, TOO_FEW

KINDS = 7


@pytest.fixture(scope="module")
def table():
    return coverage_table()


def test_the_simulation_covers_every_kind_distribution_and_seed_count(table):
    assert REPETITIONS >= 2000 and set(SEEDS) == {3, 5, 10, 15}
    assert len(table) == KINDS * len(DISTRIBUTIONS) * len(SEEDS)


def test_every_printed_interval_holds_its_level_or_is_marked(table):
    wrong = []
    for row in table.itertuples():
        if row.flag == TOO_FEW:
            ok = math.isnan(row.coverage)  # the page prints "n too small", no interval
        elif row.flag == CONSERVATIVE:
            ok = row.coverage >= LEVEL - TOLERANCE
        else:
            ok = abs(row.coverage - LEVEL) <= TOLERANCE + 1e-9 and abs(row.coverage - row.level) <= TOLERANCE
        if not ok:
            flag = row.flag or "calibrated"
            wrong.append(f"{row.kind}, {row.distribution}, n = {row.n}: {row.coverage:.3f} ({flag})")
    assert not wrong, "\n".join(wrong)


def test_the_intervals_that_replaced_the_bootstrap_are_calibrated_at_ten_seeds(table):
    """At the seed counts studies run, the page's main intervals carry no flag."""
    at_ten = table[table["n"] == 10]
    assert set(at_ten.loc[at_ten["flag"] == "", "kind"]) >= {
        "median regret", "ratio, paired (Wilcoxon)", "ratio, unpaired (Mann-Whitney)"}


def test_the_simulation_is_deterministic():
    first = coverage_table(seed=11).head(KINDS)
    assert first.equals(coverage_table(seed=11).head(KINDS))
