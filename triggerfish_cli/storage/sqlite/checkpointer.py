"""PASSIVE WAL checkpoints after each gated commit, on a thread and connection of their own."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import quote

from triggerfish_cli.storage.sqlite.gate_stats import GateStats
from triggerfish_cli.storage.sqlite.live_writers import SHM_CKPT_LOCK, shm_lock_holder
from triggerfish_cli.threads import background

#: Below this many frames in the WAL after our commit, the writers' next commits
#: cannot reach their automatic checkpoint (SQLite's default wal_autocheckpoint,
#: 1000 frames) before ours starts: it need not hold its lock before they run.
GRAB_FROM_FRAMES = 900


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
                except sqlite3.Error as exc:
                    self._failed(exc)  # the next commit's checkpoint tries again
                finally:
                    with self._wake:
                        self._running = False
                        self._wake.notify_all()
        finally:
            if conn is not None:
                conn.close()

    def _failed(self, exc: sqlite3.Error) -> None:
        self.stats.checkpoint_errors += 1
        self.stats.checkpoint_error = f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        self.wait(5.0)
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        self._thread.join(timeout=10)
