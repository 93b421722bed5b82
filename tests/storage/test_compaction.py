"""A big study's finished runs are compacted into one dataset: nothing changes for a reader, a
crash at any point of a compaction loses nothing and duplicates nothing, and the driver, status
and report read both forms."""

from __future__ import annotations

import errno
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.storage.test_store import failed, finished
from wdrbo_dist.driver import study as study_module
from wdrbo_dist.analysis.load import load_study
from wdrbo_dist.cli import main
from wdrbo_dist.storage.compacted import CompactedRuns
from wdrbo_dist.study.config import load_study_config
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.driver.plan import study_status


def spec(seed: int, problem: str = "newsvendor") -> RunSpec:
    return RunSpec.make(algorithm="erbo", problem=problem, seed=seed, evaluations=7, init_size=5, study="unit")


def stored(tmp_path: Path, seeds: range) -> tuple[ResultStore, list]:
    store = ResultStore(tmp_path / "out")
    results = [finished(spec(seed=s, problem=problem)) for s in seeds for problem in ("newsvendor", "ackley")]
    for result in results:
        store.save(result)
    return store, results


def test_compaction_keeps_every_record_and_meta_and_leaves_no_loose_file(tmp_path: Path) -> None:
    store, results = stored(tmp_path, range(1, 6))
    before = {r.spec.run_key: (store.read_records(r.spec.run_key), store.read_meta(r.spec.run_key)) for r in results}
    assert store.compact() == 10
    assert not list(store.runs_dir.glob("*.json")) and not list(store.runs_dir.glob("*.parquet"))
    files = sorted(p.relative_to(store.root).as_posix() for p in (store.root / "compacted").rglob("*.parquet"))
    assert files == ["compacted/index/round-1.parquet", "compacted/records/problem=ackley/round-1.parquet",
                     "compacted/records/problem=newsvendor/round-1.parquet"]
    fresh = ResultStore(store.root)  # another reader: nothing kept in memory
    assert fresh.finished_keys() == set(before) and fresh.loose_keys() == set()
    for key, (records, meta) in before.items():
        pd.testing.assert_frame_equal(fresh.read_records(key), records, check_exact=True)
        assert fresh.read_meta(key) == meta
        assert fresh.is_finished(key)
    assert fresh.damaged() == []


def test_compacted_runs_files_wait_in_discarded_until_the_end_of_the_command(tmp_path: Path) -> None:
    # Deleting them as the study goes would slow each new run's files down on ext4 without a
    # journal (the store's docstring); the study empties the folder at its end.
    store, results = stored(tmp_path, range(1, 4))
    store.compact()
    assert sorted(p.name for p in store.discarded_dir.iterdir()) == sorted(
        f"{r.spec.run_key}.{ext}" for r in results for ext in ("json", "parquet"))
    fresh = ResultStore(store.root)  # no reader takes them for runs
    assert fresh.loose_keys() == set() and fresh.finished_keys() == {r.spec.run_key for r in results}
    assert fresh.damaged() == []
    assert store.empty_discarded() == 12 and not list(store.discarded_dir.iterdir())
    assert store.empty_discarded() == 0


def test_the_next_runs_files_reuse_the_compacted_runs_files(tmp_path: Path) -> None:
    # A file reused is neither created nor deleted: at 10^5 runs that is 2 x 10^5 of each.
    store, results = stored(tmp_path, range(1, 4))
    store.compact()
    inodes = {p.stat().st_ino for p in store.discarded_dir.iterdir()}
    later = [finished(spec(seed=s)) for s in (21, 22)]
    for result in later:
        store.save(result)
    reused = {p.stat().st_ino for r in later for p in (store.records_path(r.spec.run_key), store.meta_path(r.spec.run_key))}
    assert reused <= inodes and len(reused) == 4 and len(list(store.discarded_dir.iterdir())) == 12 - 4
    fresh = ResultStore(store.root)  # each reused file holds only its new run, whole
    for result in later:
        pd.testing.assert_frame_equal(fresh.read_records(result.spec.run_key), result.records, check_exact=True)
        assert fresh.read_meta(result.spec.run_key)["run_key"] == result.spec.run_key
    assert fresh.damaged() == [] and len(fresh.finished_keys()) == len(results) + 2
    assert not [p for p in store.runs_dir.iterdir() if p.name.startswith(".")]  # no temporary left
    assert store.empty_discarded() == 8


