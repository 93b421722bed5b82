"""`exp_in_place`, the fresh-context kernels' polynomial exponential (option `fresh_exp`)."""

from __future__ import annotations

import numpy as np
import pytest

from wdrbo_dist.models.compiled_ucb import exp_in_place


@pytest.mark.parametrize("lowest", [-1.0, -40.0, -708.0])
def test_it_is_within_one_ulp_of_libms_exp(lowest: float) -> None:
    x = np.random.default_rng(int(-lowest)).uniform(lowest, 0.0, 1_000_000)
    x[:4] = [0.0, -0.0, -1e-300, lowest]
    values = x.copy()
    exp_in_place(values)
    expected = np.exp(x)
    ulps = np.abs(values - expected) / np.spacing(expected)
    assert ulps.max() <= 1.0
    assert 0.0 < (values != expected).mean() < 0.3  # another function: it does differ, by rounding
    assert values[0] == values[1] == 1.0


def test_below_the_smallest_it_is_zero_where_libms_is_below_3e_308() -> None:
    x = np.array([-708.5, -745.0, -1e4, -np.inf])
    values = x.copy()
    exp_in_place(values)
    assert np.all(values == 0.0) and np.all(np.exp(x) < 3.3e-308)


@pytest.mark.parametrize("algorithm", ["stableopt", "drbo-kde"])
def test_the_option_moves_a_run_by_rounding_only_at_first(algorithm: str) -> None:
    from wdrbo_dist.run import RunSpec, run_one

    records = {}
    for choice in ("libm", "polynomial"):
        spec = RunSpec.make(algorithm=algorithm, problem="ackley", seed=3, evaluations=7, init_size=5,
                            options={"fresh_exp": choice, "num_restarts": 2, "raw_samples": 32})
        result = run_one(spec, capture_errors=False)
        assert result.ok
        records[choice] = result.records
    columns = ["x_0", "x_1"]
    first = {choice: frame.loc[~frame["is_initial"], columns].to_numpy()[0] for choice, frame in records.items()}
    assert np.allclose(first["libm"], first["polynomial"], rtol=0.0, atol=1e-6)  # the first BO point
