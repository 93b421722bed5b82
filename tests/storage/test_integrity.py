"""The store does not lie: a run counts as finished only when its files read back whole and
agree; a damaged run is named, set aside (never deleted) and run again by the same command."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from wdrbo_dist.cli import main
from wdrbo_dist.study.config import load_study_config
from wdrbo_dist.run.records import CORE_COLUMNS
from wdrbo_dist.run.spec import RunResult, RunSpec
from wdrbo_dist.storage.atomic import write_json_atomic, write_parquet_atomic
from wdrbo_dist.storage.store import ResultStore

FAST = {"raw_samples": 16, "num_restarts": 2}


def records(n: int = 7, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({c: rng.random(n) for c in CORE_COLUMNS})
    frame["step"] = np.arange(1, n + 1)
    frame["x_0"] = rng.random(n)
    frame["c_0"] = rng.random(n)
    return frame


def spec(seed: int = 1) -> RunSpec:
    return RunSpec.make(options={"beta": 2.0}, algorithm="erbo", problem="newsvendor", seed=seed,
                        evaluations=7, init_size=5, study="unit")


def saved(tmp_path: Path, seed: int = 1) -> tuple[ResultStore, str]:
    store = ResultStore(tmp_path)
    s = spec(seed)
    store.save(RunResult(spec=s, status="FINISHED", records=records(seed=seed), wall_time_s=1.0))
    assert store.finished_keys() == {s.run_key}
    return store, s.run_key


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def edit_meta(**changes) -> Callable[[ResultStore, str], None]:
    def edit(store: ResultStore, key: str) -> None:
        meta = json.loads(store.meta_path(key).read_text())
        meta.update(changes)
        store.meta_path(key).write_text(json.dumps(meta))
    return edit


def other_spec(store: ResultStore, key: str) -> None:
    meta = json.loads(store.meta_path(key).read_text())
    meta["spec"]["seed"] = 99  # the spec of another run under this run's name
    store.meta_path(key).write_text(json.dumps(meta))


# (what happened to the run, which file is at fault, what the report says)
DAMAGES = {
    "json cut short": (lambda s, k: cut_in_half(s.meta_path(k)), "json", "not readable JSON"),
    "json emptied": (lambda s, k: s.meta_path(k).write_text(""), "json", "not readable JSON"),
    "json not an object": (lambda s, k: s.meta_path(k).write_text("[1, 2]"), "json", "not a JSON object"),
    "json of a failed run": (edit_meta(status="FAILED"), "json", "status is 'FAILED', expected 'FINISHED'"),
    "json of another run": (edit_meta(run_key="0123456789abcdef"), "json", "run_key is '0123456789abcdef'"),
    "json with another spec": (other_spec, "json", "its spec hashes to"),
    "json without a spec": (edit_meta(spec=None), "json", "its spec cannot be read"),
    "parquet missing": (lambda s, k: s.records_path(k).unlink(), "json", "its parquet is missing"),
    "parquet cut short": (lambda s, k: cut_in_half(s.records_path(k)), "parquet", "not a readable parquet file"),
    "parquet not parquet": (lambda s, k: s.records_path(k).write_bytes(b"PAR1" + b"\0" * 100),
                            "parquet", "not a readable parquet file"),
    "parquet of a shorter run": (lambda s, k: write_parquet_atomic(records(n=3), s.records_path(k)),
                                 "parquet", "has 3 rows, its json says 7"),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_a_damaged_run_is_not_finished_and_is_named_with_its_file(damage: str, tmp_path: Path) -> None:
    store, key = saved(tmp_path)
    harm, suffix, problem = DAMAGES[damage]
    harm(store, key)  # on the same store: what it found whole before is judged again
    assert store.finished_keys() == set() and not store.is_finished(key) and store.failed_keys() == set()
    [found] = store.damaged()
    assert found.run_key == key and found.path == store.runs_dir / f"{key}.{suffix}"
    assert problem in found.problem
    assert found.line(store.root, "newsvendor|erbo|s1").startswith(
        f"damaged run newsvendor|erbo|s1 [{key}]: runs/{key}.{suffix}: ")
    assert "\n" not in found.line(store.root)


def test_a_whole_store_has_no_damage_and_a_crash_leftover_is_not_damage(tmp_path: Path) -> None:
    store, key = saved(tmp_path)
    leftover = spec(seed=2).run_key  # parquet renamed, then the driver died before the json
    write_parquet_atomic(records(), store.records_path(leftover))
    assert store.damaged() == [] and store.finished_keys() == {key}


def test_a_run_written_by_another_version_is_not_judged_by_its_hash(tmp_path: Path) -> None:
    """The version is part of the key: an older version's run is whole if it agrees with itself."""
    store, key = saved(tmp_path)
    meta = json.loads(store.meta_path(key).read_text())
    old_key = "00000000000000aa"
    write_parquet_atomic(records(), store.records_path(old_key))
    older = {k: v for k, v in meta.items() if k not in ("checksum", "records_sha256")}  # an older layout
    write_json_atomic({**older, "run_key": old_key, "version": "0.0.1"}, store.meta_path(old_key))
    assert store.finished_keys() == {key, old_key} and store.damaged() == []