def test_rounds_add_up_and_a_run_saved_again_is_found_once(tmp_path: Path) -> None:
    store, results = stored(tmp_path, range(1, 3))
    store.compact()
    store.save(finished(spec(seed=9)))
    again = replace(results[0], records=results[0].records.assign(y=results[0].records["y"] + 1.0))
    store.save(again)  # run again (--force): its new result replaces its compacted row
    assert store.compact() == 2
    assert len(store.finished_keys()) == 5 and store.loose_keys() == set()
    assert len(list((store.root / "compacted" / "index").glob("round-*.parquet"))) == 2
    fresh = ResultStore(store.root)
    pd.testing.assert_frame_equal(fresh.read_records(again.spec.run_key), again.records, check_exact=True)


def test_a_round_extends_the_index_in_memory_as_a_fresh_reader_reads_it(tmp_path: Path, monkeypatch) -> None:
    # At 10^5 runs a study compacts 100 times: a round reading every earlier round's index again
    # was 5,050 reads. The driver's index after a round is the one a new reader builds.
    store, _ = stored(tmp_path, range(1, 3))
    store.compact()
    store.compacted.index()  # read once
    reads = []
    monkeypatch.setattr(pd, "read_parquet", lambda *a, **k: reads.append(a) or pytest.fail("an index read again"))
    for seed in (11, 12, 13):
        store.save(finished(spec(seed=seed)))
        assert store.compact() == 1
    monkeypatch.undo()
    assert reads == []
    ours, fresh = store.compacted.index(), CompactedRuns(store.root).index()
    assert sorted(ours["run_key"].tolist()) == sorted(fresh["run_key"].tolist()) and len(fresh) == 7
    pd.testing.assert_frame_equal(ours.sort_index().astype(str), fresh.sort_index().astype(str), check_index_type=False)


def test_a_crash_before_the_rounds_index_leaves_loose_runs_and_files_the_next_round_replaces(tmp_path: Path) -> None:
    store, results = stored(tmp_path, range(1, 4))
    compacted = CompactedRuns(store.root)
    runs = [(store.read_meta(r.spec.run_key), store.read_records(r.spec.run_key)) for r in results]
    compacted.add_round(runs)
    (store.root / "compacted" / "index" / "round-1.json").unlink()  # the commit never happened
    fresh = ResultStore(store.root)
    assert fresh.finished_keys() == {r.spec.run_key for r in results} == fresh.loose_keys()
    assert fresh.compact() == 6
    files = {p.relative_to(store.root / "compacted").as_posix() for p in (store.root / "compacted").rglob("round-*")}
    assert files == {"index/round-2.parquet", "index/round-2.json", *fresh.compacted.parts()}
    for r in results:
        pd.testing.assert_frame_equal(ResultStore(store.root).read_records(r.spec.run_key), r.records, check_exact=True)


def test_record_files_no_round_names_are_deleted(tmp_path: Path) -> None:
    store, _ = stored(tmp_path, range(1, 2))
    store.compact()
    stray = store.root / "compacted" / "records" / "problem=ackley" / "round-7.parquet"
    stray.write_bytes(b"left by a crash")
    store.save(finished(spec(seed=5)))
    store.compact()
    assert not stray.exists() and len(store.finished_keys()) == 3


def test_a_crash_after_the_commit_leaves_both_forms_and_each_run_is_counted_once(tmp_path: Path) -> None:
    store, results = stored(tmp_path, range(1, 4))
    runs = [(store.read_meta(r.spec.run_key), store.read_records(r.spec.run_key)) for r in results]
    CompactedRuns(store.root).add_round(runs)  # committed; the loose files were not yet deleted
    fresh = ResultStore(store.root)
    assert len(fresh.finished_keys()) == 6
    assert fresh.leftovers() == {r.spec.run_key for r in results}  # the driver compacts at its end for these
    assert fresh.compact() == 0  # nothing new: the loose copies go
    assert fresh.loose_keys() == set() and len(fresh.finished_keys()) == 6


def test_a_reader_that_listed_a_run_loose_finds_it_compacted(tmp_path: Path) -> None:
    store, results = stored(tmp_path, range(1, 2))
    reader = ResultStore(store.root)
    key = results[0].spec.run_key
    assert key in reader.loose_keys()
    store.compact()  # the driver, meanwhile
    pd.testing.assert_frame_equal(reader.read_records(key), results[0].records, check_exact=True)
    assert reader.read_meta(key)["run_key"] == key


def test_a_failure_marker_does_not_hide_a_compacted_result(tmp_path: Path) -> None:
    store, results = stored(tmp_path, range(1, 2))
    store.compact()
    key = results[0].spec.run_key
    store.save(failed(results[0].spec))  # a later attempt failed: the finished result stays
    assert store.read_meta(key)["status"] == "FINISHED"
    assert key in store.finished_keys() and key not in store.failed_keys()


