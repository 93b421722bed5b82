"""Study files: a good one becomes the expected runs; each bad one stops with one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wdrbo_dist.study.config import ConfigError, load_study_config, parse_study_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CLI = [str(Path(sys.executable).with_name("wdrbo-dist"))]

GOOD = {
    "name": "unit",
    "fidelity": "paper",
    "problems": ["three-hump-camel", "newsvendor"],
    "algorithms": ["erbo", {"name": "gp-ucb", "options": {"beta": 2, "raw_samples": 32},
                            "resources": {"num_cpus": 1, "num_gpus": 0}}],
    "seeds": {"start": 100, "count": 3},
    "evaluations": 7,
    "init_size": 5,
    "backend": "serial",
    "workers": 1,
    "tracking_uri": "none",
    "output_dir": "results/unit",
}


def with_(**changes) -> dict:
    data = {k: v for k, v in GOOD.items()}
    for key, value in changes.items():
        if value is ...:
            data.pop(key)
        else:
            data[key] = value
    return data


def test_a_good_config_gives_every_run_with_its_options(tmp_path: Path) -> None:
    study = parse_study_config(GOOD)
    assert study.name == "unit" and study.fidelity == "paper"
    assert study.problems == ["three-hump-camel", "newsvendor"]
    assert study.algorithms == ["erbo", "gp-ucb"]
    assert study.seeds == [100, 101, 102]
    assert study.output_dir == Path("results/unit").resolve()
    runs = study.runs
    assert len(runs) == 2 * 2 * 3
    assert len({r.run_key for r in runs}) == len(runs)
    gp = [r for r in runs if r.algorithm == "gp-ucb"][0]
    assert gp.options_dict == {"beta": 2.0, "raw_samples": 32} and gp.study == "unit"
    assert (gp.evaluations, gp.init_size, gp.fidelity, gp.device) == (7, 5, "paper", "cpu")
    assert study.resources("gp-ucb").threads == 1


def test_defaults_and_a_relative_sqlite_uri_resolve_against_the_working_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = {k: GOOD[k] for k in ("name", "problems", "algorithms")} | {"seeds": [3, 1]}
    study = parse_study_config(data)
    assert (study.fidelity, study.evaluations, study.init_size, study.backend, study.workers) == ("paper", 100, 5, "local", 2)
    assert study.tracking_uri == f"sqlite:///{tmp_path}/mlflow.db"
    assert study.output_dir == tmp_path / "results" / "unit"
    assert study.seeds == [3, 1]


@pytest.mark.parametrize(("given", "kept"), [
    ("postgresql://db.lab:5432/mlflow", "postgresql+psycopg://db.lab:5432/mlflow"),
    ("postgresql+psycopg://127.0.0.1/mlflow?sslmode=require", "postgresql+psycopg://127.0.0.1/mlflow?sslmode=require"),
])
def test_a_postgresql_uri_is_kept_with_the_driver_the_package_installs(given: str, kept: str) -> None:
    assert parse_study_config(GOOD | {"tracking_uri": given}).tracking_uri == kept


def test_the_run_key_is_stable_and_depends_on_every_identity_field() -> None:
    a = parse_study_config(GOOD).runs[0]
    assert a.run_key == parse_study_config(GOOD).runs[0].run_key
    for change in ({"evaluations": 8}, {"init_size": 4}, {"fidelity": "reference"}, {"seeds": [7]}):
        assert parse_study_config(with_(**change)).runs[0].run_key != a.run_key
    options = with_(algorithms=[{"name": "erbo", "options": {"beta": 2.0}}])
    assert parse_study_config(options).runs[0].run_key != a.run_key
    # Where and in which study a run executes does not change its records, so not its key.
    assert parse_study_config(with_(name="other", output_dir="elsewhere")).runs[0].run_key == a.run_key


BAD = [
    # (changes to GOOD, the message's expected start)
    ({"colour": "blue"}, "config: unknown key 'colour'; allowed keys: name, description, fidelity,"),
    ({"name": ...}, "name: required field missing"),
    ({"name": "my study"}, "name: must match [A-Za-z0-9_.-]+ (1 to 100 characters, not . or ..), got 'my study'"),
    ({"fidelity": "exact"}, "fidelity: must be one of paper, reference; got 'exact'"),
    ({"problems": []}, "problems: must be a non-empty list of ackley, hartmann,"),
    ({"problems": ["ackley", "rosenbrock"]}, "problems[1]: unknown 'rosenbrock'; allowed: ackley, hartmann,"),
    ({"problems": ["ackley", "ackley"]}, "problems[1]: 'ackley' is listed twice"),
    ({"algorithms": ["erbo", "bogo"]}, "algorithms[1].name: unknown algorithm 'bogo'; allowed: wdrbo, erbo, gp-ucb"),
    ({"algorithms": [{"options": {}}]}, "algorithms[0].name: required field missing; allowed: wdrbo, erbo, gp-ucb"),
    ({"algorithms": [{"name": "erbo", "option": {}}]}, "algorithms[0]: unknown key 'option'; allowed keys: name, label, options, resources"),
    ({"algorithms": [{"name": "erbo", "options": {"radius": 1}}]}, "algorithms[0].options: unknown option 'radius'; allowed: beta,"),
    ({"algorithms": [{"name": "erbo", "options": {"beta": "high"}}]}, "algorithms[0].options.beta: must be a finite number, got str 'high'"),
    ({"algorithms": [{"name": "erbo", "options": {"num_restarts": 2.5}}]}, "algorithms[0].options.num_restarts: must be an integer, got float 2.5"),
    ({"algorithms": [{"name": "erbo", "options": {"beta": -1.0}}]}, "algorithms[0].options.beta: must be >= 0, got -1.0"),
    ({"algorithms": [{"name": "erbo", "resources": {"num_cpus": -1}}]}, "algorithms[0].resources.num_cpus: must be a number >= 0, got -1"),
    ({"algorithms": [{"name": "erbo", "resources": {"gpus": 1}}]}, "algorithms[0].resources: unknown key 'gpus'; allowed keys: num_cpus, num_gpus"),
    ({"algorithms": ["erbo", "erbo"]}, "algorithms[1]: 'erbo' is listed twice; give each variant of erbo its own label"),
    ({"seeds": []}, "seeds: must be a list of 1 to 100000 integers in [0, 2**63 - 1] or {start: S, count: N}"),
    ({"seeds": [1, -2]}, "seeds[1]: must be an integer in [0, 9223372036854775807], got int -2"),
    ({"seeds": [2**63]}, "seeds[0]: must be an integer in [0, 9223372036854775807], got int 9223372036854775808"),
    ({"seeds": [1, 1]}, "seeds[1]: seed 1 is listed twice"),
    ({"seeds": {"start": 100}}, "seeds: a mapping needs both start and count"),
    ({"seeds": {"start": 100, "count": 0}}, "seeds.count: must be an integer in [1, 100000], got int 0"),
    ({"seeds": {"start": 0, "count": 10**12}}, "seeds.count: must be an integer in [1, 100000], got int 1000000000000"),
    ({"output_dir": "out\0put"}, "output_dir: not a usable path 'out\\x00put' (embedded null byte)"),
    ({"tracking_uri": "sqlite:///~nobody-at-all/m.db"}, "tracking_uri: not a usable path '~nobody-at-all/m.db'"),
    ({"algorithms": [{"name": ["wdrbo"]}]}, "algorithms[0].name: unknown algorithm ['wdrbo']; allowed: wdrbo, erbo"),
    ({"evaluations": "many"}, "evaluations: must be an integer >= 2, got str 'many'"),
    ({"evaluations": 5}, "init_size: must be smaller than evaluations (5), got 5"),
    ({"init_size": 0}, "init_size: must be an integer >= 1, got int 0"),
    ({"backend": "slurm"}, "backend: must be one of serial, local, ray; got 'slurm'"),
    ({"workers": 0}, "workers: must be an integer >= 1, got int 0"),
    ({"workers": True}, "workers: must be an integer >= 1, got bool True"),
    ({"tracking_uri": "ftp://host/db"}, "tracking_uri: must be one of sqlite:///PATH, postgresql://HOST:PORT/DB, http://HOST:PORT, https://HOST:PORT or none; got 'ftp://host/db'"),
    ({"tracking_uri": "sqlite:///"}, "tracking_uri: a sqlite URI must name a file"),
    ({"tracking_uri": "postgresql://db.lab:5432"}, "tracking_uri: must be one of sqlite:///PATH, postgresql://HOST:PORT/DB"),
    ({"tracking_uri": "postgresql://db.lab/mlflow?password=x"}, "tracking_uri: no password in the URI: set PGPASSWORD"),
    ({"output_dir": ""}, "output_dir: must be a folder path (a non-empty string), got str ''"),
    ({"run_timeout_s": 0}, "run_timeout_s: must be a number of seconds > 0 (or left out: no limit), got int 0"),
    ({"run_timeout_s": "1h"}, "run_timeout_s: must be a number of seconds > 0 (or left out: no limit), got str '1h'"),
    ({"run_timeout_s": True}, "run_timeout_s: must be a number of seconds > 0"),
]


def test_run_timeout_s_reaches_every_task() -> None:
    from wdrbo_dist.driver.plan import make_tasks

    assert parse_study_config(with_()).run_timeout_s is None
    study = parse_study_config(with_(run_timeout_s=90))
    assert study.run_timeout_s == 90.0 and {t.timeout_s for t in make_tasks(study, study.runs)} == {90.0}


@pytest.mark.parametrize("changes, message", BAD, ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(BAD)])
def test_a_bad_config_names_the_field_and_the_allowed_values(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_study_config(with_(**changes))
    text = str(caught.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_files_that_are_not_study_mappings(tmp_path: Path) -> None:
    cases = {"list.yaml": b"- a\n- b\n", "broken.yaml": b"name: [unclosed\n", "empty.yaml": b"",
             "latin1.yaml": b"name: quick\ndescription: caf\xe9\n", "control.yaml": b"name: quick\nseeds: [1\x07]\n"}
    expected = {
        "list.yaml": "config: must be a mapping with keys name,",
        "broken.yaml": "config: not valid YAML at line 2",
        "empty.yaml": "config: must be a mapping with keys name,",
        "latin1.yaml": "config: not UTF-8 text: byte 0xe9 at line 2",
        "control.yaml": "config: not valid YAML at line 2: special characters are not allowed",
    }
    for name, text in cases.items():
        (tmp_path / name).write_bytes(text)
        with pytest.raises(ConfigError, match="^" + expected[name].replace("[", r"\[")):
            load_study_config(tmp_path / name)
    with pytest.raises(ConfigError, match="^config: cannot read"):
        load_study_config(tmp_path / "missing.yaml")


def test_the_cli_stops_on_a_bad_config_with_one_line_and_exit_code_2(tmp_path: Path, capsys) -> None:
    from wdrbo_dist.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(with_(backend="slurm", output_dir=str(tmp_path / "out"))))
    expected = "error: {}: backend: must be one of serial, local, ray; got 'slurm'".format(path)
    for command in (["status", str(path)], ["submit", str(path), "--address", "http://127.0.0.1:1"]):
        assert main(command) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"wdrbo-dist {command[0]}: {expected}"]
    # Once as a user runs it: the console script, its exit code and its stderr.
    out = subprocess.run(CLI + ["run", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out
    assert out.stderr.strip().splitlines() == [f"wdrbo-dist run: {expected}"]
    assert not (tmp_path / "out").exists()  # stopped before any work


def test_bad_command_line_values_are_usage_errors(tmp_path: Path, capsys) -> None:
    from wdrbo_dist.cli import main

    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(with_(output_dir=str(tmp_path / "out"))))
    cases = [
        (["run", str(path), "--workers", "0"], "--workers must be an integer >= 1, got 0"),
        (["run", str(path), "--backend", "mpi"], "--backend must be one of serial, local, ray, got 'mpi'"),
        (["run", str(path), "--address", "auto"], "--address applies to the ray backend only (backend is serial)"),
        (["submit", str(path), "--address", "127.0.0.1:6379"], "--address must be the Jobs API URL http(s)://HEAD:8265"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def _without_unregistered(data: dict) -> tuple[dict, list[str]]:
    """Algorithms registered later by other modules are checked by name only, until they land."""
    from wdrbo_dist.acquisition.registry import ALGORITHMS

    names = [a if isinstance(a, str) else a["name"] for a in data["algorithms"]]
    kept = [a for a, n in zip(data["algorithms"], names) if n in ALGORITHMS]
    return {**data, "algorithms": kept}, [n for n in names if n not in ALGORITHMS]


ALL_ALGORITHMS = {"wdrbo", "erbo", "gp-ucb", "sbo-kde", "drbo-kde", "drbo-mmd", "drbo-mmd-minimax", "stableopt"}
DATA_DRIVEN = {"ackley", "hartmann", "modified-branin", "newsvendor", "portfolio-uniform", "portfolio-normal",
               "three-hump-camel", "six-hump-camel"}


@pytest.mark.parametrize("name", ["quick", "paper_data_driven", "paper_general", "paper_reference"])
def test_the_shipped_configs_are_valid(name: str) -> None:
    data = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    kept, pending = _without_unregistered(data)
    assert set(pending) <= ALL_ALGORITHMS | {"random"}
    study = parse_study_config(kept, source=CONFIGS / f"{name}.yaml")
    assert study.name == name
    names = {a if isinstance(a, str) else a["name"] for a in data["algorithms"]}
    if name in ("paper_data_driven", "paper_reference"):
        assert names == ALL_ALGORITHMS | {"random"} and set(study.problems) == DATA_DRIVEN
        assert study.seeds == list(range(100, 115)) and study.evaluations == 100 and study.init_size == 5
        assert study.fidelity == ("paper" if name == "paper_data_driven" else "reference")
    if name == "paper_general":
        assert names == {"wdrbo", "erbo"} and study.problems == ["toy-general"] and len(study.seeds) == 15
    if name == "quick":
        assert len(study.seeds) == 3 and len(study.problems) >= 3 and len(names) >= 3


def test_the_annotated_example_shows_every_key_and_loads() -> None:
    """README sends a newcomer to configs/example.yaml: it must name every key and be a valid study."""
    from wdrbo_dist.study.config import ALGORITHM_KEYS, RESOURCE_KEYS, SEED_KEYS, TOP_LEVEL_KEYS

    text = (CONFIGS / "example.yaml").read_text()
    for key in (*TOP_LEVEL_KEYS, *ALGORITHM_KEYS, *RESOURCE_KEYS, *SEED_KEYS):
        assert f"{key}:" in text, key
    study = load_study_config(CONFIGS / "example.yaml")
    assert len(study.runs) == 36
