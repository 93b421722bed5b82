"""The pinned records: a refactor changes no number, on any x86-64 machine.

Where the machine's numerical fingerprint is the pins', every record must be identical; on
other kernels, records that differ only in the last bits pass and a real change of method
fails (tests/support/pinned_records.py says which rows each check holds).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import wdrbo_dist.acquisition.optimize as optimize
from tests.support.pinned_records import (
    EVALUATIONS,
    TOLERANCE,
    cases,
    differences,
    numerical_fingerprint,
    pinned_runs,
    read_pins,
)


@pytest.fixture(scope="module")
def pins() -> tuple[pd.DataFrame, str]:
    return read_pins()


def test_every_algorithm_in_both_profiles_gives_the_pinned_records(pins) -> None:
    pinned, fingerprint = pins
    exact = numerical_fingerprint() == fingerprint
    found = differences(pinned_runs(), pinned, exact=exact)
    assert not found, f"{'exact' if exact else f'to {TOLERANCE:g}'} check:\n" + "\n".join(found)


def _short(pinned: pd.DataFrame) -> pd.DataFrame:
    return pinned[pinned["evaluations"] == EVALUATIONS]


def test_records_that_differ_in_the_last_bits_pass_off_the_pins_machine_only(pins) -> None:
    pinned, _ = pins
    noisy = pinned.copy()
    values = noisy.select_dtypes("float64").columns
    rng = np.random.default_rng(3)
    noisy[values] = noisy[values] * (1 + 1e-12 * rng.standard_normal(noisy[values].shape))
    assert differences(noisy, pinned, exact=False) == []
    found = differences(noisy, pinned, exact=True)
    assert len(found) == pinned.groupby(["fidelity", "algorithm", "evaluations", "problem"]).ngroups
    assert all(": step " in line for line in found)


class _OneMoreAdamStep:
    """The stopping rule, firing one Adam step after it would."""

    def __init__(self, rule: optimize.MovingAverageStop) -> None:
        self.rule, self.delayed = rule, False

    def __call__(self, loss: float) -> bool:
        if self.rule(loss) and not self.delayed:
            self.delayed = True
            return False
        return self.delayed


MUTATIONS = {
    "beta + 1e-6": ({"beta": 1.5 + 1e-6}, None),
    "radius constant x (1 + 1e-6)": ({"radius_constant": 0.3 * (1 + 1e-6)}, None),
    "one more Adam step": ({}, "adam"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_real_change_of_method_fails_the_check_on_any_machine(mutation, pins, monkeypatch) -> None:
    pinned, _ = pins
    options, patch = MUTATIONS[mutation]
    selected = [c for c in cases() if c.evaluations == EVALUATIONS and c.fidelity == "paper"]
    if "radius_constant" in options:
        selected = [c for c in selected if c.algorithm == "wdrbo"]
    if patch == "adam":
        original = optimize.MovingAverageStop
        monkeypatch.setattr(optimize, "MovingAverageStop", lambda *a, **k: _OneMoreAdamStep(original(*a, **k)))
    mutated = pinned_runs(selected, options)
    expected = _short(pinned)
    expected = expected[expected["fidelity"] == "paper"]
    expected = expected[expected["algorithm"].isin([c.algorithm for c in selected])]
    for exact in (True, False):
        found = differences(mutated, expected, exact=exact)
        assert found, f"{mutation} passes the {'exact' if exact else f'{TOLERANCE:g}'} check"
        assert all(": step " in line for line in found), found  # values differ, not the table's shape