def test_a_damaged_compacted_file_is_named_set_aside_and_its_runs_run_again(tmp_path: Path) -> None:
    store, _ = stored(tmp_path, range(1, 3))
    store.compact()
    damaged = store.root / "compacted" / "records" / "problem=ackley" / "round-1.parquet"
    damaged.write_bytes(damaged.read_bytes()[:100])
    fresh = ResultStore(store.root)
    assert len(fresh.finished_keys()) == 2  # the newsvendor runs; the Ackley ones run again
    (damage,) = fresh.damaged()
    assert damage.line(fresh.root).startswith("damaged file compacted/records/problem=ackley/round-1.parquet")
    folder = fresh.set_aside([damage])
    assert folder is not None and (folder / "compacted" / "records" / "problem=ackley" / "round-1.parquet").is_file()
    assert ResultStore(store.root).damaged() == [] and len(ResultStore(store.root).finished_keys()) == 2


@pytest.fixture
def small_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(study_module, "COMPACT_EVERY", 3)


def test_a_study_compacts_as_it_goes_and_status_report_and_resume_read_both_forms(
    tmp_path: Path, small_rounds: None, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": "compacting", "problems": ["newsvendor", "three-hump-camel"],
        "algorithms": [{"name": "gp-ucb", "options": {"raw_samples": 16, "num_restarts": 2}}],
        "seeds": [1, 2, 3, 4], "evaluations": 6, "init_size": 5, "backend": "serial", "tracking_uri": "none",
        "output_dir": str(tmp_path / "out"),
    }))
    assert main(["run", str(config), "--quiet"]) == 0
    study = load_study_config(config)
    store = ResultStore(study.output_dir)
    # 8 runs: two rounds of 3 as they finish; the last 2 stay in their own files (fewer than a round)
    assert len(store.compacted.keys()) == 6 and len(store.loose_keys()) == 2
    assert not list(store.discarded_dir.iterdir())  # the compacted runs' own files, deleted at the end
    assert study_status(study).totals == (8, 0, 0)
    data = load_study([study])
    assert data.counts() == {"expected": 8, "finished": 8, "failed": 0, "missing": 0}
    assert len(data.steps) == 8 * 6
    capsys.readouterr()
    assert main(["run", str(config)]) == 0
    assert "8 already finished" in capsys.readouterr().err


