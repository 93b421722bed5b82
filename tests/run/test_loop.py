"""run_one: the BO loop of method §1.3 and the records of method §9.2."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from wdrbo_dist.acquisition.registry import ALGORITHMS
from wdrbo_dist.problems import PROBLEMS, make_problem
from wdrbo_dist.run.records import CORE_COLUMNS, deterministic_part
from wdrbo_dist.run.spec import RunSpec, validate_spec
from wdrbo_dist.run.loop import run_one

FAST = {"num_restarts": 2, "raw_samples": 32, "batch_limit": 32}


def _run(algorithm: str = "erbo", problem: str = "three-hump-camel", seed: int = 1, **kw) -> pd.DataFrame:
    options = {**FAST, **kw.pop("options", {})}
    spec = RunSpec.make(options=options, algorithm=algorithm, problem=problem, seed=seed, **{"evaluations": 8, "init_size": 4, **kw})
    result = run_one(spec, capture_errors=False)
    assert result.ok
    return result.records


def _deterministic(frame: pd.DataFrame) -> pd.DataFrame:
    return deterministic_part(frame)


def test_records_have_the_schema_and_mark_the_initial_design() -> None:
    records = _run("wdrbo", "modified-branin")
    assert list(records.columns) == list(CORE_COLUMNS) + ["x_0", "x_1", "c_0", "c_1"]
    assert records["step"].tolist() == list(range(1, 9))
    assert records["is_initial"].tolist() == [True] * 4 + [False] * 4
    assert records["n_observations"].tolist() == [0] * 4 + [4, 5, 6, 7]
    assert records.loc[~records.is_initial, "adam_steps"].min() > 0


def test_regret_arithmetic() -> None:
    records = _run("gp-ucb", "newsvendor")
    problem = make_problem("newsvendor")
    regret = problem.optimal_value - records["expected_value"]
    assert np.allclose(records["regret"], regret)
    assert np.allclose(records["regret_reference"], problem.reference_optimal_value - records["expected_value"])
    assert np.allclose(records["cumulative_regret"], np.cumsum(regret))
    assert np.allclose(records["cumulative_regret_reference"], np.cumsum(records["regret_reference"]))
    assert (records["regret"] >= -1e-9).all()  # against the exact optimum regret is never negative
    assert np.allclose(records["best_y"], np.maximum.accumulate(records["y"]))
    x = records[["x_0"]].to_numpy()
    import torch

    assert np.allclose(records["expected_value"], problem.expected_value(torch.tensor(x)).numpy())


def test_same_spec_same_records_and_seeds_differ() -> None:
    a, b = _run(seed=3), _run(seed=3)
    pd.testing.assert_frame_equal(_deterministic(a), _deterministic(b), check_exact=True)
    c = _run(seed=4)
    assert not np.allclose(a["x_0"], c["x_0"])


def test_all_algorithms_of_one_seed_share_the_design_and_context_stream() -> None:
    runs = [_run(name, "hartmann") for name in ("wdrbo", "erbo", "gp-ucb")]
    for other in runs[1:]:
        pd.testing.assert_frame_equal(runs[0][runs[0].is_initial][["x_0", "c_0", "y"]], other[other.is_initial][["x_0", "c_0", "y"]],
                                      check_exact=True)
        assert np.array_equal(runs[0]["c_0"], other["c_0"])  # the environment's draws do not depend on x


def test_erbo_equals_wdrbo_at_radius_zero_for_a_whole_run() -> None:
    a = _run("erbo", "ackley")
    b = _run("wdrbo", "ackley", options={"radius_constant": 0.0})
    pd.testing.assert_frame_equal(_deterministic(a).drop(columns="radius"), _deterministic(b).drop(columns="radius"),
                                  check_exact=True)


def test_fidelity_changes_six_hump_regret_but_not_observations() -> None:
    paper = _run("erbo", "six-hump-camel", fidelity="paper")
    reference = _run("erbo", "six-hump-camel", fidelity="reference")
    assert np.array_equal(paper[paper.is_initial]["y"], reference[reference.is_initial]["y"])
    assert not np.allclose(paper["expected_value"], reference["expected_value"])


@pytest.mark.parametrize("algorithm", ["wdrbo", "erbo", "gp-ucb"])
@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_short_full_run_of_each_core_algorithm_on_each_problem(algorithm: str, problem: str) -> None:
    records = _run(algorithm, problem, evaluations=6, init_size=3)
    assert len(records) == 6
    assert np.isfinite(records[["y", "expected_value", "regret", "cumulative_regret"]].to_numpy()).all()
    p = make_problem(problem)
    lower, upper = p.decision_bounds.numpy()
    xs = records[[f"x_{i}" for i in range(p.dim_x)]].to_numpy()
    assert ((xs >= lower - 1e-12) & (xs <= upper + 1e-12)).all()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"algorithm": "nope"}, "algorithm: unknown 'nope'; allowed: wdrbo, erbo"),
        ({"problem": "nope"}, "problem: unknown 'nope'; allowed: ackley"),
        ({"fidelity": "exact"}, "fidelity: unknown 'exact'; allowed: paper, reference"),
        ({"seed": -1}, "seed: must be an integer >= 0"),
        ({"evaluations": 5}, "evaluations: must be an integer > init_size (5)"),
        ({"init_size": 0}, "init_size: must be an integer >= 1"),
        ({"device": "cuda:7"}, "device: 'cuda:7' is not available here; allowed: cpu"),
        ({"options": (("nope", 1),)}, "unknown option 'nope' for algorithm 'erbo'; allowed: adam_projected, batch_limit, beta, num_restarts, raw_samples"),
        # a numerical route is no option: NumericalSettings.adam_pass, chosen by the run's device
        ({"options": (("adam_pass", "torch"),)}, "unknown option 'adam_pass' for algorithm 'erbo'; allowed: adam_projected"),
        ({"options": (("beta", "high"),)}, "option 'beta' of algorithm 'erbo' must be a finite number, got str 'high'"),
    ],
)
def test_bad_specs_are_refused_with_the_field_and_allowed_values(change: dict, message: str) -> None:
    spec = RunSpec(**{"algorithm": "erbo", "problem": "ackley", "seed": 0, "evaluations": 10, "init_size": 5, **change})
    with pytest.raises(ValueError) as info:
        validate_spec(spec)
    assert message in str(info.value)


def test_a_failing_run_is_captured_with_its_traceback() -> None:
    result = run_one(RunSpec(algorithm="erbo", problem="nope", seed=0))
    assert result.status == "FAILED" and "problem: unknown 'nope'" in (result.error or "")


def test_a_run_returns_every_option_it_used_and_the_store_keeps_them(tmp_path) -> None:
    from wdrbo_dist.storage.store import ResultStore

    spec = RunSpec.make(options={**FAST, "mmd_solver": "scs"}, algorithm="drbo-mmd", problem="newsvendor",
                        seed=3, evaluations=6, init_size=4, fidelity="reference")
    result = run_one(spec, capture_errors=False)
    declared = ALGORITHMS["drbo-mmd"].declared_options()
    assert set(result.options) == set(declared)  # the profile's defaults included
    assert (result.options["mmd_solver"], result.options["raw_samples"]) == ("SCS", 32)  # what was given
    assert "mmd_working_set" not in result.options  # a route, not an option: NumericalSettings
    assert result.options["mmd_diagonal_grid"] is True  # the reference profile's default
    store = ResultStore(tmp_path)
    store.save(result)
    assert store.read_result(spec.run_key).options == result.options


def test_run_key_is_a_content_hash_of_the_spec() -> None:
    a = RunSpec.make(options={"beta": 1.5, "raw_samples": 64}, algorithm="wdrbo", problem="ackley", seed=1)
    b = RunSpec.make(options={"raw_samples": 64, "beta": 1.5}, algorithm="wdrbo", problem="ackley", seed=1, device="cuda", study="x")
    c = RunSpec.make(options={"beta": 2.0, "raw_samples": 64}, algorithm="wdrbo", problem="ackley", seed=1)
    assert a.run_key == b.run_key != c.run_key
    assert a.label == "ackley|wdrbo|s1"
    assert set(ALGORITHMS) >= {"wdrbo", "erbo", "gp-ucb"}
