"""Short full runs of every DRBO baseline on every problem, in both fidelity profiles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from wdrbo_dist.cli import main as cli_main
from wdrbo_dist.problems import PROBLEMS
from wdrbo_dist.run.records import deterministic_part
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.run.loop import run_one

BASELINES = ("sbo-kde", "drbo-kde", "drbo-mmd", "drbo-mmd-minimax", "stableopt")
FAST = {"num_restarts": 2, "raw_samples": 16, "batch_limit": 16}


def _run(algorithm: str, problem: str, fidelity: str, seed: int = 3, options: dict | None = None) -> pd.DataFrame:
    spec = RunSpec.make(
        options={**FAST, **(options or {})}, algorithm=algorithm, problem=problem, seed=seed,
        evaluations=5, init_size=3, fidelity=fidelity,
    )
    result = run_one(spec, capture_errors=False)
    assert result.ok
    return result.records


@pytest.mark.parametrize("fidelity", ["paper", "reference"])
@pytest.mark.parametrize("algorithm", BASELINES)
def test_short_run_on_every_problem(algorithm: str, fidelity: str) -> None:
    for problem in PROBLEMS:
        records = _run(algorithm, problem, fidelity)
        assert len(records) == 5 and records["is_initial"].sum() == 3
        bo = records[~records.is_initial]
        values = records[["y", "expected_value", "regret"] + [c for c in records if c.startswith("x_")]]
        assert np.isfinite(values.to_numpy(dtype=float)).all(), (algorithm, problem)
        assert (bo["adam_steps"] > 0).all()
        assert (bo["inner_fallbacks"] <= bo["inner_failures"]).all()
        if algorithm in ("drbo-kde", "drbo-mmd", "drbo-mmd-minimax"):
            assert (bo["inner_solves"] > 0).all() and (bo["inner_solve_s"] > 0).all()
        if algorithm == "drbo-mmd":
            # at most one conic solve per candidate (raw screening + each Adam step's restarts + the
            # final check); a candidate whose UCB row repeats one of the step (a pinned restart) reuses it
            candidates = FAST["raw_samples"] + FAST["num_restarts"] * (bo["adam_steps"] + 1)
            assert (bo["inner_solves"] <= candidates).all() and (bo["inner_solves"] > FAST["raw_samples"]).all()
            assert int(bo["inner_fallbacks"].sum()) == 0, problem


@pytest.mark.parametrize(
    ("algorithm", "fidelity", "options"),
    [(a, "reference", {}) for a in BASELINES]
    + [("drbo-mmd", "paper", {}), ("drbo-kde", "paper", {}), ("drbo-mmd", "reference", {"mmd_solver": "SCS"})],
)
def test_runs_are_deterministic(algorithm: str, fidelity: str, options: dict) -> None:
    a = deterministic_part(_run(algorithm, "modified-branin", fidelity, seed=7, options=options))
    b = deterministic_part(_run(algorithm, "modified-branin", fidelity, seed=7, options=options))
    pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_profiles_differ_where_the_reference_has_a_fault() -> None:
    # StableOpt's box: same data, same seed, different searched sets -> different decisions.
    paper = _run("stableopt", "ackley", "paper", seed=11)
    reference = _run("stableopt", "ackley", "reference", seed=11)
    initial = paper.is_initial
    pd.testing.assert_frame_equal(deterministic_part(paper[initial]), deterministic_part(reference[initial]),
                                  check_exact=True)
    assert not np.allclose(paper.loc[~initial, "x_0"], reference.loc[~initial, "x_0"])
    # ... and a switch of method §9 overrides the profile back: the same records to the bit.
    fixed = _run("stableopt", "ackley", "reference", seed=11, options={"stable_box_sign_bug": False})
    pd.testing.assert_frame_equal(deterministic_part(paper), deterministic_part(fixed), check_exact=True)


def test_run_one_cli_with_a_baseline_and_an_override(tmp_path) -> None:
    out = tmp_path / "r.parquet"
    code = cli_main([
        "run-one", "--algorithm", "drbo-mmd", "--problem", "three-hump-camel", "--seed", "1",
        "--evaluations", "5", "--init-size", "3", "--fidelity", "reference", "--quiet", "--out", str(out),
        "--option", "raw_samples=8", "--option", "num_restarts=2", "--option", "batch_limit=8",
        "--option", "mmd_solver=SCS",  # the published solver, one option away from the default
    ])
    assert code == 0
    records = pd.read_parquet(out)
    assert len(records) == 5 and int(records["inner_solves"].sum()) > 0
    bo = records[~records.is_initial]
    assert (bo["inner_programs"] == bo["inner_solves"]).all()  # SCS: one complete program per candidate
