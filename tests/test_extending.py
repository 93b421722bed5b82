"""Adding a problem and an algorithm takes what the README's "Adding a problem" and "Adding an
algorithm" say, and nothing else: a class each, registered; a study, `summarize` and `report`
then work with them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import yaml

from wdrbo_dist.algorithms import ALGORITHMS
from wdrbo_dist.cli import main
from wdrbo_dist.problems import PROBLEMS, Problem, register_problem

PLUGIN = '''
import torch

from wdrbo_dist.acquisition.base import Acquisition, Algorithm
from wdrbo_dist.algorithms import register_algorithm
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