@pytest.mark.parametrize("harm", [lambda p: cut_in_half(p), lambda p: p.write_text('{"status": "FAILED"}')],
                         ids=["cut short", "of another run"])
def test_a_damaged_failure_marker_is_not_a_failure(harm, tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    s = spec(seed=5)
    store.save(RunResult(spec=s, status="FAILED", error="Traceback ...\nValueError: boom"))
    assert store.failed_keys() == {s.run_key}
    harm(store.failed_path(s.run_key))
    assert store.failed_keys() == set()
    [found] = store.damaged()
    assert found.path == store.failed_path(s.run_key)


def test_set_aside_moves_the_run_s_files_and_deletes_nothing(tmp_path: Path) -> None:
    store, key = saved(tmp_path)
    cut_in_half(store.records_path(key))
    failed = spec(seed=6)
    store.save(RunResult(spec=failed, status="FAILED", error="x"))
    store.failed_path(failed.run_key).write_text("{")
    before = {p.name: p.read_bytes() for p in (store.meta_path(key), store.records_path(key),
                                               store.failed_path(failed.run_key))}
    folder = store.set_aside(store.damaged())
    assert folder is not None and folder.parent == tmp_path / "damaged"
    moved = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert moved == before  # byte for byte
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == sorted(
        [f"runs/{key}.json", f"runs/{key}.parquet", f"failed/{failed.run_key}.json"])
    assert store.damaged() == [] and not store.meta_path(key).exists()
    # A second setting-aside within the same second gets a folder of its own.
    _, key2 = saved(tmp_path, seed=2)
    store.meta_path(key2).write_text("")
    second = store.set_aside(store.damaged())
    assert second is not None and second != folder and (folder / "runs" / f"{key}.json").exists()
    assert store.set_aside([]) is None


def _fill(study, skip: int = 0) -> ResultStore:
    """Whole results for the study's runs (fake records of the right length), all but `skip` last."""
    store = ResultStore(study.output_dir)
    for s in study.runs[: len(study.runs) - skip]:
        store.save(RunResult(spec=s, status="FINISHED", records=records(n=s.evaluations, seed=s.seed), wall_time_s=1.0))
    return store


def test_run_names_damaged_runs_sets_them_aside_and_runs_them_again(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": "damage", "problems": ["newsvendor"], "algorithms": [{"name": "gp-ucb", "options": FAST}],
        "seeds": [1, 2, 3, 4], "evaluations": 6, "init_size": 5, "backend": "serial",
        "tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "output_dir": str(tmp_path / "out"),
    }))
    study = load_study_config(config)
    store = _fill(study)
    first, second, third, fourth = study.runs
    cut_in_half(store.meta_path(first.run_key))  # was: JSONDecodeError at start-up
    cut_in_half(store.records_path(second.run_key))
    store.records_path(third.run_key).unlink()
    store.meta_path(fourth.run_key).unlink()  # and a failure marker, damaged, for the same run
    store.save(RunResult(spec=fourth, status="FAILED", error="x"))
    store.failed_path(fourth.run_key).write_text('{"status": "FAI')

    assert main(["run", str(config), "--quiet"]) == 0
    out, err = capsys.readouterr()
    damaged = [line for line in err.splitlines() if line.startswith("damaged run ")]
    [folder] = (tmp_path / "out" / "damaged").iterdir()
    expected = {
        first: f"runs/{first.run_key}.json: not readable JSON (JSONDecodeError: ",
        second: f"runs/{second.run_key}.parquet: not a readable parquet file (ArrowInvalid: ",
        third: f"runs/{third.run_key}.json: its parquet is missing",
        fourth: f"failed/{fourth.run_key}.json: not readable JSON (JSONDecodeError: ",
    }
    assert len(damaged) == len(expected)  # one line per damaged run
    for run, what in expected.items():
        [line] = [line for line in damaged if f"[{run.run_key}]" in line]
        assert line.startswith(f"damaged run {run.label} [{run.run_key}]: {what}")
        assert line.endswith(f"; moved to {folder}, it runs again")
    assert "4 finished, 0 failed, 0 skipped (already finished)" in out
    assert store.finished_keys() == {r.run_key for r in study.runs} and store.damaged() == []
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == sorted([
        f"{first.run_key}.json", f"{first.run_key}.parquet", f"{second.run_key}.json", f"{second.run_key}.parquet",
        f"{third.run_key}.json", f"{fourth.run_key}.json"])
    client = MlflowClient(study.tracking_uri)
    experiment = client.get_experiment_by_name("damage")
    children = client.search_runs([experiment.experiment_id], "tags.role = 'run'")
    assert sorted(r.data.tags["run_key"] for r in children) == sorted(r.run_key for r in study.runs)
    assert {r.info.status for r in children} == {"FINISHED"}


