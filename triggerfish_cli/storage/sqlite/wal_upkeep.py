"""Our side of the WAL around each gated transaction: short, restarted, checkpointed.

The write gate (:mod:`write_gate`) stops the live writers for each transaction
of ours; this keeps what the WAL does around those transactions from costing
them anything:

- our writing connection never syncs or checkpoints inside a commit
  (:meth:`WalUpkeep.prepare`): both run after the thaw, with everyone running;
- before a transaction that could take the WAL to the 1000 frames at which a
  live writer's commit runs SQLite's automatic checkpoint inside itself, what
  is left of it is checkpointed (:meth:`WalUpkeep.rest_until`, at the end of
  the gate's rest), so the transaction starts the WAL afresh;
- after each commit a PASSIVE checkpoint runs on a thread of its own
  (:class:`~triggerfish_cli.storage.sqlite.checkpointer.Checkpointer`), and
  where the WAL is long it holds SQLite's checkpoint lock before the writers
  run again (:meth:`WalUpkeep.checkpoint_first`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

from triggerfish_cli.storage.sqlite.checkpointer import (
    GRAB_FROM_FRAMES,
    Checkpointer,
    room_needed,
)
from triggerfish_cli.storage.sqlite.gate_stats import GateStats
from triggerfish_cli.storage.sqlite.live_writers import store_files
from triggerfish_cli.storage.sqlite.wal_index import wal_mark

#: How long a freeze waits, after our commit, for our checkpoint to take its lock.
CHECKPOINT_GRAB = 0.003
#: How long making room in the WAL waits for a checkpoint, at most (seconds).
MAKE_ROOM_WAIT = 0.05


class WalUpkeep:
    """The WAL work around one store's gated transactions (see the module docstring)."""

    def __init__(self, db: Path, stats: GateStats) -> None:
        self.db = db
        self.stats = stats
        #: fsync the WAL after each commit (off for idempotent bulk jobs: a sweep).
        self.durable = True
        #: Whether the store is in WAL mode (None: not yet looked at).
        self.wal_mode: bool | None = None
        self.checkpointer: Checkpointer | None = None
        self._wal_fd: int | None = None
        self._room_time = 0.0  # how long making room in the WAL takes (smoothed)

    def prepare(self, conn: sqlite3.Connection) -> None:
        """Our writing connection: no fsync and no checkpoint inside a commit (WAL).

        Both run after the commit instead, with everyone running again
        (:meth:`after_commit`): an automatic checkpoint inside our COMMIT made
        freezes 300-380 ms long against the real gateway (WRITE-GATE.md).
        """
        if self.wal_mode is not None:
            return
        row = conn.execute("PRAGMA journal_mode").fetchone()
        self.wal_mode = bool(row) and str(row[0]).lower() == "wal"
        if self.wal_mode:
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint=0")

    def ready(self) -> None:
        """The checkpoint thread started and its connection open, before the first freeze
        (opening it inside one would outlast :data:`CHECKPOINT_GRAB`)."""
        if not self.wal_mode:
            return
        # if not, our checkpoint may start late once: the writer's may run instead
        with contextlib.suppress(OSError, RuntimeError):
            self.checkpoints().ready(1.0)

    def rest_until(self, end: float, frames: int) -> None:
        """Sleep until ``end`` (the end of the gate's rest), making room in the WAL for a
        transaction of about ``frames`` frames (Checkpointer.make_room) just before it.

        Just before, because a commit of the writers' between that checkpoint and
        our transaction leaves the WAL unrestartable again: the checkpoint starts
        about its own (smoothed) duration before ``end``, and the freeze follows
        it. Meanwhile the checkpoint of our last commit ends.
        """
        checkpoints = self.checkpoints() if self.wal_mode else None
        if checkpoints is not None:
            checkpoints.wait(end - self._room_time - time.monotonic())
        left = end - self._room_time - time.monotonic()
        if left > 0:
            time.sleep(left)
        if checkpoints is not None:
            began = time.monotonic()
            if checkpoints.make_room(frames, MAKE_ROOM_WAIT):
                self._room_time = 0.7 * self._room_time + 0.3 * (time.monotonic() - began)

    def needs_room(self, frames: int) -> bool:
        """Whether a transaction of about ``frames`` frames, begun now, could take the WAL
        to the writers' automatic checkpoint (checkpointer.room_needed): a writer's commit
        fell after the room was made. Read from the -shm header (microseconds)."""
        return bool(self.wal_mode) and room_needed(self.db, frames)

    def end(self) -> tuple[int, bytes] | None:
        """Where the WAL ends now (wal_index.wal_mark); None: not in WAL mode, or unknown."""
        return wal_mark(self.db) if self.wal_mode else None

    def checkpoint_first(self, end: tuple[int, bytes] | None) -> bool:
        """Our commit's checkpoint, started before the paused writers run (Checkpointer.start),
        when the WAL (ending at ``end``) is long enough that their next commits could run
        it instead; whether it was started.

        A short WAL (under GRAB_FROM_FRAMES) needs no such race: the checkpoint starts
        after the thaw (:meth:`after_commit`), and the freeze is 0.5-3 ms shorter.
        Never fails the transaction, which is committed: a checkpoint that cannot
        start now runs after the next commit."""
        if not self.wal_mode or (end is not None and end[0] < GRAB_FROM_FRAMES):
            return False
        with contextlib.suppress(OSError, RuntimeError, sqlite3.Error):
            self.checkpoints().start(CHECKPOINT_GRAB)
        return True

    def after_commit(self, *, checkpoint_started: bool = False) -> None:
        """With everyone running again: make the commit durable, keep the WAL short.

        The checkpoint runs beside us, on a connection and thread of its own
        (:class:`Checkpointer`), while we rest or prepare the next batch.
        """
        if not self.wal_mode:
            return
        if self.durable:
            wal = self._wal()
            if wal is not None:
                with contextlib.suppress(OSError):
                    os.fsync(wal)
        if checkpoint_started:
            return  # before the thaw
        # Never fails the commit, which is done: a checkpoint thread that cannot start
        # (out of memory or threads) is tried again after the next commit.
        with contextlib.suppress(OSError, RuntimeError, MemoryError, sqlite3.Error):
            self.checkpoints().poke()

    def checkpoints(self) -> Checkpointer:
        """The checkpoint thread of this store, started on first use."""
        if self.checkpointer is None:
            self.checkpointer = Checkpointer(self.db, self.stats)
        return self.checkpointer

    @property
    def last_checkpoint(self) -> tuple[int, int, int]:
        """The newest checkpoint's ``(busy, WAL frames, frames checkpointed)``."""
        return self.checkpointer.last if self.checkpointer is not None else (0, 0, 0)

    def settle(self, timeout: float = 5.0) -> None:
        """Wait for the checkpoint after the last commit to end."""
        if self.checkpointer is not None:
            self.checkpointer.wait(timeout)

    def _wal(self) -> int | None:
        if self._wal_fd is None:
            # SQLite takes no POSIX lock on the WAL itself, so this descriptor may close.
            with contextlib.suppress(OSError):
                self._wal_fd = os.open(store_files(self.db)[1], os.O_RDONLY | os.O_CLOEXEC)
        return self._wal_fd

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
            self.checkpointer = None
        if self._wal_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._wal_fd)
            self._wal_fd = None
