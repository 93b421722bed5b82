"""The store's writer thread: saves in order, hands each save back once, stops after a failure."""

from __future__ import annotations

import threading

import pytest

from tests.storage.test_store import failed, finished, spec
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.storage.writer import NotAttempted, StoreWriter


def test_saves_come_back_in_order_once_each_and_the_store_holds_them(tmp_path) -> None:
    store = ResultStore(tmp_path / "out")
    writer: StoreWriter[int] = StoreWriter(store, depth=2)  # fewer places than results: submit waits
    results = [finished(spec(seed=s)) if s % 3 else failed(spec(seed=s)) for s in range(7)]
    for index, result in enumerate(results):
        writer.submit(index, result)
    saves = writer.drain()
    assert [s.item for s in saves] == list(range(7)) and all(s.error is None for s in saves)
    assert writer.saved() == [] and writer.close() == []
    assert store.finished_keys() == {r.spec.run_key for r in results if r.ok}
    assert store.failed_keys() == {r.spec.run_key for r in results if not r.ok}


def test_after_a_save_fails_the_rest_are_handed_back_not_attempted(tmp_path, monkeypatch) -> None:
    store = ResultStore(tmp_path / "out")
    save, gate, calls = store.save, threading.Event(), []

    def full_disk_at_the_second(result):
        calls.append(result.spec.seed)
        gate.wait(10)  # the next results queue up meanwhile
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return save(result)

    monkeypatch.setattr(store, "save", full_disk_at_the_second)
    writer: StoreWriter[int] = StoreWriter(store)
    for seed in range(4):
        writer.submit(seed, finished(spec(seed=seed)))
    gate.set()
    saves = writer.close()
    assert [s.item for s in saves] == [0, 1, 2, 3] and calls == [0, 1]
    assert saves[0].error is None and isinstance(saves[1].error, OSError)
    assert all(isinstance(s.error, NotAttempted) for s in saves[2:])
    assert store.finished_keys() == {finished(spec(seed=0)).spec.run_key}


def test_close_waits_for_every_submitted_save_and_may_be_called_again(tmp_path) -> None:
    store = ResultStore(tmp_path / "out")
    writer: StoreWriter[int] = StoreWriter(store)
    for seed in range(5):
        writer.submit(seed, finished(spec(seed=seed)))
    assert len(writer.close()) == 5 and writer.close() == []
    assert len(store.finished_keys()) == 5
    with pytest.raises(RuntimeError, match="closed"):
        writer.submit(9, finished(spec(seed=9)))
