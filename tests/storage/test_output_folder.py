"""Output folders that cannot be written, full disks, umask, another version's or study's folder.

Each error is one line with its documented exit code, and a finished run is never lost. The
file system errors are real: a small tmpfs, full or read-only (`support.small_disk`); where
mounting is refused the write's error is injected at the write.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.support.small_disk import fill, mounted
from wdrbo_dist.storage import store as store_module
from wdrbo_dist.cli import main
from wdrbo_dist.storage.store import ResultStore

CLI = [str(Path(sys.executable).with_name("wdrbo-dist"))]


def config(tmp_path: Path, out: Path, **changes) -> Path:
    data = {"name": "disk", "problems": ["newsvendor"], "algorithms": ["random"], "seeds": [1, 2],
            "evaluations": 8, "init_size": 5, "backend": "serial", "workers": 1, "tracking_uri": "none",
            "output_dir": str(out)} | changes
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def error_lines(capsys) -> list[str]:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return captured.err.strip().splitlines()


def test_an_output_dir_that_cannot_be_a_folder_stops_before_any_run_with_one_line(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["run", str(config(tmp_path, tmp_path / "afile" / "out"))]) == 2
    assert error_lines(capsys) == [f"wdrbo-dist run: error: output_dir {tmp_path}/afile/out: cannot be created: "
                                   f"{tmp_path}/afile is a file, not a folder; name a folder"]
    assert main(["run", str(config(tmp_path, tmp_path / "afile"))]) == 2
    assert error_lines(capsys) == [f"wdrbo-dist run: error: output_dir {tmp_path}/afile: is a file, not a folder; "
                                   "name a folder"]


def test_an_output_dir_on_a_read_only_file_system_stops_before_any_run(tmp_path, capsys):
    disk = tmp_path / "ro"
    with mounted(disk, read_only=True) as real:
        if not real:
            disk.chmod(0o500)  # not root: plain permissions refuse the write
        assert main(["run", str(config(tmp_path, disk / "out"))]) == 2
        [line] = error_lines(capsys)
        reason = "Read-only file system" if real else "Permission denied"
        assert line == (f"wdrbo-dist run: error: output_dir {disk}/out: cannot write to {disk} ({reason}); "
                        "name a folder you can write to")


def test_a_full_disk_during_run_cancels_the_runs_in_flight_and_keeps_the_finished_run(tmp_path, capsys, monkeypatch):
    """Two pool workers, six runs, a 1 MiB disk with room for about one run: the run that does not
    fit is written to a folder elsewhere, named on the line; the others in flight are cancelled."""
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    disk = tmp_path / "disk"
    with mounted(disk) as real:
        out = disk / "out"
        study = config(tmp_path, out, seeds=[1, 2, 3, 4, 5, 6], backend="local", workers=2)
        if real:
            fill(disk, leave_bytes=28 * 1024)
        else:  # the second result's parquet meets a full disk
            saves = []
            original = store_module.write_bytes_atomic

            def full_at_second(data, path, sync_dir=True):
                if str(path).endswith(".parquet"):
                    saves.append(path)
                if len(saves) >= 2:
                    raise OSError(errno.ENOSPC, "No space left on device", str(path))
                original(data, path, sync_dir)

            monkeypatch.setattr(store_module, "write_bytes_atomic", full_at_second)
        assert main(["run", str(study), "--quiet"]) == 74
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err + captured.out
        lines = captured.out.splitlines()
        [line] = [x for x in lines if x.startswith("output folder not writable")]
        assert f"cannot write {out} (No space left on device)" in line and "the runs in flight were cancelled" in line
        assert line.endswith("free space and run the same command again (exit 74)")
        [kept] = list(spare.glob("wdrbo-dist-unsaved-*"))
        assert f"is kept in {kept}: move {kept}/runs/* into {out}/runs/" in line
        stored, elsewhere = ResultStore(out).finished_keys(), ResultStore(kept).finished_keys()
        assert len(elsewhere) == 1 and not stored & elsewhere
        finished = int(lines[0].split("this command: ")[1].split(" finished")[0])
        assert finished == len(stored) + 1 < 6  # the run kept elsewhere counts; not all ran


def test_run_one_into_a_folder_it_cannot_write_stops_before_the_run(tmp_path):
    (tmp_path / "afile").write_text("x")
    done = subprocess.run([*CLI, "run-one", "--algorithm", "random", "--problem", "newsvendor", "--seed", "1",
                           "--evaluations", "8", "--out", str(tmp_path / "afile" / "r.parquet")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""  # no run
    assert done.stderr.strip().splitlines() == [
        f"wdrbo-dist run-one: error: --out {tmp_path}/afile/r.parquet: its folder {tmp_path}/afile: is a file, "
        "not a folder; name a folder"]


def test_run_one_on_a_full_disk_keeps_the_finished_run_elsewhere(tmp_path):
    disk, spare = tmp_path / "disk", tmp_path / "spare"
    spare.mkdir()
    with mounted(disk) as real:
        if not real:
            pytest.skip("no tmpfs here; the study's full-disk test injects the error instead")
        fill(disk, leave_bytes=0)
        out = disk / "r.parquet"
        done = subprocess.run([*CLI, "run-one", "--algorithm", "random", "--problem", "newsvendor", "--seed", "1",
                               "--evaluations", "8", "--quiet", "--out", str(out)],
                              capture_output=True, text=True, timeout=120, env=os.environ | {"TMPDIR": str(spare)})
    assert done.returncode == 74 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    [kept] = list(spare.glob("wdrbo-dist-unsaved-*/r.parquet"))
    assert line == (f"wdrbo-dist run-one: error: cannot write {out} (No space left on device); the run finished "
                    f"and the records are in {kept}")
    assert len(pd.read_parquet(kept)) == 8


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_result_files_follow_the_umask(tmp_path, capsys, umask, mode):
    out = tmp_path / "out"
    saved = os.umask(umask)
    try:
        assert main(["run", str(config(tmp_path, out, seeds=[1])), "--quiet"]) == 0
    finally:
        os.umask(saved)
    files = [out / "study.json", *(out / "runs").iterdir()]
    assert len(files) == 3
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in files} == {path.name: mode for path in files}


def test_status_and_run_name_the_runs_an_older_version_left(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    study = config(tmp_path, out)
    import wdrbo_dist.storage.output_folder as folder_module
    import wdrbo_dist.run.spec as run_module
    import wdrbo_dist.storage.run_files as run_files_module

    with monkeypatch.context() as older:  # the same study, run by version 0.21.0
        for module in (run_module, run_files_module, store_module, folder_module):
            older.setattr(module, "__version__", "0.21.0")
        assert main(["run", str(study), "--quiet"]) == 0
    capsys.readouterr()
    from wdrbo_dist import __version__

    note = (f"note: {out} holds 2 finished runs of another version (2 of version 0.21.0); this version "
            f"({__version__}) does not reuse them (the version is part of a run's key): to keep them apart give "
            "this study another output_dir, or run anew here beside them")
    assert main(["status", str(study)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == ["total: 0 done, 0 failed, 2 missing of 2", note]
    assert main(["run", str(study), "--quiet"]) == 0
    assert note in capsys.readouterr().err.splitlines()


def test_a_second_study_in_the_same_output_folder_is_refused_with_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    first = config(tmp_path, out, seeds=[1])
    assert main(["run", str(first), "--quiet"]) == 0
    capsys.readouterr()
    second = config(tmp_path, out, name="other", seeds=[1])
    assert main(["run", str(second), "--quiet"]) == 2
    line = (f"output_dir {out} holds study 'disk' ({out}/study.json), not 'other': one study per folder; "
            "give 'other' another output_dir")
    assert error_lines(capsys) == [f"wdrbo-dist run: error: {line}"]
    assert json.loads((out / "study.json").read_text())["name"] == "disk"
    assert main(["status", str(second)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"note: {line}"


def test_an_unusable_dashboards_folder_is_one_line_before_work_and_a_full_one_exit_74(tmp_path, capsys):
    out = tmp_path / "out"
    study = config(tmp_path, out, seeds=[1])
    assert main(["run", str(study), "--quiet"]) == 0
    capsys.readouterr()
    (tmp_path / "afile").write_text("x")
    assert main(["report", str(study), "--no-mlflow", "--dashboards", str(tmp_path / "afile")]) == 2
    assert error_lines(capsys) == [f"wdrbo-dist report: error: --dashboards {tmp_path}/afile: is a file, not a "
                                   "folder; name a folder"]
    disk = tmp_path / "disk"
    with mounted(disk) as real:
        if not real:
            pytest.skip("no tmpfs here")
        fill(disk, leave_bytes=0)
        assert main(["report", str(study), "--no-mlflow", "--dashboards", str(disk / "dash")]) == 74
        [line] = error_lines(capsys)
    assert line.startswith(f"wdrbo-dist report: error: cannot write {disk}/dash/disk") and line.endswith(
        "(No space left on device); the study's store is untouched: free space and run the same command again")


def test_a_disk_full_before_the_first_run_is_one_line_and_exit_74(tmp_path, capsys):
    disk = tmp_path / "disk"
    with mounted(disk) as real:
        if not real:
            pytest.skip("no tmpfs here")
        fill(disk, leave_bytes=0)
        assert main(["run", str(config(tmp_path, disk / "out")), "--quiet"]) == 74
        lines = error_lines(capsys)
    assert lines == [f"wdrbo-dist run: error: cannot write study.json in {disk}/out (No space left on device); "
                     "no run started; free space and run again"]


def test_a_folder_of_files_the_runner_did_not_write_is_refused_and_left_alone(tmp_path, capsys):
    """The runner deletes and overwrites only what it wrote: a folder holding anything else is
    refused with one line, exit 2, before any work; nothing in it changes."""
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "chapter1.tex").write_text("months of work")
    (out / "study.json").write_text('{"tool": "another"}')
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["run", str(config(tmp_path, out)), "--quiet"]) == 2
    (line,) = error_lines(capsys)
    assert "holds files the runner did not write (chapter1.tex)" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    (out / "chapter1.tex").unlink()  # a study.json another tool wrote is not ours either
    assert main(["run", str(config(tmp_path, out)), "--quiet"]) == 2
    assert "its study.json is not one the runner wrote" in error_lines(capsys)[0]
    assert (out / "study.json").read_text() == '{"tool": "another"}'


def test_a_file_someone_put_in_discarded_survives_the_end_of_a_command(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(config(tmp_path, out)), "--quiet"]) == 0
    (out / "discarded").mkdir(exist_ok=True)
    (out / "discarded" / "thesis.tex").write_text("kept")
    assert main(["run", str(config(tmp_path, out, seeds=[1, 2, 3])), "--quiet"]) == 0
    assert (out / "discarded" / "thesis.tex").read_text() == "kept"


def test_a_sqlite_tracking_store_inside_the_output_folder_is_the_runners(tmp_path, capsys):
    out = tmp_path / "out"
    study = config(tmp_path, out, tracking_uri=f"sqlite:///{out}/mlflow.db")
    assert main(["run", str(study), "--quiet"]) == 0
    assert main(["run", str(study), "--quiet"]) == 0  # mlflow.db and mlruns/ are not foreign
