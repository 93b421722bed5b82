"""Variants: one algorithm several times in a study, each under a label of its own, as a list of
option values or as separate entries; the label names the runs, the MLflow children, the
tables and the figures, and never enters the run key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from wdrbo_dist.cli import main
from wdrbo_dist.study.config import ConfigError, load_study_config, parse_study_config
from wdrbo_dist.run.spec import RunSpec

FAST = {"raw_samples": 32, "num_restarts": 2}


def study(tmp_path: Path, algorithms: list) -> dict:
    return {
        "name": "variants", "problems": ["three-hump-camel"], "algorithms": algorithms, "seeds": [1],
        "evaluations": 7, "init_size": 5, "backend": "serial",
        "tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "output_dir": str(tmp_path / "out"),
    }


def test_an_option_given_as_a_list_expands_to_one_labelled_variant_per_value(tmp_path: Path) -> None:
    spec = parse_study_config(study(tmp_path, [
        {"name": "wdrbo", "options": {"radius_constant": [0.1, 0.3, 1.0], **FAST}},
        {"name": "erbo", "options": FAST},
        {"name": "erbo", "label": "erbo-beta3", "options": {"beta": 3.0, **FAST}},
    ]))
    assert spec.algorithms == ["wdrbo[radius_constant=0.1]", "wdrbo[radius_constant=0.3]",
                               "wdrbo[radius_constant=1.0]", "erbo", "erbo-beta3"]
    runs = {run.algorithm_label: run for run in spec.runs}
    assert runs["wdrbo[radius_constant=0.3]"].options_dict == {"radius_constant": 0.3, **FAST}
    assert runs["erbo-beta3"].label == "three-hump-camel|erbo-beta3|s1"
    # The label is a name, not content: the same options give the same run key without it.
    plain = RunSpec.make(options={"radius_constant": 0.3, **FAST}, algorithm="wdrbo", problem="three-hump-camel",
                         seed=1, evaluations=7, init_size=5, fidelity="paper")
    assert runs["wdrbo[radius_constant=0.3]"].run_key == plain.run_key


def test_the_shipped_configs_have_no_variants_and_their_runs_no_variant_label() -> None:
    for config in ("configs/quick.yaml", "configs/paper_data_driven.yaml", "configs/paper_general.yaml"):
        assert all(run.variant == "" for run in load_study_config(config).runs)


@pytest.mark.parametrize("algorithms, message", [
    ([{"name": "erbo"}, {"name": "erbo", "options": {"beta": 3.0}}],
     "algorithms[1]: 'erbo' is listed twice; give each variant of erbo its own label"),
    ([{"name": "erbo", "label": "a"}, {"name": "erbo", "label": "b"}],
     "algorithms[1]: 'b' has the options of 'a' (the same runs)"),
    ([{"name": "wdrbo", "options": {"radius_constant": []}}],
     "algorithms[0].options.radius_constant: an empty list gives no variant; give one value or several"),
    ([{"name": "wdrbo", "options": {"radius_constant": [0.1, "x"]}}],
     "algorithms[0].options.radius_constant: must be a finite number, got str 'x'"),
    ([{"name": "erbo", "label": "has space"}],
     "algorithms[0].label: must be a name of letters, digits and -_.=[], at most 100 characters, got str 'has space'"),
])
def test_bad_variants_are_one_line_naming_the_field(tmp_path: Path, algorithms, message) -> None:
    with pytest.raises(ConfigError) as error:
        parse_study_config(study(tmp_path, algorithms))
    assert str(error.value) == message


def test_variants_name_the_runs_the_mlflow_children_and_the_table_columns(tmp_path: Path, capsys) -> None:
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(study(tmp_path, [
        {"name": "erbo", "options": {"beta": [1.0, 3.0], **FAST}},
        {"name": "gp-ucb", "options": FAST},
    ])))
    assert main(["run", str(config), "--quiet"]) == 0
    assert "3 finished, 0 failed" in capsys.readouterr().out
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("variants")
    names = sorted(r.info.run_name for r in client.search_runs([experiment.experiment_id], "tags.role = 'run'"))
    assert names == ["three-hump-camel|erbo[beta=1.0]|s1", "three-hump-camel|erbo[beta=3.0]|s1",
                     "three-hump-camel|gp-ucb|s1"]
    assert main(["summarize", str(config), "--dashboards", str(tmp_path / "dash")]) == 0
    summary = (tmp_path / "dash" / "variants" / "summary.md").read_text()
    assert "erbo[beta=1.0]" in summary and "erbo[beta=3.0]" in summary and "GP-UCB" in summary
