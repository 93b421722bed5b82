"""The `random` algorithm: a scrambled Sobol sequence over the decision box, no model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wdrbo_dist.acquisition.sobol import draw_seed
from wdrbo_dist.acquisition.registry import ALGORITHMS
from wdrbo_dist.problems import make_problem
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.run.loop import make_generators, run_one


def _run(seed: int, problem: str = "ackley", evaluations: int = 12):
    spec = RunSpec.make(algorithm="random", problem=problem, seed=seed, evaluations=evaluations, init_size=4)
    result = run_one(spec, capture_errors=False)
    assert result.ok
    return result.records


def test_random_is_registered_with_a_name_a_colour_and_a_description():
    cls = ALGORITHMS["random"]
    assert cls.display_name and cls.colour and "Sobol" in cls.description


def test_after_the_design_the_decisions_are_the_sobol_sequence_of_the_algorithm_stream():
    records = _run(seed=11)
    problem = make_problem("ackley")
    lower, upper = (b.numpy() for b in problem.decision_bounds)
    engine = torch.quasirandom.SobolEngine(problem.dim_x, scramble=True,
                                           seed=draw_seed(make_generators(11)["algorithm"]))
    expected = lower + (upper - lower) * engine.draw(8, dtype=torch.float64).numpy()
    chosen = records.loc[~records["is_initial"], ["x_0", "x_1"]].to_numpy()
    np.testing.assert_allclose(chosen, expected, rtol=0, atol=1e-12)
    assert ((chosen >= lower) & (chosen <= upper)).all()


def test_no_model_is_fitted_and_no_acquisition_is_maximised():
    bo = _run(seed=3).query("not is_initial")
    assert (bo["time_fit_s"] == 0).all() and (bo["fit_attempts"] == 0).all()
    assert (bo["acquisition_calls"] == 0).all() and (bo["adam_steps"] == 0).all()
    assert bo["radius"].isna().all()


def test_a_seed_gives_the_same_run_and_shares_its_design_with_the_other_algorithms():
    a, b, other = _run(seed=5), _run(seed=5), _run(seed=6)
    columns = ["x_0", "x_1", "c_0", "y", "regret"]
    np.testing.assert_array_equal(a[columns].to_numpy(), b[columns].to_numpy())
    assert not np.allclose(a.loc[~a["is_initial"], "x_0"], other.loc[~other["is_initial"], "x_0"])
    ucb = run_one(RunSpec.make(algorithm="gp-ucb", problem="ackley", seed=5, evaluations=5,
                               init_size=4, options={"raw_samples": 16, "num_restarts": 1}), capture_errors=False)
    design = a[a["is_initial"]][columns].to_numpy()
    np.testing.assert_array_equal(design, ucb.records[ucb.records["is_initial"]][columns].to_numpy())


def test_asking_random_for_an_acquisition_is_an_error():
    algorithm = ALGORITHMS["random"](make_problem("ackley"), "paper")
    with pytest.raises(TypeError, match="model-free"):
        algorithm.acquisition(None, None, torch.Generator())