def test_a_compaction_that_cannot_write_says_so_on_its_own_line_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runs a crashed driver left loose are compacted at the end of the next command; when
    that cannot write, the loose files stay the record and the summary says so once."""
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": "full", "problems": ["newsvendor"], "algorithms": [{"name": "gp-ucb", "options": {"raw_samples": 16}}],
        "seeds": [1, 2, 3], "evaluations": 6, "init_size": 5, "backend": "serial", "tracking_uri": "none",
        "output_dir": str(tmp_path / "out"),
    }))
    assert main(["run", str(config), "--quiet"]) == 0  # 3 runs, fewer than a round: loose
    monkeypatch.setattr(study_module, "COMPACT_EVERY", 2)

    def disk_full(self: ResultStore) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ResultStore, "compact", disk_full)
    capsys.readouterr()
    assert main(["run", str(config)]) == 0
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if "not compacted" in x]
    assert line == (f"warning: the finished runs stay in their own files, not compacted: cannot write {tmp_path / 'out'} "
                    "(No space left on device); nothing is lost, the next `run` compacts them")
    assert len(ResultStore(tmp_path / "out").loose_keys()) == 3


def flip(path: Path, at: int, data: bytes = b"\x00\x01\x02\x03\x04\x05\x06\x07") -> None:
    """Overwrite bytes of `path` in place at `at` (negative: from the end)."""
    raw = bytearray(path.read_bytes())
    at = at % len(raw)
    raw[at:at + len(data)] = bytes(b ^ 0xFF for b in raw[at:at + len(data)])
    path.write_bytes(bytes(raw))


def test_eight_bytes_changed_inside_a_data_page_are_caught_not_served(tmp_path: Path) -> None:
    """The parquet still reads (its footer is whole), but its numbers are not what was written."""
    store, results = stored(tmp_path, range(1, 3))
    store.compact()
    path = store.root / "compacted" / "records" / "problem=ackley" / "round-1.parquet"
    flip(path, 200)
    fresh = ResultStore(store.root)
    ackley = {r.spec.run_key for r in results if r.spec.problem == "ackley"}
    assert ackley and not ackley & fresh.finished_keys()
    (damage,) = fresh.damaged()
    assert damage.path == path and "checksum" in damage.problem
    assert fresh.compacted.scan(ackley, ["y"]).empty  # nothing of it is served


def test_a_damaged_index_sets_its_round_aside_whole_and_its_number_is_never_reused(tmp_path: Path) -> None:
    store, results = stored(tmp_path, range(1, 3))
    store.compact()
    index = store.root / "compacted" / "index" / "round-1.parquet"
    index.write_bytes(index.read_bytes()[: len(index.read_bytes()) // 2])
    fresh = ResultStore(store.root)
    assert fresh.finished_keys() == set()
    (damage,) = fresh.damaged()
    kept = {p.read_bytes() for p in damage.companions if "records" in p.parts}
    folder = fresh.set_aside([damage])
    assert folder is not None
    aside = {p.read_bytes() for p in (folder / "compacted" / "records").rglob("*.parquet")}
    assert aside == kept and len(aside) == 2  # the intact records, kept
    for result in results:  # run again
        fresh.save(result)
    assert fresh.compact() == len(results)
    assert sorted(p.name for p in (store.root / "compacted" / "index").iterdir()) == ["round-2.json", "round-2.parquet"]
    assert len(ResultStore(store.root).finished_keys()) == len(results)


def test_a_damaged_manifest_sets_its_round_aside(tmp_path: Path) -> None:
    store, _ = stored(tmp_path, range(1, 2))
    store.compact()
    flip(store.root / "compacted" / "index" / "round-1.json", 30, b"7")
    fresh = ResultStore(store.root)
    (damage,) = fresh.damaged()
    assert damage.path.name == "round-1.json" and fresh.finished_keys() == set()
    assert len(damage.companions) == 4  # the manifest, the index and two problems' records


def test_the_end_of_a_command_deletes_only_the_files_compaction_moved(tmp_path: Path) -> None:
    store, _ = stored(tmp_path, range(1, 2))
    store.discarded_dir.mkdir()
    foreign = store.discarded_dir / "thesis.tex"
    foreign.write_text("not the runner's")
    store.compact()
    assert store.empty_discarded() == 4 and foreign.read_text() == "not the runner's"


def test_runs_on_another_file_system_are_compacted_and_their_files_deleted(tmp_path: Path, monkeypatch) -> None:
    store, results = stored(tmp_path, range(1, 2))
    real = os.replace

    def across(src, dst):  # runs/ and discarded/ on two file systems
        if Path(dst).parent.name == "discarded":
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", across)
    assert store.compact() == len(results)
    assert store.loose_keys() == set() and not list(store.runs_dir.iterdir())
    assert len(ResultStore(store.root).finished_keys()) == len(results)


def test_a_damaged_compacted_file_is_never_summarised_and_run_replaces_it(
    tmp_path: Path, small_rounds: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 bytes changed inside a data page: `status` counts its runs missing and names the file,
    `summarize` prints none of its numbers and no traceback, `run` sets it aside and runs them
    again, and the summary is then the first one, to the digit."""
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": "flipped", "problems": ["newsvendor", "three-hump-camel"],
        "algorithms": [{"name": "gp-ucb", "options": {"raw_samples": 16, "num_restarts": 2}}],
        "seeds": [1, 2, 3], "evaluations": 6, "init_size": 5, "backend": "serial", "tracking_uri": "none",
        "output_dir": str(tmp_path / "out"),
    }))
    dashboards = str(tmp_path / "dash")
    assert main(["run", str(config), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["summarize", str(config), "--dashboards", dashboards]) == 0
    whole = capsys.readouterr().out
    [path] = (tmp_path / "out" / "compacted" / "records").glob("problem=newsvendor/round-*.parquet")
    flip(path, len(path.read_bytes()) // 3)
    assert main(["status", str(config)]) == 0
    status = capsys.readouterr().out
    assert f"damaged file compacted/records/problem=newsvendor/{path.name}" in status
    main(["summarize", str(config), "--dashboards", dashboards])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    newsvendor = [line for line in captured.out.splitlines() if "Newsvendor" in line or "newsvendor" in line]
    assert newsvendor and all(line not in whole for line in newsvendor)  # no number of the damaged file
    assert main(["run", str(config), "--quiet"]) == 0
    assert any(p.name == path.name for p in (tmp_path / "out" / "damaged").rglob("*.parquet"))
    capsys.readouterr()
    assert main(["summarize", str(config), "--dashboards", dashboards]) == 0
    assert capsys.readouterr().out == whole
