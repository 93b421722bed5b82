"""Any damage to a shipped config gives either a valid study or exit code 2 with one line on
stderr naming the field: never a traceback, and nothing written (no output folder, no mlflow.db).

The shipped configs/*.yaml are mutated (wrong types, unknown keys, out-of-range values, deleted
keys, broken YAML, cut-short, empty or binary files) and handed to the real command line,
in-process: `status` (validates, reads only) and `run` with the study itself stubbed out, so
that a config that passes every check stops right where the work would begin.
Set WDRBO_FUZZ_EXAMPLES to search longer (the examples are the same on every run).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wdrbo_dist.driver.study
from wdrbo_dist.cli import main
from wdrbo_dist.study.config import TOP_LEVEL_KEYS, load_study_config

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))
EXAMPLES = int(os.environ.get("WDRBO_FUZZ_EXAMPLES", "150"))
# A field whose value is judged against another's: the error may name either.
RELATED = {"evaluations": {"init_size"}, "init_size": {"evaluations"}, "problems": {"algorithms"},
           "fidelity": {"algorithms"}}
ERROR = re.compile(r"^wdrbo-dist (run|status): error: (?P<file>\S+): (?P<field>[^:]+?): \S")

Key = str | int
Path_ = tuple[Key, ...]


class Validated(Exception):
    """`run` reached the study itself: the config passed every check."""


def _no_study(*args: Any, **kwargs: Any) -> None:
    raise Validated


# --- mutations ------------------------------------------------------------------------------------

SPECIAL = st.sampled_from([
    None, True, False, 0, -1, 1, 2, 10**30, -(10**30), 0.5, -0.0, float("nan"), float("inf"), float("-inf"),
    "", " ", "none", "None", "sqlite:///", "sqlite:////", "http://", "http://host:99999999999",
    "~nobody-here/x", "a\x00b", "sqlite:///a\x00b", "paper", "reference", "ray", "wdrbo", "ackley", "[1, 2]", "{a: 1}",
    [], {}, [None], {"name": None}, {"start": 0}, {"start": -1, "count": 2}, {"start": 1, "count": 0},
])
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
SCALARS = SPECIAL | st.none() | st.booleans() | st.integers() | st.floats() | TEXT
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                      max_leaves=6)


def _paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every place in a parsed config: the root, each mapping key, each list index."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, prefix + (index,))
    return found


def _get(node: Any, path: Path_) -> Any:
    for key in path:
        node = node[key]
    return node


def _fields(path: Path_) -> set[str]:
    """The fields an error about a change at `path` may name."""
    if not path:
        return {"config"}
    top = str(path[0])
    return {top, *RELATED.get(top, ())}


@st.composite
def data_mutations(draw: st.DrawFn, data: dict) -> tuple[bytes, set[str] | None]:
    """A mutated parsed config, dumped back to YAML, and the fields its error may name."""
    data = yaml.safe_load(yaml.safe_dump(data))  # a private deep copy
    path = draw(st.sampled_from(_paths(data)))
    kind = draw(st.sampled_from(["replace", "delete", "add key", "append"]))
    target = _get(data, path)
    if kind == "add key" and isinstance(target, dict):
        key = draw(TEXT | st.sampled_from(list(TOP_LEVEL_KEYS) + ["options", "resources", "count", "nme"]))
        target[key] = draw(VALUES)
        fields = {"config", str(key)} if not path else _fields(path)
    elif kind == "append" and isinstance(target, list):
        target.append(draw(VALUES))
        fields = _fields(path)
    elif kind == "delete" and path:
        parent = _get(data, path[:-1])
        del parent[path[-1]]
        fields = _fields(path)
    elif path:
        _get(data, path[:-1])[path[-1]] = draw(VALUES)
        fields = _fields(path)
    else:
        data = draw(VALUES)
        fields = None  # a new whole: any field may be the first at fault
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False).encode(), fields


@st.composite
def text_mutations(draw: st.DrawFn, text: bytes) -> tuple[bytes, None]:
    """Broken files: cut short, bytes inserted or overwritten, emptied, binary."""
    kind = draw(st.sampled_from(["cut", "insert", "overwrite", "empty", "binary"]))
    at = draw(st.integers(0, len(text)))
    if kind == "cut":
        text = text[:at]
    elif kind == "insert":
        text = text[:at] + draw(st.binary(max_size=8) | TEXT.map(str.encode) | st.sampled_from(
            [b":", b"- ", b"\t", b"{", b"[", b"'", b'"', b"&a", b"*a", b"!!python/object:os.system", b"\n  "])) + text[at:]
    elif kind == "overwrite":
        text = text[:at] + draw(st.binary(min_size=1, max_size=8)) + text[at + 8:]
    elif kind == "empty":
        text = draw(st.sampled_from([b"", b"\n", b"   \n", b"# only a comment\n", b"---\n", b"~\n"]))
    else:
        text = draw(st.binary(max_size=64))
    return text, None  # any field may be at fault


def mutations() -> st.SearchStrategy[tuple[str, bytes, set[str] | None]]:
    per_config = []
    for config in CONFIGS:
        raw = config.read_bytes()
        per_config.append(st.tuples(st.just(config.name), data_mutations(yaml.safe_load(raw)) | text_mutations(raw))
                          .map(lambda t: (t[0], *t[1])))
    return st.one_of(per_config)


# --- the property ---------------------------------------------------------------------------------


def _command(argv: list[str]) -> tuple[int | str, list[str]]:
    """Run the CLI in-process: (exit code, or "validated" where `run` reached the study; stderr lines)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code: int | str = main(argv)
        except Validated:
            code = "validated"
        except SystemExit as exc:  # argparse: would mean the command line itself is wrong
            pytest.fail(f"{argv}: SystemExit({exc.code}): {err.getvalue()}")
    return code, err.getvalue().splitlines()


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _check(text: bytes, fields: set[str] | None) -> None:
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        config = Path(tmp) / "study.yaml"
        config.write_bytes(text)
        for command in ("status", "run"):
            code, lines = _command([command, str(config)])
            if code == 2:
                assert len(lines) == 1, lines
                match = ERROR.match(lines[0])
                assert match and match["file"] == str(config), lines[0]
                top = re.match(r"[^\[. ]+", match["field"]).group()
                allowed = fields if fields is not None else {"config", *TOP_LEVEL_KEYS}
                assert top in allowed, (lines[0], allowed)
            else:
                # valid: `status` reads an empty store, `run` stops where the work would start
                assert code == (0 if command == "status" else "validated") and lines == [], (command, code, lines)
                load_study_config(config)  # and the validation path agrees
            assert _tree(Path(tmp)) == ["study.yaml"], _tree(Path(tmp))  # nothing written
        if code == 2:
            with pytest.raises(ValueError):
                load_study_config(config)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutation=mutations())
def test_a_mutated_config_is_a_valid_study_or_one_line_naming_the_field(mutation, monkeypatch_module) -> None:
    _, text, fields = mutation
    _check(text, fields)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wdrbo_dist.driver.study, "run_study", _no_study)
        yield patch


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_the_shipped_configs_themselves_are_valid(config: Path, monkeypatch_module) -> None:
    _check(config.read_bytes(), set())
