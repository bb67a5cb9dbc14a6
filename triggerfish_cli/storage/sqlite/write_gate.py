"""The write gate: no write transaction of ours ever makes a gateway write fail.

The gateway and its SQLite driver set no busy timeout: a gateway write that
meets any write lock of ours fails at once (UPSTREAM.md). So every write
transaction this tool makes on a SQLite store passes through
:meth:`WriteGate.transaction`, which keeps the store's other writers (the
*live writers*: every other process that has the file, its ``-wal`` or its
``-shm`` open) from writing while we hold the lock:

1. find the live writers (``/proc/<pid>/fd``, or ``lsof`` where there is no
   ``/proc``), outside any freeze;
2. rest, so that since our last freeze the gateway ran at least
   ``rest_ratio`` times as long as it was stopped; at the end of the rest, if
   the next transaction could take the WAL to the 1000 frames at which a
   writer's commit runs SQLite's automatic checkpoint inside itself,
   checkpoint what is left of it, so that the transaction restarts the WAL;
3. take the gate's own lock file (two processes of this tool never freeze at
   the same time), tell the watchdog what is about to be stopped, send SIGSTOP
   to each writer and wait until every one of its threads is stopped (state
   ``T``); a process that opened the store since the scan is stopped too;
4. ``BEGIN IMMEDIATE`` without waiting; busy means a writer was inside its own
   transaction: resume everyone (it must run to finish it), then poll SQLite's
   write lock every half millisecond or so, with a little random jitter and
   everyone running, and freeze again the moment it is free (no rescan in
   between: a gateway's gap between two writes can be a few milliseconds);
5. run the caller's statements (a SQLite progress handler rolls them back if
   the freeze would outlast ``cap``), COMMIT; if the WAL is now long enough for
   a writer's next commit to run its automatic checkpoint, start the PASSIVE
   checkpoint of our pages on a thread of its own and wait until it holds
   SQLite's checkpoint lock, so that the writer does not run it inside its
   commit; SIGCONT at once; then, with everyone running, fsync the WAL and
   start the checkpoint (if not yet started).

Stopping and resuming the writers is :mod:`freezer`'s work; the WAL around
each transaction :mod:`wal_upkeep`'s (its checkpoints :mod:`checkpointer`'s);
the modes :mod:`gate_modes`'.

The watchdog (:mod:`triggerfish_cli.storage.sqlite.watchdog`) is a process of its own,
in its own session, started before the first freeze: it resumes every frozen
process the moment we die for any reason (kill -9 included) and whenever a
freeze outlasts ``deadline``. SIGINT, SIGTERM, SIGTSTP, SIGHUP and SIGQUIT are
held back during a freeze, so Ctrl-C or Ctrl-Z land after SIGCONT.

Signal hygiene: a pid is signalled only while its start time is the one the
scan saw (a reused pid is not the gateway); a process already stopped by
someone else (Ctrl-Z, a debugger) is left alone, never resumed by us; we never
stop ourselves or the watchdog.

Modes (``--live-writers``, ``TRIGGERFISH_LIVE_WRITERS``, ``storage:
live_writers``): ``freeze`` (the default), ``refuse`` (exit 6 naming each live
writer) and ``ignore`` (no gate: the gateway's writes may fail). Live writers we
may not signal (another user, another PID namespace: found through the lock
SQLite's connections hold on the ``-shm`` file) are refused under ``freeze``
too. Nothing here applies to Postgres or S3, which have real concurrency
control.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import ClassVar, TypeVar

from triggerfish_cli.errors import BusyError
from triggerfish_cli.storage.sqlite.freezer import Freeze, Freezer, signals_held
from triggerfish_cli.storage.sqlite.gate_modes import DEFAULT_MODE, check_mode
from triggerfish_cli.storage.sqlite.gate_stats import GateStats
from triggerfish_cli.storage.sqlite.live_writers import (
    SHM_WRITE_LOCK,
    LiveWriter,
    describe_writers,
    shm_lock_holder,
)
from triggerfish_cli.storage.sqlite.wal_index import frames_between
from triggerfish_cli.storage.sqlite.wal_upkeep import WalUpkeep


class FreezeTooLong(BusyError):
    """The transaction would have kept the gateway stopped longer than the gate allows."""


#: Seconds between two looks at the write lock while a live writer is inside its own
#: transaction (plus a random jitter of up to as much again).
POLL = 0.0005

#: How long a stopped writer holding a read snapshot is waited for (thawed, polled)
#: before we write anyway. An autocommitted write takes its snapshot, then the
#: write lock, microseconds apart: a writer stopped in between would find our
#: commit past its snapshot and fail at once (SQLITE_BUSY_SNAPSHOT, no busy
#: timeout), so it is let run on first. A snapshot held longer is a reader's
#: (a backup, a search): it never writes from it, and is not waited for.
READ_GRACE = 0.05
#: How often one transaction gives a freeze up because a writer's commit fell between
#: making room in the WAL and the freeze (the room is made again, then it goes on).
ROOM_TRIES = 2

#: How long a freeze may last before the watchdog ends it by itself (seconds).
DEADLINE = 0.3

#: How often a transaction cut short is tried again before giving up: a cut is
#: usually a hiccup (our process descheduled on a loaded machine), not its size.
ATTEMPTS = 3
T = TypeVar("T")


def retried(work: Callable[[], T], attempts: int = ATTEMPTS) -> T:
    """``work()`` (one gated transaction), again when the gate cut it short (rolled back)."""
    for attempt in range(attempts):
        try:
            return work()
        except FreezeTooLong:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


class WriteGate:
    """Every write transaction on one SQLite store (see the module docstring)."""

    #: The freeze a caller's batch should aim at (seconds of lock per batch).
    budget: ClassVar[float] = 0.02
    #: The most WAL frames a caller's batch should write while live writers are paused.
    #: A live writer's commit runs SQLite's automatic checkpoint inside itself (two
    #: fsyncs, 25-35 ms on the bench disk) whenever the WAL holds 1000 frames or more
    #: (the default ``wal_autocheckpoint``) and our checkpoint is not running: a batch
    #: that alone writes near 1000 frames leaves the WAL there for the writer's next
    #: commits. Deleting scattered rows writes about one frame per row.
    frame_budget: ClassVar[int] = 800

    def __init__(
        self,
        db: Path,
        mode: str = DEFAULT_MODE,
        *,
        busy_timeout_ms: int = 5000,
        cap: float = 0.08,
        deadline: float | None = None,
        stop_timeout: float = 0.05,
        rest_ratio: float = 2.5,
        min_rest: float = 0.01,
        patience: float | None = None,
    ) -> None:
        self.db = db
        self.mode = check_mode(mode)
        self.busy_timeout_ms = busy_timeout_ms
        self.cap = cap
        self.deadline = DEADLINE if deadline is None else deadline
        self.stop_timeout = stop_timeout
        self.rest_ratio = rest_ratio
        self.min_rest = min_rest
        self.patience = busy_timeout_ms / 1000 if patience is None else patience
        self.stats = GateStats()
        #: Who has the store open, and the stopping and resuming of them.
        self.freezer = Freezer(db, self.stats, deadline=self.deadline, stop_timeout=stop_timeout)
        #: Our side of the WAL around each transaction: short, restarted, checkpointed.
        self.wal = WalUpkeep(db, self.stats)
        self._resumed_at = 0.0
        self._last_freeze = 0.0
        self._reading_since: float | None = None  # a stopped writer seen mid-write since
        #: The last try was given up because a writer was inside its own transaction.
        self._busy = False
        #: Freezes this transaction gave up for want of room in the WAL (ROOM_TRIES).
        self._room_tries = 0
        self.last_frames = -1  #: WAL frames our last transaction wrote (-1: unknown)
        #: Seconds the last transaction held the write lock, and whether it froze anyone.
        self.last_hold = 0.0
        self.last_frozen = False
        #: Running totals over every transaction, for a caller whose one batch spans
        #: several (seconds holding the lock; WAL frames, where they were known).
        self.total_hold = 0.0
        self.total_frames = 0
        #: Called with each freeze's (seconds stopped, writers) for tests and benches.
        self.on_freeze: Callable[[float, int], None] | None = None

    # -- who is there ----------------------------------------------------------------

    def writers(self) -> list[LiveWriter]:
        return self.freezer.writers()

    def will_freeze(self) -> bool:
        """Whether a write now would pause someone (for sizing a job's first batch)."""
        return self.mode != "ignore" and bool(self.writers())

    def refuse_if_needed(self, writers: Sequence[LiveWriter]) -> None:
        if not writers or self.mode == "ignore":
            return
        if self.mode == "refuse":
            raise BusyError(
                f"{self.db}: live writers have the store open: {describe_writers(writers)}",
                hint="stop the gateway first, or --live-writers freeze to stop it for each "
                "short write (the default)",
            )
        blocked = [writer for writer in writers if not writer.may_signal]
        if blocked:
            why = blocked[0].why_not or "we may not signal it"
            raise BusyError(
                f"{self.db}: a live writer we cannot pause has the store open: "
                f"{describe_writers(blocked)} ({why}); nothing was written",
                hint="run triggerfish-admin where the gateway runs, as its user, "
                "or stop the gateway first",
            )
        if self.freezer.table is None:
            raise BusyError(
                f"{self.db}: the store is open by another process, and this system cannot "
                "pause it; nothing was written",
                hint="stop the gateway first",
            )

    # -- the transaction -------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` with every live writer stopped meanwhile."""
        self.stats.transactions += 1
        self._busy = False
        self._reading_since = None
        self._room_tries = 0
        self.prepare(conn)
        writers = self.writers()
        exposed = self.mode == "ignore" and bool(writers)
        if self.mode == "ignore":
            writers = []
        self.refuse_if_needed(writers)
        give_up = time.monotonic() + self.patience
        backoff = 0.002
        if writers:
            self.wal.ready()
        while writers:
            self._rest()
            self._await_write_lock(give_up)
            with signals_held():
                freeze = self._freeze(conn, writers)
                if freeze is not None:
                    began = time.monotonic()
                    committed = started = False
                    mark, self.last_frames = self.wal.end(), -1
                    try:
                        with self._capped(conn, freeze):
                            yield conn
                        conn.execute("COMMIT")
                        end = self.wal.end()  # everyone else is stopped: every frame is ours
                        committed = True
                        self.last_frames = frames_between(mark, end)
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                    finally:
                        self._held(time.monotonic() - began, frozen=True)
                        self.stats.held_seconds += self.last_hold
                        if committed:
                            started = self.wal.checkpoint_first(end)
                        self._thaw(freeze)
                    self.wal.after_commit(checkpoint_started=started)
                    return
            if time.monotonic() >= give_up:
                raise BusyError(
                    f"{self.db}: no moment between the live writers' own transactions in "
                    f"{self.patience:g} s ({describe_writers(writers)}); nothing was written",
                    hint="retry later, or raise storage.busy_timeout_ms",
                )
            if self._busy:
                continue  # a writer inside its own transaction, running again: poll its lock
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.05)
            writers = self.writers()
            self.refuse_if_needed(writers)
        # Nobody to pause (or the gate is off): a plain transaction, our busy timeout applies.
        conn.execute("BEGIN IMMEDIATE")
        began = time.monotonic()
        mark, self.last_frames = self.wal.end(), -1
        try:
            yield conn
            conn.execute("COMMIT")
            # the lock was ours (a commit right after ours may add a frame or two)
            self.last_frames = frames_between(mark, self.wal.end())
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            self._held(time.monotonic() - began, frozen=False)
            if exposed:
                self.stats.exposed_seconds += self.last_hold
        self.wal.after_commit()

    def _held(self, seconds: float, *, frozen: bool) -> None:
        self.last_hold, self.last_frozen = seconds, frozen
        self.total_hold += seconds
        self.total_frames += max(self.last_frames, 0)

    def _await_write_lock(self, until: float) -> None:
        """Poll SQLite's write lock (the -shm's WRITER byte), everyone running, until it is free.

        A live writer inside its own transaction must run to finish it, so
        nobody is stopped meanwhile; the poll is a lock query (no lock taken,
        nothing the gateway could meet), every ``POLL`` seconds plus a random
        jitter of up to as much again, until ``until``. Where the lock cannot
        be seen (no -shm, no OFD locks), ``BEGIN IMMEDIATE`` is the probe:
        :meth:`_freeze` gives the try up when it is busy and the caller comes
        back here after the same short pause.
        """
        if self._busy:
            self._busy = False
            time.sleep(POLL + random.uniform(0, POLL))
        if shm_lock_holder(self.db, SHM_WRITE_LOCK) is None:
            return
        self.stats.busy_retries += 1
        while time.monotonic() < until:
            time.sleep(POLL + random.uniform(0, POLL))
            if shm_lock_holder(self.db, SHM_WRITE_LOCK) is None:
                return

    def _rest(self) -> None:
        """Let the gateway run ``rest_ratio`` times as long as our last freeze stopped it;
        the WAL is made room in at the end of the rest (WalUpkeep.rest_until)."""
        end = time.monotonic()
        if self._resumed_at:
            end = self._resumed_at + max(self.min_rest, self.rest_ratio * self._last_freeze)
        self.wal.rest_until(end, self.frame_budget)

    def _freeze(self, conn: sqlite3.Connection, writers: Sequence[LiveWriter]) -> Freeze | None:
        """Stop ``writers`` and take the write lock; None when this try must be given up."""
        freezer = self.freezer
        if shm_lock_holder(self.db, SHM_WRITE_LOCK) is not None:
            self.stats.busy_retries += 1
            self._busy = True
            return None  # a writer is inside its own transaction: let it finish first
        freeze = freezer.begin(self.cap)
        if freeze is None:
            return None  # another process of ours is freezing right now
        try:
            if not freezer.stop(freeze, writers):
                freezer.end(freeze)
                return None
            late = freezer.late_openers(writers)
            if late and not freezer.stop(freeze, late):
                freezer.end(freeze)
                return None
            if self._mid_write(freeze):
                self.stats.busy_retries += 1
                self._busy = True
                freezer.end(freeze)  # thawed: it takes its write lock, or ends its read
                return None
            if self._room_tries < ROOM_TRIES and self.wal.needs_room(self.frame_budget):
                self._room_tries += 1  # a writer committed since the room was made:
                self.stats.room_retries += 1  # thawed, room made again (WalUpkeep.rest_until)
                self._busy = True  # and tried again at once, as for a writer's own write
                freezer.end(freeze)
                return None
            conn.execute("PRAGMA busy_timeout=0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                self.stats.busy_retries += 1
                self._busy = True
                freezer.end(freeze)  # thawed: it finishes its transaction while we poll
                return None
            finally:
                conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
        except BaseException:
            freezer.end(freeze)
            raise
        return freeze

    def _mid_write(self, freeze: Freeze) -> bool:
        """A stopped writer holds a read snapshot, and has not yet for ``READ_GRACE``."""
        if not freeze.stopped or not self.freezer.reading(freeze):
            self._reading_since = None
            return False
        now = time.monotonic()
        if self._reading_since is None:
            self._reading_since = now
        if now - self._reading_since < READ_GRACE:
            return True
        self._reading_since = None  # a reader's long snapshot: it will not write from it
        return False

    def _thaw(self, freeze: Freeze) -> None:
        self.freezer.end(freeze)
        now = time.monotonic()
        # how long the gateway was paused (to within the 0.2 ms of a look at it)
        held = now - (freeze.all_stopped or freeze.started)
        self._resumed_at, self._last_freeze = now, held
        if freeze.stopped:
            self.stats.freezes += 1
            self.stats.frozen_seconds += held
            self.stats.longest_freeze = max(self.stats.longest_freeze, held)
            self.stats.watchdog_resumes += self.freezer.watchdog_resumes()
            if self.on_freeze is not None:
                self.on_freeze(held, len(freeze.stopped))

    @contextlib.contextmanager
    def _capped(self, conn: sqlite3.Connection, freeze: Freeze) -> Iterator[None]:
        """Interrupt the statements (rolled back) when the freeze reaches its cap."""
        cut = [False]

        def check() -> int:
            if time.monotonic() >= freeze.cap_at:
                cut[0] = True
                return 1
            return 0

        conn.set_progress_handler(check, 2000)
        try:
            yield
            if time.monotonic() >= freeze.cap_at:
                cut[0] = True  # the last statement ended past the cap: give it all back
                raise sqlite3.OperationalError("interrupted")
        except sqlite3.OperationalError as exc:
            if cut[0] and "interrupt" in str(exc):
                self.stats.cut_short += 1
                raise FreezeTooLong(
                    f"{self.db}: this write needs the lock for longer than the live writers "
                    f"may be paused ({self.cap * 1000:.0f} ms); it was rolled back, nothing "
                    "was written",
                    hint="stop the gateway first, or --live-writers ignore to write anyway "
                    "(the gateway's writes may fail meanwhile)",
                ) from None
            raise
        finally:
            conn.set_progress_handler(None, 0)

    # -- the WAL (wal_upkeep.py) --------------------------------------------------------

    def prepare(self, conn: sqlite3.Connection) -> None:
        self.wal.prepare(conn)

    @property
    def durable(self) -> bool:
        """fsync the WAL after each commit (off for idempotent bulk jobs: a sweep)."""
        return self.wal.durable

    @durable.setter
    def durable(self, value: bool) -> None:
        self.wal.durable = value

    @property
    def last_checkpoint(self) -> tuple[int, int, int]:
        """The newest checkpoint's ``(busy, WAL frames, frames checkpointed)``."""
        return self.wal.last_checkpoint

    def settle(self, timeout: float = 5.0) -> None:
        """Wait for the checkpoint after the last commit to end."""
        self.wal.settle(timeout)

    def close(self) -> None:
        self.wal.close()
        self.freezer.close()
