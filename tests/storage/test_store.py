"""The result store: layout, atomic writes, finished / failed keys, and reading back."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wdrbo_dist.run.records import CORE_COLUMNS
from wdrbo_dist.run.spec import RunResult, RunSpec, resolved_options
from wdrbo_dist.storage.atomic import write_atomic, write_parquet_atomic
from wdrbo_dist.storage.run_files import encoded_run, spec_from_dict
from wdrbo_dist.storage.store import ResultStore


def records(n: int = 7, seed: int = 0) -> pd.DataFrame:
    """A records frame of the schema's columns (values are arbitrary test data)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({c: rng.random(n) for c in CORE_COLUMNS})
    frame["step"] = np.arange(1, n + 1)
    frame["is_initial"] = frame["step"] <= 5
    frame["x_0"] = rng.random(n)
    frame["c_0"] = rng.random(n)
    return frame


def spec(seed: int = 1, **kw) -> RunSpec:
    return RunSpec.make(options={"beta": 2.0}, algorithm="erbo", problem="newsvendor", seed=seed,
                        evaluations=7, init_size=5, study="unit", **kw)


def finished(s: RunSpec) -> RunResult:
    """A finished result as `run_one` returns it (records are test data)."""
    return RunResult(spec=s, status="FINISHED", records=records(seed=s.seed), options=resolved_options(s),
                     wall_time_s=1.5, started_at=100.0)


def failed(s: RunSpec) -> RunResult:
    return RunResult(spec=s, status="FAILED", error="Traceback (most recent call last):\nValueError: boom\n")


def test_layout_and_meta_of_a_finished_run(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    result = finished(spec())
    key = result.spec.run_key
    store.save(result)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [f"{key}.json", f"{key}.parquet"]
    assert store.finished_keys() == {key} and store.failed_keys() == set()
    pd.testing.assert_frame_equal(store.read_records(key), result.records, check_exact=True)
    meta = store.read_meta(key)
    assert meta["run_key"] == key and meta["label"] == "newsvendor|erbo|s1" and meta["status"] == "FINISHED"
    assert meta["spec"]["options"] == {"beta": 2.0} and meta["spec"]["study"] == "unit"
    assert spec_from_dict(meta["spec"]) == result.spec
    assert meta["summary"] == pytest.approx(result.summary())
    assert meta["error"] is None and meta["rows"] == 7
    back = store.read_result(key)
    assert back.spec == result.spec and back.ok and back.wall_time_s == 1.5


def test_a_failure_is_kept_apart_and_cleared_when_the_run_later_finishes(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    s = spec(seed=2)
    store.save(failed(s))
    assert store.failed_keys() == {s.run_key} and store.finished_keys() == set()
    meta = store.read_meta(s.run_key)
    assert meta["status"] == "FAILED" and "ValueError: boom" in meta["error"]
    store.save(finished(s))
    assert store.finished_keys() == {s.run_key} and store.failed_keys() == set()
    assert not store.failed_path(s.run_key).exists()
    # A later failure of the same key keeps the finished result (equal keys, equal records).
    store.save(failed(s))
    assert store.finished_keys() == {s.run_key} and store.failed_keys() == set()
    # A marker an earlier command left is cleared by the next command's store as well.
    t = spec(seed=3)
    ResultStore(tmp_path).save(failed(t))
    later = ResultStore(tmp_path)
    later.save(finished(t))
    assert not later.failed_path(t.run_key).exists() and later.failed_keys() == set()


def test_a_result_encoded_where_it_ran_is_stored_as_the_same_records_and_summary(tmp_path: Path) -> None:
    """The study's workers hand the driver the records as parquet bytes and the summary worked
    out; what the store holds is then what it would have encoded itself, to the bit."""
    plain, encoded = ResultStore(tmp_path / "plain"), ResultStore(tmp_path / "encoded")
    result = encoded_run(finished, spec(seed=4))
    assert result.records_parquet is not None and result._summary is not None
    plain.save(finished(spec(seed=4)))
    encoded.save(result)
    key = result.spec.run_key
    pd.testing.assert_frame_equal(encoded.read_records(key), plain.read_records(key), check_exact=True)
    pd.testing.assert_frame_equal(encoded.read_records(key), result.records, check_exact=True)
    assert encoded.read_meta(key)["summary"] == plain.read_meta(key)["summary"] == result.summary()
    assert encoded.records_path(key).read_bytes() == plain.records_path(key).read_bytes()
    assert encoded_run(failed, spec(seed=4)).records_parquet is None


def test_a_parquet_without_its_json_is_not_finished(tmp_path: Path) -> None:
    """The json is written last: a crash between the two leaves a run that is simply redone."""
    store = ResultStore(tmp_path)
    s = spec(seed=3)
    write_parquet_atomic(records(), store.records_path(s.run_key))
    assert store.finished_keys() == set() and not store.is_finished(s.run_key)


def test_a_failed_write_leaves_no_partial_file(tmp_path: Path) -> None:
    bad = pd.DataFrame({"x": [object()]})  # pyarrow cannot write this
    target = tmp_path / "runs" / "k.parquet"
    target.parent.mkdir()
    with pytest.raises(Exception):
        write_parquet_atomic(bad, target)
    with pytest.raises(ZeroDivisionError):  # a writer that fails half-way
        write_atomic(target, lambda tmp: (Path(tmp).write_bytes(b"PAR1"), 1 / 0))
    assert list((tmp_path / "runs").iterdir()) == []


def test_an_empty_or_missing_folder_has_no_runs(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "nowhere")
    assert store.finished_keys() == set() and store.failed_keys() == set()
    with pytest.raises(FileNotFoundError):
        store.read_meta("0123456789abcdef")


def test_temporary_files_are_not_mistaken_for_runs(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.save(finished(spec(seed=4)))
    (tmp_path / "runs" / ".abc.parquet.x.tmp").write_bytes(b"partial")
    (tmp_path / "runs" / ".abc.json.y.tmp").write_text("{")
    assert store.finished_keys() == {spec(seed=4).run_key}
    assert json.loads(store.meta_path(spec(seed=4).run_key).read_text())["status"] == "FINISHED"
    assert os.access(store.records_path(spec(seed=4).run_key), os.R_OK)


def test_the_temporaries_a_crash_left_are_deleted_and_nothing_else(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.save(finished(spec()))
    key = spec().run_key
    ours = [store.runs_dir / f".{key}.parquet.4242.tmp", store.root / ".study.json.abc123.tmp"]
    foreign = [store.runs_dir / ".notes.tmp", store.root / "draft.tmp", store.runs_dir / f".{key}.parquet.bak"]
    for path in [*ours, *foreign]:
        path.write_bytes(b"x")
    assert store.remove_temporaries() == 2
    assert [p.exists() for p in ours] == [False, False] and all(p.exists() for p in foreign)


def test_a_folder_flush_the_disk_refuses_is_an_error_not_silence(tmp_path: Path, monkeypatch) -> None:
    import errno
    import os

    from wdrbo_dist.storage import atomic

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(atomic.os, "fsync", failing)
    with pytest.raises(OSError, match="Input/output error"):
        atomic.fsync_dir(tmp_path)


def test_a_new_partition_folder_is_made_durable_in_its_parent(tmp_path: Path, monkeypatch) -> None:
    from wdrbo_dist.storage import compacted

    flushed: list[Path] = []
    monkeypatch.setattr(compacted, "fsync_dir", lambda folder: flushed.append(Path(folder)))
    store = ResultStore(tmp_path)
    store.save(finished(spec()))
    store.compact()
    assert store.compacted.records_dir in flushed and store.compacted.folder in flushed
