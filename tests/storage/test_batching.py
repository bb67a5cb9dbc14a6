"""Write-transaction sizes for the write gate (storage/batching.py) and their use by the
SQLite backend's batched writes."""

from __future__ import annotations

from pathlib import Path

from triggerfish_cli.storage.batching import BatchSizer
from triggerfish_cli.storage.sqlite.backend import SqliteStorage


def test_while_writers_are_paused_batches_keep_to_the_lock_and_frame_budgets() -> None:
    sizer = BatchSizer(100_000, budget=0.02, frames=300, first=100)
    for _ in range(20):  # 10 us of lock and 1.1 WAL frames a row: frames bind first
        sizer.record(sizer.size, sizer.size * 10e-6, True, int(sizer.size * 1.1))
    assert 250 <= sizer.size <= 300 // 1.1
    for _ in range(20):  # 100 us a row: the 20 ms lock budget binds
        sizer.record(sizer.size, sizer.size * 100e-6, True, sizer.size // 10)
    assert 150 <= sizer.size <= 200


def test_frames_unknown_or_nobody_paused_leave_only_the_other_limits() -> None:
    unknown = BatchSizer(100_000, budget=0.02, frames=300, first=100)
    for _ in range(20):  # not in WAL mode: the gate counts no frames
        unknown.record(unknown.size, unknown.size * 10e-6, True, -1)
    assert unknown.size == 2000  # the lock budget alone
    alone = BatchSizer(5000, budget=0.02, frames=300, first=100)
    for _ in range(10):  # no live writer to pause: grows to the most allowed
        alone.record(alone.size, alone.size * 10e-6, False, alone.size * 2)
    assert alone.size == 5000


def test_a_small_tail_goes_with_the_last_transaction(tmp_path: Path) -> None:
    """Each transaction costs a freeze and a rest, however few rows it holds: a
    remainder of up to an eighth of the batch size is not a transaction of its own."""
    store = SqliteStorage(tmp_path / "t.db", create=True)
    store.set_many([(f"k{n:04d}", "v") for n in range(300)])
    stats = store.gate.stats
    before = stats.transactions
    assert store.delete_many([f"k{n:04d}" for n in range(112)], batch_size=100) == 112
    assert stats.transactions - before == 1  # 100 + a tail of 12
    before = stats.transactions
    assert store.delete_many([f"k{n:04d}" for n in range(112, 225)], batch_size=100) == 113
    assert stats.transactions - before == 2  # 100, then 13: more than an eighth
    assert store.count() == 75
    store.close()
