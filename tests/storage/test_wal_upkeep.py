"""The WAL around gated transactions (storage/sqlite/wal_upkeep.py, checkpointer.py).

A live writer's commit runs SQLite's automatic checkpoint inside itself (two
fsyncs: 25-35 ms on the bench disk) whenever the WAL holds 1000 frames or
more. The WAL only restarts at a write transaction that begins with every
frame checkpointed, so the gate checkpoints the writers' last frames just
before a transaction that could take the WAL that far.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import time
from pathlib import Path

import pytest

from tests.helpers import gateway_writer
from triggerfish_cli.storage.sqlite import wal_upkeep, write_gate
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.checkpointer import WRITER_CHECKPOINT_FRAMES, Checkpointer
from triggerfish_cli.storage.sqlite.freezer import Freeze
from triggerfish_cli.storage.sqlite.wal_index import read_index_and_backfill, wal_mark
from triggerfish_cli.storage.sqlite.wal_upkeep import WalUpkeep
from triggerfish_cli.storage.sqlite.write_gate import WriteGate


def wal_state(db: Path) -> tuple[int, int]:
    """(frames in the WAL, frames checkpointed), from the -shm header."""
    fd = os.open(str(db) + "-shm", os.O_RDONLY)
    try:
        index, backfilled = read_index_and_backfill(fd)
    finally:
        os.close(fd)
    assert index is not None
    return index.max_frame, backfilled


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "wal.db"
    SqliteStorage(path, create=True).close()
    return path


def other_connection(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None, timeout=0)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    return conn


def test_make_room_checkpoints_what_a_writer_left_so_the_next_write_restarts_the_wal(
    db: Path,
) -> None:
    ours, theirs, reader = other_connection(db), other_connection(db), other_connection(db)
    ours.execute("INSERT INTO kv VALUES ('big', ?)", ("x" * 2_800_000,))  # ~700 frames
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM kv").fetchone()  # a snapshot: up to here only
    theirs.execute("INSERT INTO kv VALUES ('theirs', '1')")
    ours.execute("PRAGMA wal_checkpoint(PASSIVE)")  # as our checkpoint, during theirs
    reader.execute("COMMIT")
    frames, backfilled = wal_state(db)
    assert frames > 600 and backfilled < frames  # not restartable: a frame left over
    salt = wal_mark(db)
    checkpointer = Checkpointer(db)
    try:
        # room for a 100-frame write: nothing to do (the WAL stays under 1000 frames)
        assert not checkpointer.make_room(100, 5.0)
        assert wal_state(db)[1] < frames
        # a 300-frame write could take it past: what is left is checkpointed first
        assert checkpointer.make_room(300, 5.0)
        assert wal_state(db) == (frames, frames)
    finally:
        checkpointer.close()
    ours.execute("INSERT INTO kv VALUES ('next', '2')")
    restarted = wal_mark(db)
    assert restarted is not None and salt is not None
    assert restarted[1] != salt[1] and restarted[0] < 10  # the WAL began afresh
    for conn in (ours, theirs, reader):
        conn.close()


def after_our_commits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bytes]]:
    """(frames, salt) of the WAL right after each commit of ours, read while the live
    writers are still paused: exactly where our commit left it (no thread sampling it
    every half millisecond, which a loaded machine may not run in time)."""
    marks: list[tuple[int, bytes]] = []
    thaw = WriteGate._thaw

    def look(self: WriteGate, freeze: Freeze) -> None:
        mark = wal_mark(self.db)
        assert mark is not None
        marks.append(mark)
        thaw(self, freeze)

    monkeypatch.setattr(WriteGate, "_thaw", look)
    return marks


@pytest.mark.parametrize("room", [True, False])
def test_gated_writes_keep_the_wal_under_the_writers_checkpoint(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, room: bool
) -> None:
    """Batches of ~600 frames beside a writer (no busy timeout): with room made before
    each, the WAL never reaches the 1000 frames at which the writer's commits would
    checkpoint inside themselves; without, it does (what the test guards against).

    The WAL grows only at commits: its longest is the most frames seen right after one,
    ours (read before the thaw) or the writer's (read by the writer itself). The making
    of room waits as long as it takes here (its time limits, which a loaded machine
    can outlast, are the gate's choice of when to give up, not what this test is about).
    """
    if room:
        monkeypatch.setattr(wal_upkeep, "MAKE_ROOM_WAIT", 60.0)
        monkeypatch.setattr(write_gate, "ROOM_TRIES", 1000)
    else:
        monkeypatch.setattr(Checkpointer, "make_room", lambda self, frames, timeout: False)
        monkeypatch.setattr(WalUpkeep, "needs_room", lambda self, frames: False)
    ours = after_our_commits(monkeypatch)
    store = SqliteStorage(db)
    store.gate.cap, store.gate.freezer.deadline = 3600.0, 3600.0  # no stall cuts a batch
    store.gate.patience = 3600.0
    value = "y" * 2_400_000  # ~600 frames a commit
    hang = time.monotonic() + 120  # a guard against a hang, not a measure
    with gateway_writer.running(db, tmp_path, period=0.005):
        n = 0
        # with room: 12 batches; without: until the WAL reached the writer's checkpoint
        while n < 12 if room else max(ours, default=(0, b""))[0] < WRITER_CHECKPOINT_FRAMES:
            assert time.monotonic() < hang, ours
            store.set(f"ours:{n % 2}", value + str(n))
            n += 1
        store.gate.settle()
    stats = store.gate.stats
    store.close()
    report = gateway_writer.report(tmp_path)
    assert report.fail == 0 and stats.freezes >= n == len(ours)
    longest = max(max(frames for frames, _ in ours), report.peak_frames)
    restarts = sum(1 for a, b in itertools.pairwise(ours) if a[1] != b[1])
    if room:
        assert longest < WRITER_CHECKPOINT_FRAMES, (longest, ours)
        assert restarts >= 10  # the WAL began afresh before (nearly) every batch
    else:
        assert longest >= WRITER_CHECKPOINT_FRAMES, (longest, restarts)
