"""Study files built to hurt: an alias bomb, huge values, credentials in a URI, names that would
become paths outside their folder. Each is refused with one short line, before any work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.study.test_config import GOOD, with_
from wdrbo_dist.study.config import ConfigError, load_study_config, parse_study_config
from wdrbo_dist.study.spec import NAME_MAX_CHARS

# Nine levels of nine: 9**9 (387 million) strings once expanded, in about 500 bytes.
BOMB = "\n".join([
    "name: bomb", "problems: [ackley]", "algorithms: [erbo]", "seeds: [1]",
    "fidelity: [" + ", ".join(
        [f"&l0 [{', '.join(['lol'] * 9)}]"]
        + [f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    ) + "]",
]) + "\n"

# A child that reads the bomb under a memory ceiling 500 MB above what it holds once imported:
# before the fix it dies for memory (or for time) instead of taking the machine with it.
CHILD = """
import json, resource, sys, time
from wdrbo_dist.study.config import ConfigError, load_study_config
with open('/proc/self/statm') as f:
    vm = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (vm + 500 * 2**20, resource.RLIM_INFINITY))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.monotonic()
try:
    load_study_config(sys.argv[1])
    message = None
except ConfigError as exc:
    message = str(exc)
took = time.monotonic() - started
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"message": message, "took": took, "grown_kb": grown}))
"""


def test_a_yaml_alias_bomb_is_refused_in_one_line_without_expanding(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB) < 600
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["message"] == ("config: YAML aliases (*l0, line 5) expand this file to over 100000 values; "
                                 "write the study out without them")
    assert result["took"] < 2 and result["grown_kb"] < 50_000


def test_an_anchor_without_an_alias_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "anchor.yaml"
    path.write_text("name: anchored\nproblems: &p [ackley]\nalgorithms: [erbo]\nseeds: [1]\n")
    assert load_study_config(path, validate_runs=False).problems == ["ackley"]


def test_the_aliases_pyyaml_writes_for_shared_options_load(tmp_path: Path) -> None:
    """`yaml.safe_dump` writes one dict given to two algorithms as an anchor and an alias."""
    import yaml

    fast = {"raw_samples": 16}
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump({"name": "shared", "problems": ["ackley"], "seeds": [1],
                                    "algorithms": [{"name": "erbo", "options": fast}, {"name": "wdrbo", "options": fast}]}))
    assert "*id001" in path.read_text()
    study = load_study_config(path, validate_runs=False)
    assert [a.options for a in study.algorithm_settings] == [fast, fast]


@pytest.mark.parametrize("changes", [
    {"fidelity": "x" * 100_000},
    {"fidelity": ["y" * 1000] * 1000},
    {"backend": "z" * 100_000},
    {"name": "n" * 100_000},
    {"tracking_uri": "ftp://" + "h" * 100_000},
    {"problems": ["p" * 100_000]},
    {"algorithms": ["a" * 100_000]},
    {"algorithms": [{"name": "erbo", "label": "l" * 100_000}]},
    {"algorithms": [{"name": "erbo", "options": {"beta": "b" * 100_000}}]},
    {"algorithms": [{"name": "gp-ucb", "options": {"beta": 1.0, "k" * 100_000: 1}}]},
    {"w" * 100_000: 1},
    {"run_timeout_s": "t" * 100_000},
    {"output_dir": "o" * 100_000},
])
def test_a_long_value_is_cut_in_the_message(changes: dict) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_study_config(with_(**changes))
    text = str(caught.value)
    assert len(text) < 300 and "\n" not in text, text[:400]


@pytest.mark.parametrize("uri", [
    "http://admin:s3cret@mlflow.example:5000",
    "https://admin:s3cret@mlflow.example",
    "http://s3cret@mlflow.example:5000",
    "ftp://admin:s3cret@mlflow.example",
    " http://admin:s3cret@mlflow.example:5000/ ",
    "postgresql://lab:s3cret@db.lab:5432/mlflow",
])
def test_credentials_in_the_tracking_uri_are_refused_and_never_echoed(uri: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_study_config(with_(tracking_uri=uri))
    text = str(caught.value)
    assert "s3cret" not in text and "\n" not in text, text
    assert text.startswith("tracking_uri: ")
    if uri.strip().startswith("http"):
        assert "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD" in text, text
    if uri.startswith("postgresql"):
        assert "PGUSER / PGPASSWORD (or ~/.pgpass)" in text, text


def test_the_cli_never_writes_the_password_of_a_refused_uri(tmp_path: Path) -> None:
    from wdrbo_dist.cli import main

    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(with_(tracking_uri="http://admin:s3cret@127.0.0.1:1",
                                     output_dir=str(tmp_path / "out"))))
    completed = subprocess.run([sys.executable, "-m", "wdrbo_dist", "status", str(path)], capture_output=True,
                               text=True, timeout=120)
    assert completed.returncode == 2 and "s3cret" not in completed.stdout + completed.stderr
    assert main(["status", str(path)]) == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, message", [
    ("..", "name: must match [A-Za-z0-9_.-]+ (1 to 100 characters, not . or ..), got '..'"),
    (".", "name: must match [A-Za-z0-9_.-]+ (1 to 100 characters, not . or ..), got '.'"),
    ("a/b", "name: must match [A-Za-z0-9_.-]+ (1 to 100 characters, not . or ..), got 'a/b'"),
    ("a\0b", "name: must match [A-Za-z0-9_.-]+ (1 to 100 characters, not . or ..), got 'a\\x00b'"),
    ("n" * 300, "name: must match [A-Za-z0-9_.-]+ (1 to 100 characters, not . or ..), got 'nnnn"),
])
def test_a_name_that_would_leave_its_folder_is_refused(name: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_study_config(with_(name=name))
    text = str(caught.value)
    assert text.startswith(message) and len(text) < 300, text


def test_a_name_of_the_longest_length_is_taken() -> None:
    assert parse_study_config(with_(name="n" * NAME_MAX_CHARS, output_dir=...)).name == "n" * NAME_MAX_CHARS


@pytest.mark.parametrize("algorithms, message", [
    ([{"name": "erbo", "label": "l" * 101}], "algorithms[0].label: must be a name of letters, digits and -_.=[]"),
    ([{"name": "gp-ucb", "label": "l" * 95, "options": {"beta": [1.0, 2.0]}}],
     "algorithms[0].options: the variant label 'lll"),
])
def test_a_variant_label_too_long_for_a_file_name_is_refused(algorithms: list, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_study_config(with_(algorithms=algorithms))
    text = str(caught.value)
    assert text.startswith(message) and len(text) < 300 and "at most 100 characters" in text, text


@pytest.mark.parametrize("field, value", [
    ("output_dir", "/tmp/" + "d" * 256 + "/out"),
    ("tracking_uri", "sqlite:////tmp/" + "d" * 300 + ".db"),
])
def test_a_path_component_longer_than_the_filesystem_allows_is_refused(field: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_study_config(with_(**{field: value}))
    text = str(caught.value)
    assert text.startswith(f"{field}: a path component is longer than 255 bytes") and len(text) < 300, text


def test_the_cli_refuses_a_long_name_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(json.dumps(with_(name="n" * 300, output_dir=...)))
    completed = subprocess.run([sys.executable, "-m", "wdrbo_dist", "status", str(path)], capture_output=True,
                               text=True, timeout=120, cwd=tmp_path)
    assert completed.returncode == 2, completed.stderr[-2000:]
    [line] = completed.stderr.strip().splitlines()
    assert "Traceback" not in line and len(line) < 400 and "name: must match" in line
    assert not (tmp_path / "results").exists()


def test_good_stays_good() -> None:
    assert parse_study_config(GOOD).name == "unit"


@pytest.mark.parametrize("text, message", [
    ("name: x\nseeds: [" + "1" * 5000 + "]\n", "config: a value YAML cannot convert at line 2: Exceeds the limit"),
    ("name: x\nseeds: [1]\ndescription: 2001-13-45\n", "config: a value YAML cannot convert at line 3: month must be"),
    ("name: x\nseeds: " + "[" * 100_000 + "]" * 100_000 + "\n",
     "config: YAML nested deeper than 50 levels at line 2"),
    ("name: x\nseeds: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
     "config: YAML nested deeper than 50 levels at line 2"),
])
def test_yaml_that_breaks_the_parser_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_study_config(path)
    assert str(caught.value).startswith(message) and len(str(caught.value)) < 300, str(caught.value)[:300]
