"""Adding a problem and an algorithm takes what the README's "Adding a problem" and "Adding an
algorithm" say, and nothing else: a class each, registered; a study, `summarize` and `report`
then work with them. A new option is one declaration in its algorithm's file, and its test."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import yaml

from wdrbo_dist.acquisition.registry import ALGORITHMS
from wdrbo_dist.cli import main
from wdrbo_dist.problems import PROBLEMS, Problem, register_problem

PLUGIN = '''
import torch

from wdrbo_dist.acquisition.base import Acquisition, Algorithm
from wdrbo_dist.acquisition.registry import register_algorithm
from wdrbo_dist.problems import register_problem
from wdrbo_dist.problems.base import DTYPE, Problem

HALF_WIDTH = 0.1  # c ~ U(0.5 - w, 0.5 + w)


@register_problem
class Parabola(Problem):
    """f(x, c) = -(x - c)^2: the best decision is the mean context."""

    name = "parabola"
    display_name = "Parabola"
    dim_x = 1
    dim_c = 1
    optimal_x = (0.5,)
    optimal_value = -(2 * HALF_WIDTH) ** 2 / 12  # -Var(c)
    reference_optimal_value = optimal_value

    def sample_context(self, n, generator):
        u = torch.rand(n, 1, generator=generator, dtype=DTYPE)
        return 0.5 - HALF_WIDTH + 2 * HALF_WIDTH * u

    def evaluate(self, x, c):
        return -((x - c) ** 2).sum(-1)

    def expected_value(self, x):
        return -((x[:, 0] - 0.5) ** 2) + self.optimal_value


class PosteriorMean(Acquisition):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model.ucb(x, 0.0)


@register_algorithm
class Greedy(Algorithm):
    name = "greedy"
    display_name = "Greedy mean"
    description = "the GP's posterior mean on the decision only"
    uses_context = False

    def acquisition(self, model, state, generator):
        return PosteriorMean(model)
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch):
    """The plugin module, imported from a temporary folder; the registries restored after."""
    (tmp_path / "my_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    before_problems, before_algorithms = dict(PROBLEMS), dict(ALGORITHMS)
    module = importlib.import_module("my_plugin")
    yield module
    sys.modules.pop("my_plugin", None)
    PROBLEMS.clear()
    PROBLEMS.update(before_problems)
    ALGORITHMS.clear()
    ALGORITHMS.update(before_algorithms)


def test_a_new_problem_and_algorithm_run_through_a_study_summarize_and_report(plugin, tmp_path, capsys) -> None:
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": "plugin", "problems": ["parabola", "newsvendor"],
        "algorithms": [{"name": "greedy", "options": {"raw_samples": 32, "num_restarts": 2}},
                       {"name": "erbo", "options": {"raw_samples": 32, "num_restarts": 2}}],
        "seeds": [1, 2], "evaluations": 7, "init_size": 5, "backend": "serial", "tracking_uri": "none",
        "output_dir": str(tmp_path / "out"),
    }))
    assert main(["run", str(config), "--quiet"]) == 0
    assert "8 finished, 0 failed" in capsys.readouterr().out
    assert main(["summarize", str(config), "--dashboards", str(tmp_path / "dash")]) == 0
    summary = (tmp_path / "dash" / "plugin" / "summary.md").read_text()
    assert "Greedy mean" in summary and "Parabola" in summary  # the declared display names
    assert main(["report", str(config), "--dashboards", str(tmp_path / "dash"), "--no-mlflow"]) == 0
    page = (tmp_path / "dash" / "plugin" / "index.html").read_text()
    assert "Greedy mean" in page and "Parabola" in page


def test_a_problem_without_a_required_constant_is_refused_when_registered() -> None:
    class NoOptimum(Problem):
        name = "no-optimum"
        display_name = "No optimum"
        dim_x = dim_c = 1

        def sample_context(self, n, generator): ...
        def evaluate(self, x, c): ...
        def expected_value(self, x): ...

    with pytest.raises(TypeError, match="NoOptimum does not declare optimal_value, optimal_x, reference_optimal_value"):
        register_problem(NoOptimum)
    assert "no-optimum" not in PROBLEMS


def test_a_new_science_option_is_one_declaration_in_its_algorithms_file(monkeypatch, capsys) -> None:
    """What a new option costs: its entry in the algorithm's OPTIONS and its use in the same class
    (patched in here, as an edit of acquisition/wdrbo.py would add them), and this test. The
    listing, the checks of configs and runs, and the resolved options a run returns (and the
    store and MLflow keep) follow from the declaration: no edit of run.py, config.py, the CLI or
    the GP. Numerical routes are no options (wdrbo_dist/models/settings.py: NumericalSettings)."""
    from wdrbo_dist.acquisition.options import Option
    from wdrbo_dist.acquisition.wdrbo import WDRBO
    from wdrbo_dist.run.spec import RunSpec, validate_spec
    from wdrbo_dist.run.loop import run_one

    declared = Option(1.0, 2.0, "eps_n multiplied by this")
    monkeypatch.setattr(WDRBO, "OPTIONS", {**WDRBO.OPTIONS, "radius_factor": declared})
    radius = WDRBO.radius
    monkeypatch.setattr(WDRBO, "radius", lambda self, n: float(self.options["radius_factor"]) * radius(self, n))
    assert main(["list"]) == 0
    assert "radius_factor (paper: 1.0, reference: 2.0); eps_n multiplied by this" in capsys.readouterr().out
    spec = RunSpec.make(options={"radius_factor": 0.0, "raw_samples": 32, "num_restarts": 2}, algorithm="wdrbo",
                        problem="newsvendor", seed=1, evaluations=7, init_size=5)
    result = run_one(spec, capture_errors=False)
    assert result.options["radius_factor"] == 0.0
    assert (result.records.loc[~result.records["is_initial"], "radius"] == 0.0).all()
    assert WDRBO.resolve_options("reference", {})["radius_factor"] == 2.0
    with pytest.raises(ValueError, match="option 'radius_factor' of algorithm 'wdrbo' must be a finite number"):
        validate_spec(RunSpec.make(options={"radius_factor": "big"}, algorithm="wdrbo", problem="newsvendor", seed=1))


def test_the_listing_shows_science_options_only_and_a_route_is_refused_with_the_allowed_ones(capsys, tmp_path) -> None:
    """At most 25 options over all algorithms, each with both profiles' defaults and a line of
    what it does; a numerical route passed as an option is the usual one-line error (exit 2)."""
    from dataclasses import fields

    from wdrbo_dist.models.settings import NumericalSettings

    names = {name for entry in ALGORITHMS.values() for name in entry.declared_options()}
    assert len(names) <= 25, sorted(names)
    assert not names & {field.name for field in fields(NumericalSettings)}
    assert all(option.note for entry in ALGORITHMS.values() for option in entry.declared_options().values())
    code = main(["run-one", "--algorithm", "erbo", "--problem", "ackley", "--seed", "1", "--evaluations", "6",
                 "--init-size", "5", "--quiet", "--option", "adam_pass=torch", "--out", str(tmp_path / "r.parquet")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "wdrbo-dist run-one: error: unknown option 'adam_pass' for algorithm 'erbo'; "
        "allowed: adam_projected, batch_limit, beta, num_restarts, raw_samples")
