"""PASSIVE WAL checkpoints after each gated commit, on a thread and connection of their own."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import quote

from triggerfish_cli.storage.sqlite.gate_stats import GateStats
from triggerfish_cli.storage.sqlite.live_writers import (
    SHM_CKPT_LOCK,
    probe_fd,
    shm_lock_holder,
    store_files,
)
from triggerfish_cli.storage.sqlite.wal_index import read_index_and_backfill
from triggerfish_cli.threads import background

#: Below this many frames in the WAL after our commit, the writers' next commits
#: cannot reach their automatic checkpoint (SQLite's default wal_autocheckpoint,
#: 1000 frames) before ours starts: it need not hold its lock before they run.
GRAB_FROM_FRAMES = 900

#: SQLite's default ``wal_autocheckpoint``: a live writer's commit that leaves the WAL
#: this long runs a checkpoint inside itself (two fsyncs) unless ours is running.
WRITER_CHECKPOINT_FRAMES = 1000
#: WAL frames the live writers may add between our commit and the next restart.
WRITER_MARGIN = 100
#: Checkpoints at most, one after the other, to catch up with a writer's last frames.
CATCH_UPS = 4


def room_needed(db: Path, frames: int) -> bool:
    """Whether a transaction of about ``frames`` WAL frames could take the WAL to
    :data:`WRITER_CHECKPOINT_FRAMES` without restarting it: the WAL is that long already,
    and not every frame of it is checkpointed (so the transaction cannot restart it)."""
    fd = probe_fd(store_files(db)[2])
    if fd is None:
        return False
    index, backfilled = read_index_and_backfill(fd)
    if index is None or index.max_frame + frames + WRITER_MARGIN < WRITER_CHECKPOINT_FRAMES:
        return False
    return backfilled < index.max_frame


class Checkpointer:
    """PASSIVE WAL checkpoints in a thread of their own, one after each commit of ours.

    PASSIVE never waits for and never blocks the gateway; run the moment the
    paused writers run again, it takes SQLite's checkpoint lock before the
    gateway's next commit would run an automatic checkpoint of our pages, and
    it keeps the WAL short. Pokes while one runs are folded into the next.
    """

    def __init__(self, db: Path, stats: GateStats | None = None) -> None:
        self.db = db
        #: Where a failed checkpoint is counted (GateStats.checkpoint_errors).
        self.stats = stats if stats is not None else GateStats()
        self.uri = f"file:{quote(os.path.realpath(db))}?mode=rw"
        self.last: tuple[int, int, int] = (0, 0, 0)
        self._wake = threading.Condition()
        self._opened = threading.Event()
        self._pending = False
        self._running = False
        self._stop = False
        self._thread = background(self._run, name="tfadmin-checkpoint")

    def poke(self) -> None:
        with self._wake:
            self._pending = True
            self._wake.notify_all()

    def start(self, timeout: float) -> None:
        """Start a checkpoint and return once it holds SQLite's checkpoint lock (or ended).

        Called while the live writers are still paused, just after our commit:
        the writer that runs first afterwards would otherwise run the automatic
        checkpoint of all our pages inside its own commit (its default
        ``wal_autocheckpoint``), which made that write take 30-40 ms. With
        ours holding the lock, theirs is skipped. Waits at most ``timeout``.
        """
        self.poke()
        me = os.getpid()
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if shm_lock_holder(self.db, SHM_CKPT_LOCK) == me or not self.active:
                return  # holding the lock, or already over
            time.sleep(0.0001)

    def make_room(self, frames: int, timeout: float) -> bool:
        """Before a transaction of ours of about ``frames`` WAL frames: if it could take the
        WAL to :data:`WRITER_CHECKPOINT_FRAMES`, checkpoint what is left first, so that it
        starts the WAL afresh; whether a checkpoint ran.

        The WAL restarts only at a write transaction that begins with every frame
        checkpointed. Our checkpoint after each commit copies our frames, but a live
        writer's commits during it leave a few more behind, and without a restart the
        WAL grows by each of our batches until every commit of the writer's runs
        SQLite's automatic checkpoint (25-35 ms each on the bench disk). Here the
        checkpoint still running ends (waited for, at most ``timeout``), then more
        copy the writer's last frames, with everyone running, until one ends with
        nothing left (a commit of the writer's during a checkpoint is not in it): at
        most :data:`CATCH_UPS`.
        """
        if not room_needed(self.db, frames):
            return False
        self.wait(timeout)
        for _ in range(CATCH_UPS):
            if not room_needed(self.db, frames):
                break
            self.poke()
            self.wait(timeout)
        return True

    def wait(self, timeout: float) -> None:
        until = time.monotonic() + timeout
        with self._wake:
            while (self._pending or self._running) and not self._stop:
                left = until - time.monotonic()
                if left <= 0:
                    return
                self._wake.wait(left)

    @property
    def active(self) -> bool:
        """A checkpoint is asked for or under way (its result not yet in :attr:`last`)."""
        with self._wake:
            return self._pending or self._running

    def ready(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until the thread has its connection open."""
        self._opened.wait(timeout)

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.uri, uri=True, isolation_level=None, timeout=0)
        except sqlite3.Error as exc:
            conn = None
            self._failed(exc)
        finally:
            self._opened.set()
        try:
            while True:
                with self._wake:
                    while not self._pending and not self._stop:
                        self._wake.wait()
                    if self._stop:
                        return
                    self._pending, self._running = False, True
                try:
                    if conn is not None:
                        row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        if row:
                            self.last = (int(row[0]), int(row[1]), int(row[2]))
                except (sqlite3.Error, MemoryError) as exc:
                    self._failed(exc)  # the next commit's checkpoint tries again
                finally:
                    with self._wake:
                        self._running = False
                        self._wake.notify_all()
        finally:
            if conn is not None:
                conn.close()

    def _failed(self, exc: Exception) -> None:
        self.stats.checkpoint_errors += 1
        self.stats.checkpoint_error = f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        self.wait(5.0)
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        self._thread.join(timeout=10)
