"""The store under faults: is every run there once, with the numbers it had, whatever happened?

A study of 1,040 stand-in runs (each returns records of its own, derived from its spec, in a few
milliseconds; every 40th seed fails with an error of its own) runs through the command line
(`wdrbo-dist run`, local backend, 2 workers, no MLflow: the store is what is tested) in a driver
process of its own, once without faults: the baseline. Then each fault, on a study of its own:

- `kill -9 at T s`: SIGKILL of the driver at a random time, then the same command until it exits 0;
- `kill -9 in compaction (...)`: SIGKILL of the driver inside a compaction round: after its
  record files, after its index, after its manifest (the commit), after moving its runs' files;
- `SIGTERM`: as Slurm or Kubernetes stop a job: exit 143 expected, then the same command;
- `flipped bytes (...)`: 8 bytes inverted inside each kind of file the store keeps (a finished
  run's parquet and json, a failed run's json, a compacted round's records, index and manifest):
  `status` and `summarize` then (exit 0 or 1, no traceback), then `run`;
- `foreign folder`: an output_dir holding a file of another tool: exit 2, the file unchanged;
- `hostile name (...)`: a study name that would leave its folder: exit 2, nothing written.

Printed per fault: runs lost (finished in the baseline, not finished now), runs duplicated (a
run found finished twice: loose and compacted, or more rows than evaluations), numbers changed
(runs whose records differ from the baseline's, and whether `summarize` differs), and the exit
codes seen. Targets: 0, 0, 0.

    .venv/bin/python benchmarks/runner/faults.py               # the whole matrix, about 5 minutes
    .venv/bin/python benchmarks/runner/faults.py --only flipped --runs 200
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks`

from benchmarks import harness  # first: one thread, before NumPy or torch is imported

import pandas as pd
import yaml

from benchmarks.runner.scaling import ALGORITHMS, EVALUATIONS, INIT_SIZE, PROBLEMS, template_records
from wdrbo_dist.run.spec import RunResult, RunSpec

FAIL_EVERY = 40  # every 40th seed fails: failure markers are part of the store too
COMPACTION_POINTS = ("records", "index", "manifest", "moved")


def stand_in(spec: RunSpec, records: bytes) -> RunResult:
    """A run whose records are its own (the template shifted by a number from its key), or a
    FAILED run for every FAIL_EVERY-th seed."""
    from benchmarks.runner.scaling import _decoded

    if spec.seed % FAIL_EVERY == FAIL_EVERY - 1:
        return RunResult(spec=spec, status="FAILED", error=f"ValueError: seed {spec.seed} fails on purpose")
    shift = int(hashlib.sha256(spec.run_key.encode()).hexdigest()[:8], 16) / 2**32
    frame = _decoded(records).copy()
    frame["y"] = frame["y"] + shift
    frame["regret"] = frame["regret"] + shift
    return RunResult(spec=spec, status="FINISHED", records=frame, options={}, wall_time_s=0.001,
                     started_at=time.time())


def driver(config: str, kill_in: str, template: str) -> int:
    """The `run` command with the stand-in as each task's run; with `kill_in`, SIGKILL at that
    point of the first compaction round (the harness's fault, injected in its own process)."""
    from wdrbo_dist.cli import main
    from wdrbo_dist.driver import study as driver_study
    from wdrbo_dist.storage import compacted, store

    run = functools.partial(stand_in, records=Path(template).read_bytes())  # the same records in every driver
    real_run_study = driver_study.run_study
    driver_study.run_study = lambda *a, **k: real_run_study(*a, **k, run=run)  # type: ignore[assignment]
    if kill_in:
        die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
        if kill_in == "records":  # the round's record files written, nothing else
            real = compacted.write_bytes_atomic
            compacted.write_bytes_atomic = lambda data, path, *a, **k: (  # type: ignore[assignment]
                die() if "index" in Path(path).parts else real(data, path, *a, **k))
        elif kill_in == "index":  # its index written, not its manifest
            compacted.write_json_atomic = die  # type: ignore[assignment]
        elif kill_in == "manifest":  # committed, its runs' loose files still in runs/
            real_add = compacted.CompactedRuns.add_round
            compacted.CompactedRuns.add_round = lambda self, runs: (real_add(self, runs), die())[0]  # type: ignore
        elif kill_in == "moved":  # half of its runs' files moved to discarded/
            real_discard, moved = store.ResultStore._discard, [0]

            def discard(self, path):  # type: ignore[no-untyped-def]
                moved[0] += 1
                if moved[0] > 500:
                    die()
                return real_discard(self, path)

            store.ResultStore._discard = discard  # type: ignore[assignment]
    return main(["run", config, "--quiet"])


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from wdrbo_dist.cli import main; sys.exit(main(sys.argv[1:]))",
                           *args], capture_output=True, text=True, timeout=timeout)