def test_status_counts_a_damaged_run_missing_and_moves_nothing(tmp_path: Path, capsys) -> None:
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": "damage", "problems": ["newsvendor"], "algorithms": ["erbo"], "seeds": [1, 2],
        "evaluations": 6, "init_size": 5, "tracking_uri": "none", "output_dir": str(tmp_path / "out"),
    }))
    study = load_study_config(config)
    store = _fill(study)
    run = study.runs[1]
    store.meta_path(run.run_key).write_text("{")
    assert main(["status", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "total: 1 done, 0 failed, 1 missing of 2" in out
    assert out[-1] == (f"damaged run {run.label} [{run.run_key}]: runs/{run.run_key}.json: not readable JSON "
                       f"(JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)) "
                       "(counted missing; `run` sets it aside and runs it again)")
    assert store.meta_path(run.run_key).read_text() == "{" and not (tmp_path / "out" / "damaged").exists()


def test_a_damaged_run_run_again_has_one_finished_mlflow_child(tmp_path: Path, capsys) -> None:
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": "rerun", "problems": ["newsvendor"], "algorithms": [{"name": "gp-ucb", "options": FAST}],
        "seeds": [1, 2], "evaluations": 6, "init_size": 5, "backend": "serial",
        "tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "output_dir": str(tmp_path / "out"),
    }))
    assert main(["run", str(config), "--quiet"]) == 0
    study = load_study_config(config)
    damaged, whole = study.runs
    cut_in_half(ResultStore(study.output_dir).records_path(damaged.run_key))
    assert main(["run", str(config), "--quiet"]) == 0
    assert "marked 1 orphan or superseded runs KILLED" in capsys.readouterr().err
    client = MlflowClient(study.tracking_uri)
    experiment = client.get_experiment_by_name("rerun")
    statuses: dict[str, list[str]] = {}
    for run in client.search_runs([experiment.experiment_id], "tags.role = 'run'"):
        statuses.setdefault(run.data.tags["run_key"], []).append(run.info.status)
    assert sorted(statuses[damaged.run_key]) == ["FINISHED", "KILLED"]  # the set-aside result's child
    assert statuses[whole.run_key] == ["FINISHED"]


@pytest.mark.parametrize("kind", ["records", "meta", "failure marker"])
def test_a_byte_changed_anywhere_in_a_runs_files_is_caught(tmp_path: Path, kind: str) -> None:
    """Every byte read back is verified: a digit changed inside a number still parses, but the
    checksum the json carries (of itself, and of the parquet's bytes) no longer matches."""
    store, key = saved(tmp_path)
    if kind == "failure marker":
        store.save(RunResult(spec=spec(seed=3), status="FAILED", error="ValueError: boom"))
        key = spec(seed=3).run_key
        path = store.failed_path(key)
    else:
        path = store.records_path(key) if kind == "records" else store.meta_path(key)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"wall_time_s") + 16 if kind != "records" else len(raw) // 3
    raw[at] = (raw[at] + 1) % 256 if kind == "records" else ord("7") if raw[at] != ord("7") else ord("3")
    path.write_bytes(bytes(raw))
    fresh = ResultStore(store.root)
    assert key not in fresh.finished_keys() | fresh.failed_keys()
    (damage,) = fresh.damaged()
    assert damage.path == path
