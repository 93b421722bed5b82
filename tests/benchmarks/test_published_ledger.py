"""The ledger of published runs: a finished run is kept once, read back exactly, and survives a torn line.

The fidelity table rests on published runs that cost minutes each; the ledger is what keeps
them when the scratch folder that held their pickles is gone. The published code itself is
not needed: these tests write pickles of the shape its main.py writes.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from benchmarks.fidelity.published import LEDGER_KINDS, PublishedRun, read_ledger, record_in_ledger


def write_pickles(run: PublishedRun, cache: Path, rng: np.random.Generator) -> dict[str, object]:
    """What main.py leaves in ./Result for one run (dim, mu, sigma are in its names)."""
    arrays: dict[str, object] = {
        "X": rng.random((run.evaluations, 1)),
        "Y": rng.random((run.evaluations, 1)),
        "contexts": rng.random((run.evaluations, 1)),
        "stochastic_Y": rng.random((run.evaluations, 1)).astype(np.float32),
        "cumulative_stochastic_regret": rng.random(run.evaluations),
        "time": 123.456789,
    }
    (cache / "Result").mkdir(parents=True, exist_ok=True)
    for kind, value in arrays.items():
        with (cache / "Result" / f"{run.prefix()}1_0.6_0.2_{run.beta}_{kind}.pkl").open("wb") as handle:
            pickle.dump(value, handle)
    return arrays


def test_a_finished_run_is_recorded_once_and_read_back_exactly_without_its_pickles(tmp_path: Path) -> None:
    run, ledger, cache = PublishedRun("erbo", "newsvendor", 201), tmp_path / "ledger.jsonl", tmp_path / "cache"
    arrays = write_pickles(run, cache, np.random.default_rng(0))
    assert run.finished_in(cache) and run.key() not in read_ledger(ledger)
    assert record_in_ledger(run, cache, ledger)
    assert not record_in_ledger(run, cache, ledger)  # once
    assert len(ledger.read_text().splitlines()) == 1

    for path in (cache / "Result").iterdir():
        path.unlink()
    assert run.done(cache, ledger) and not run.finished_in(cache)
    loaded = run.load(cache, ledger)
    assert set(loaded) == set(LEDGER_KINDS)
    for kind in ("X", "Y", "contexts", "stochastic_Y"):
        np.testing.assert_array_equal(loaded[kind], np.asarray(arrays[kind], dtype=np.float64))
    assert loaded["time"] == arrays["time"]
    assert not PublishedRun("erbo", "newsvendor", 202).done(cache, ledger)


def test_a_line_torn_by_a_crash_is_skipped_and_the_next_run_lands_on_a_line_of_its_own(tmp_path: Path) -> None:
    ledger, cache = tmp_path / "ledger.jsonl", tmp_path / "cache"
    first, second = PublishedRun("wdrbo", "ackley", 200), PublishedRun("wdrbo", "ackley", 201)
    rng = np.random.default_rng(1)
    write_pickles(first, cache, rng)
    record_in_ledger(first, cache, ledger)
    whole = ledger.read_text()
    ledger.write_text(whole + whole[: len(whole) // 2])  # a second append cut short

    write_pickles(second, cache, rng)
    assert record_in_ledger(second, cache, ledger)
    assert set(read_ledger(ledger)) == {first.key(), second.key()}