TEMPLATE: list[Path] = []  # the stand-in's records, written once (a real run's times differ run to run)


def start_driver(config: Path, kill_in: str = "") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--driver", str(config), "--kill-in", kill_in,
                             "--template", str(TEMPLATE[0])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def until_done(config: Path, codes: list[int], attempts: int = 6) -> None:
    """The same command again, as a job wrapper would, until it exits 0 or 1 (the failed runs)."""
    for _ in range(attempts):
        process = start_driver(config)
        out, _ = process.communicate(timeout=900)
        codes.append(process.returncode)
        if process.returncode in (0, 1):
            return
    raise RuntimeError(f"{config}: no clean end after {attempts} commands: {codes}; last output: {out[-1500:]}")


def write_config(folder: Path, name: str, runs: int, **changes) -> Path:
    cells = len(PROBLEMS) * len(ALGORITHMS)
    data = {"name": name, "problems": PROBLEMS, "algorithms": ALGORITHMS, "seeds": list(range(-(-runs // cells))),
            "evaluations": EVALUATIONS, "init_size": INIT_SIZE, "backend": "local", "workers": 2,
            "tracking_uri": "none", "output_dir": str(folder / "out")} | changes
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def snapshot(config: Path) -> tuple[dict[str, str], set[str], int, str]:
    """(finished run key -> a hash of its records, failed keys, runs found twice, summarize's text)."""
    from wdrbo_dist.storage.store import ResultStore
    from wdrbo_dist.study.config import load_study_config

    study = load_study_config(config)
    store = ResultStore(study.output_dir)
    loose, compacted = store.loose_keys(), store.compacted.keys()
    twice = len(loose & compacted)
    frames = [store.read_records(key).assign(run_key=key) for key in loose]
    columns = list(pd.read_parquet(TEMPLATE[0]).columns)  # every run's columns (the stand-in's records)
    frames.append(store.compacted.scan(compacted - loose, columns))
    hashes = {}
    for key, records in pd.concat(frames, ignore_index=True).groupby("run_key"):
        twice += len(records) != EVALUATIONS
        values = records.drop(columns="run_key").sort_values("step")[sorted(columns)]
        hashes[str(key)] = hashlib.sha256(pd.util.hash_pandas_object(values, index=False).values.tobytes()).hexdigest()
    summary = cli("summarize", str(config), "--dashboards", str(config.parent / "dash"))
    text = "\n".join(line for line in summary.stdout.splitlines() if not line.startswith(("wrote", "study ", "tables:")))
    return hashes, store.failed_keys(), twice, text


def compare(name: str, config: Path, baseline: tuple, codes: list[int], note: str = "") -> dict:
    hashes, failed, twice, text = snapshot(config)
    base_hashes, base_failed, _, base_text = baseline
    if text != base_text:  # say where `summarize` differs
        differs = [line for line in text.splitlines() if line not in base_text.splitlines()]
        note = (note + "; " if note else "") + f"summarize differs: {differs[:1]}"
    return {"fault": name, "lost": len(set(base_hashes) - set(hashes)) + len(base_failed - failed),
            "duplicated": twice, "changed": sum(hashes.get(k) != h for k, h in base_hashes.items() if k in hashes)
            + (text != base_text), "exits": " ".join(map(str, codes)), "note": note}


def flip(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    at = len(raw) // 3
    raw[at:at + 8] = bytes(b ^ 0xFF for b in raw[at:at + 8])
    path.write_bytes(bytes(raw))


def scenarios(runs: int, rng: random.Random, study_s: float) -> list[tuple[str, dict]]:
    kills = [("kill -9 at {:.1f} s".format(t), {"kill_at": t}) for t in sorted(rng.uniform(0.5, study_s) for _ in range(4))]
    return [
        *kills,
        *((f"kill -9 in compaction ({point})", {"kill_in": point}) for point in COMPACTION_POINTS),
        ("SIGTERM", {"term_at": study_s / 2}),
        *((f"flipped bytes ({kind})", {"flip": kind}) for kind in
          ("run parquet", "run json", "failed json", "compacted records", "compacted index", "compacted manifest")),
        ("foreign folder", {"foreign": True}),
        *((f"hostile name ({label})", {"name": name}) for label, name in
          (("..", ".."), ("a/b", "a/b"), ("300 characters", "n" * 300))),
    ]


def run_fault(name: str, fault: dict, folder: Path, runs: int, baseline: tuple) -> dict:
    config = write_config(folder, "faults", runs)
    out = folder / "out"
    codes: list[int] = []
    if "name" in fault:  # refused before any work, nothing written anywhere
        config = write_config(folder, fault["name"], runs)
        done = cli("run", str(config), "--quiet")
        written = out.exists()
        return {"fault": name, "lost": 0, "duplicated": 0, "changed": int(written), "exits": str(done.returncode),
                "note": "refused, nothing written" if done.returncode == 2 and not written else done.stderr[-200:]}
    if fault.get("foreign"):
        out.mkdir()
        (out / "thesis.tex").write_text("months of work")
        done = cli("run", str(config), "--quiet")
        kept = [p.name for p in out.iterdir()] == ["thesis.tex"] and (out / "thesis.tex").read_text() == "months of work"
        return {"fault": name, "lost": 0, "duplicated": 0, "changed": int(not kept), "exits": str(done.returncode),
                "note": "refused, folder unchanged" if done.returncode == 2 and kept else done.stderr[-200:]}
    if "kill_at" in fault or "term_at" in fault:
        process = start_driver(config)
        time.sleep(fault.get("kill_at", fault.get("term_at")))
        process.send_signal(signal.SIGKILL if "kill_at" in fault else signal.SIGTERM)
        process.communicate(timeout=120)
        codes.append(process.returncode)
    elif "kill_in" in fault:
        process = start_driver(config, fault["kill_in"])
        process.communicate(timeout=900)
        codes.append(process.returncode)
    note = ""
    if "flip" in fault:
        until_done(config, codes)
        kind = fault["flip"]
        target = {
            "run parquet": lambda: next((out / "runs").glob("*.parquet")),
            "run json": lambda: next((out / "runs").glob("*.json")),
            "failed json": lambda: next((out / "failed").glob("*.json")),
            "compacted records": lambda: next((out / "compacted" / "records").glob("*/round-*.parquet")),
            "compacted index": lambda: next((out / "compacted" / "index").glob("round-*.parquet")),
            "compacted manifest": lambda: next((out / "compacted" / "index").glob("round-*.json")),
        }[kind]()
        flip(target)
        for command in ("status", "summarize"):
            done = cli(command, str(config), *(["--dashboards", str(folder / "dash")] if command == "summarize" else []))
            codes.append(done.returncode)
            if "Traceback" in done.stdout + done.stderr:
                note = f"{command} printed a traceback"
    until_done(config, codes)
    return compare(name, config, baseline, codes, note)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=harness.count, default=1040, help="runs in the study (default 1040)")
    parser.add_argument("--only", default="", help="only the faults whose name contains this")
    parser.add_argument("--seed", type=int, default=0, help="the random kill times' seed")
    parser.add_argument("--driver", help=argparse.SUPPRESS)
    parser.add_argument("--kill-in", default="", help=argparse.SUPPRESS)
    parser.add_argument("--template", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        sys.exit(driver(args.driver, args.kill_in, args.template))
    rng = random.Random(args.seed)
    scratch = Path(tempfile.mkdtemp(prefix="wdrbo-faults-"))
    try:
        TEMPLATE.append(scratch / "template.parquet")
        TEMPLATE[0].write_bytes(template_records())
        config = write_config(scratch / "baseline", "faults", args.runs)
        started = time.monotonic()
        codes: list[int] = []
        until_done(config, codes)
        study_s = time.monotonic() - started
        baseline = snapshot(config)
        print(f"baseline: {len(baseline[0])} finished, {len(baseline[1])} failed runs in {study_s:.1f} s "
              f"(exit {codes[-1]})", flush=True)
        rows = []
        for i, (name, fault) in enumerate(scenarios(args.runs, rng, study_s)):
            if args.only and args.only not in name:
                continue
            row = run_fault(name, fault, scratch / f"fault-{i}", args.runs, baseline)
            rows.append(row)
            print(f"| {row['fault']} | {row['lost']} | {row['duplicated']} | {row['changed']} | {row['exits']} | "
                  f"{row['note']} |", flush=True)
        print("\n| fault | runs lost | runs duplicated | numbers changed | exit codes | note |\n|---|---|---|---|---|---|")
        for row in rows:
            print(f"| {row['fault']} | {row['lost']} | {row['duplicated']} | {row['changed']} | {row['exits']} | "
                  f"{row['note']} |")
        bad = [r["fault"] for r in rows if r["lost"] or r["duplicated"] or r["changed"]]
        print(f"\n{len(rows)} faults, {len(bad)} with runs lost, duplicated or changed" + (f": {bad}" if bad else ""))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
