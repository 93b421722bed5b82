"""Refactoring changes no number: short runs of every algorithm in both profiles (and longer runs
where the GP's basis route is taken, and on two context dimensions where the quadratic forms are) give exactly the records pinned in
tests/data/pinned_records.parquet (see tests/pinned_records.py)."""

from __future__ import annotations

import pandas as pd

from pinned_records import PINNED, pinned_runs


def test_every_algorithm_in_both_profiles_gives_the_pinned_records() -> None:
    pinned = pd.read_parquet(PINNED)
    now = pinned_runs()
    assert list(now.columns) == list(pinned.columns)
    keys = ["fidelity", "algorithm", "evaluations", "problem"]
    for (fidelity, algorithm, evaluations, problem), expected in pinned.groupby(keys, sort=False):
        got = now[(now[keys] == [fidelity, algorithm, evaluations, problem]).all(axis=1)]
        pd.testing.assert_frame_equal(got.reset_index(drop=True), expected.reset_index(drop=True), check_exact=True,
                                      obj=f"{algorithm} on {problem} ({fidelity}, {evaluations} evaluations)")
