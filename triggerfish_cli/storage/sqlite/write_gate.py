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
   ``rest_ratio`` times as long as it was stopped;
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
   the freeze would outlast ``cap``), COMMIT, start the PASSIVE checkpoint of
   our pages on a thread of its own and wait (a fraction of a millisecond)
   until it holds SQLite's checkpoint lock, so that the writer that runs
   first does not run that checkpoint inside its own commit; SIGCONT at once;
   then, with everyone running again, make the commit durable (fsync of the
   WAL) while the checkpoint goes on.

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
import fcntl
import os
import random
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from triggerfish_cli import threads
from triggerfish_cli.errors import BusyError, UsageError
from triggerfish_cli.storage.sqlite.live_writers import (
    GONE,
    SHM_CKPT_LOCK,
    SHM_WRITE_LOCK,
    STOPPED,
    LiveWriter,
    describe_writers,
    live_writers,
    process_table,
    shm_lock_holder,
    shm_readers,
    store_files,
    writer_of,
)
from triggerfish_cli.storage.sqlite.watchdog import Watchdog
from triggerfish_cli.threads import background

MODES = ("freeze", "refuse", "ignore")
DEFAULT_MODE = "freeze"
MODE_ENV = "TRIGGERFISH_LIVE_WRITERS"

HELD_SIGNALS = threads.HELD_SIGNALS


def check_mode(value: str, where: str = "--live-writers") -> str:
    if value not in MODES:
        raise UsageError(f"{where}: {value!r} is not one of {', '.join(MODES)}")
    return value


#: The mode the operator chose for this process (--live-writers or its
#: environment variable), which overrides a ``storage: live_writers`` setting.
_chosen: str | None = None


def choose_mode(mode: str | None) -> None:
    """Set (or, with None, forget) the operator's choice for every store this process opens."""
    global _chosen
    _chosen = None if mode is None else check_mode(mode)


def mode_for(setting: str | None) -> str:
    """The mode a store opens with: the operator's choice, else its setting, else freeze."""
    return _chosen or setting or DEFAULT_MODE


@dataclass
class GateStats:
    """What the gate did during one provider's life (for results, metrics and benches)."""

    transactions: int = 0
    #: Transactions that froze live writers.
    freezes: int = 0
    frozen_seconds: float = 0.0
    longest_freeze: float = 0.0
    #: Times a writer was met inside its own transaction (a try given up, or a wait for
    #: its write lock to be free).
    busy_retries: int = 0
    #: Tries given up because a writer did not stop in time.
    stop_timeouts: int = 0
    #: Freezes the watchdog ended (a deadline passed).
    watchdog_resumes: int = 0
    #: Transactions rolled back because they would have outlasted the cap.
    cut_short: int = 0
    #: Seconds between BEGIN and the end of COMMIT, frozen transactions only.
    held_seconds: float = 0.0
    #: --live-writers ignore: seconds we held the write lock while live writers had
    #: the store open, unpaused (their writes could fail in that window).
    exposed_seconds: float = 0.0
    #: Checkpoints after our commits that raised (the next commit's tries again),
    #: and the newest such error: a WAL that is not kept short says why here.
    checkpoint_errors: int = 0
    checkpoint_error: str | None = None
    writers: set[int] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {
            "transactions": self.transactions,
            "freezes": self.freezes,
            "frozen_seconds": round(self.frozen_seconds, 4),
            "longest_freeze_ms": round(self.longest_freeze * 1000, 1),
            "frozen_share": round(min(self.frozen_seconds / elapsed, 1.0), 4),
            "held_seconds": round(self.held_seconds, 4),
            "exposed_seconds": round(self.exposed_seconds, 4),
            "busy_retries": self.busy_retries,
            "stop_timeouts": self.stop_timeouts,
            "watchdog_resumes": self.watchdog_resumes,
            "cut_short": self.cut_short,
            "checkpoint_errors": self.checkpoint_errors,
            "checkpoint_error": self.checkpoint_error,
            "live_writers": len(self.writers),
        }


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
#: How long a freeze waits, after our commit, for our checkpoint to take its lock.
CHECKPOINT_GRAB = 0.003

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


# -- the gate ------------------------------------------------------------------------


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold back the signals that would stop or end us during a freeze (main thread, Unix).

    Two layers: the signals are blocked in this thread, and their Python
    handlers are swapped for one that only notes them (a signal the kernel
    hands to another thread of ours still runs its handler here, in the main
    thread). After the freeze the real handlers are back and each signal
    noted is raised again: Ctrl-C, Ctrl-Z and kill land with everyone running.
    """
    if not hasattr(signal, "pthread_sigmask") or (
        threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        noted.append(signum)

    handlers = {signum: signal.signal(signum, note) for signum in HELD_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        for number in dict.fromkeys(noted):
            signal.raise_signal(number)


class Checkpointer:
    """PASSIVE WAL checkpoints in a thread of their own, one after each commit of ours.

    PASSIVE never waits for and never blocks the gateway; run the moment the
    paused writers run again, it takes SQLite's checkpoint lock before the
    gateway's next commit would run an automatic checkpoint of our pages, and
    it keeps the WAL short. Pokes while one runs are folded into the next.
    """

    def __init__(self, db: Path, stats: GateStats | None = None) -> None:
        from urllib.parse import quote

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


class _Freeze:
    """One freeze: what we stopped, since when, and the cap of its transaction."""

    def __init__(self, started: float, cap: float) -> None:
        self.started = started
        self.cap_at = started + cap
        self.stopped: list[LiveWriter] = []
        #: When every writer was seen stopped: a writer inside a system call (its
        #: fsync) goes on until it returns, and was not paused before.
        self.all_stopped: float | None = None


class WriteGate:
    """Every write transaction on one SQLite store (see the module docstring)."""

    #: The freeze a caller's batch should aim at (seconds of lock per batch).
    budget: ClassVar[float] = 0.02

    def __init__(
        self,
        db: Path,
        mode: str = DEFAULT_MODE,
        *,
        busy_timeout_ms: int = 5000,
        cap: float = 0.08,
        deadline: float = 0.3,
        stop_timeout: float = 0.05,
        rest_ratio: float = 2.5,
        min_rest: float = 0.01,
        patience: float | None = None,
    ) -> None:
        self.db = db
        self.mode = check_mode(mode)
        self.busy_timeout_ms = busy_timeout_ms
        self.cap = cap
        self.deadline = deadline
        self.stop_timeout = stop_timeout
        self.rest_ratio = rest_ratio
        self.min_rest = min_rest
        self.patience = busy_timeout_ms / 1000 if patience is None else patience
        self.stats = GateStats()
        self.table = process_table()
        self._watchdog: Watchdog | None = None
        self._lock_fd: int | None = None
        self._wal_fd: int | None = None
        self._known: set[int] = set()
        self._resumed_at = 0.0
        self._last_freeze = 0.0
        self._reading_since: float | None = None  # a stopped writer seen mid-write since
        #: The last try was given up because a writer was inside its own transaction.
        self._busy = False
        #: fsync the WAL after each commit (off for idempotent bulk jobs: a sweep).
        self.durable = True
        self._checkpointer: Checkpointer | None = None
        self._wal_mode: bool | None = None
        #: Seconds the last transaction held the write lock, and whether it froze anyone.
        self.last_hold = 0.0
        self.last_frozen = False
        #: Called with each freeze's (seconds stopped, writers) for tests and benches.
        self.on_freeze: Callable[[float, int], None] | None = None

    # -- who is there ----------------------------------------------------------------

    def writers(self) -> list[LiveWriter]:
        if self.table is not None:
            self._known = self.table.pids()
        found = [
            writer
            for writer in live_writers(self.db, self.table)
            if self._watchdog is None or writer.pid != self._watchdog.pid
        ]
        self.stats.writers.update(writer.pid for writer in found)
        return found

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
        if self.table is None:
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
        self.prepare(conn)
        writers = self.writers()
        exposed = self.mode == "ignore" and bool(writers)
        if self.mode == "ignore":
            writers = []
        self.refuse_if_needed(writers)
        give_up = time.monotonic() + self.patience
        backoff = 0.002
        if writers and self._wal_mode:
            self._checkpointer_ready()
        while writers:
            self._rest()
            self._await_write_lock(give_up)
            with signals_held():
                freeze = self._freeze(conn, writers)
                if freeze is not None:
                    began = time.monotonic()
                    committed = False
                    try:
                        with self._capped(conn, freeze):
                            yield conn
                        conn.execute("COMMIT")
                        committed = True
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                    finally:
                        self.last_hold, self.last_frozen = time.monotonic() - began, True
                        self.stats.held_seconds += self.last_hold
                        if committed:
                            self._checkpoint_first()
                        self._thaw(freeze)
                    self._after_commit(conn, checkpointing=True)
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
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            self.last_hold, self.last_frozen = time.monotonic() - began, False
            if exposed:
                self.stats.exposed_seconds += self.last_hold
        self._after_commit(conn)

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
        """Let the gateway run ``rest_ratio`` times as long as our last freeze stopped it."""
        if not self._resumed_at:
            return
        rest = max(self.min_rest, self.rest_ratio * self._last_freeze)
        left = self._resumed_at + rest - time.monotonic()
        if left > 0:
            time.sleep(left)

    def _freeze(self, conn: sqlite3.Connection, writers: Sequence[LiveWriter]) -> _Freeze | None:
        """Stop ``writers`` and take the write lock; None when this try must be given up."""
        assert self.table is not None
        if shm_lock_holder(self.db, SHM_WRITE_LOCK) is not None:
            self.stats.busy_retries += 1
            self._busy = True
            return None  # a writer is inside its own transaction: let it finish first
        if not self._gate_lock():
            return None  # another process of ours is freezing right now
        freeze = _Freeze(time.monotonic(), self.cap)
        try:
            if not self._stop(freeze, writers):
                self._abandon(freeze)
                return None
            late = self._late_openers(writers)
            if late and not self._stop(freeze, late):
                self._abandon(freeze)
                return None
            if self._mid_write(freeze):
                self.stats.busy_retries += 1
                self._busy = True
                self._abandon(freeze)  # thawed: it takes its write lock, or ends its read
                return None
            conn.execute("PRAGMA busy_timeout=0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                self.stats.busy_retries += 1
                self._busy = True
                self._abandon(freeze)  # thawed: it finishes its transaction while we poll
                return None
            finally:
                conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
        except BaseException:
            self._abandon(freeze)
            raise
        return freeze

    def _mid_write(self, freeze: _Freeze) -> bool:
        """A stopped writer holds a read snapshot, and has not yet for ``READ_GRACE``."""
        if not freeze.stopped or not self._reading(freeze):
            self._reading_since = None
            return False
        now = time.monotonic()
        if self._reading_since is None:
            self._reading_since = now
        if now - self._reading_since < READ_GRACE:
            return True
        self._reading_since = None  # a reader's long snapshot: it will not write from it
        return False

    def _reading(self, freeze: _Freeze) -> bool:
        """Whether one of the stopped writers holds a read snapshot: each one's own lock
        list where it can be read (a fraction of a millisecond), else the machine's."""
        assert self.table is not None
        shm = store_files(self.db)[2]
        unknown = []
        for writer in freeze.stopped:
            holds = self.table.holds_read_mark(writer.pid, shm)
            if holds:
                return True
            if holds is None:
                unknown.append(writer.pid)
        if not unknown:
            return False
        readers = shm_readers(self.db)
        return bool(readers and readers.intersection(unknown))

    def _stop(self, freeze: _Freeze, writers: Sequence[LiveWriter]) -> bool:
        """SIGSTOP ``writers`` (registered with the watchdog first); wait for every thread."""
        assert self.table is not None
        targets = []
        for writer in writers:
            state, start = self.table.status(writer.pid)
            if writer.start and start != writer.start:
                continue  # gone, or the pid now belongs to another process
            if state is None or state in STOPPED or state in GONE:
                continue  # gone, or stopped by someone else: theirs to resume, not ours
            targets.append(writer)
        if not targets:
            return True
        watchdog = self._watchdog_ready()
        watchdog.guard(
            freeze.started + self.deadline,
            [(writer.pid, writer.start) for writer in (*freeze.stopped, *targets)],
        )
        for writer in targets:
            try:
                os.kill(writer.pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            freeze.stopped.append(writer)
        until = time.monotonic() + self.stop_timeout
        pending = [writer.pid for writer in targets]
        while pending:
            pending = [pid for pid in pending if not self.table.stopped(pid)]
            if not pending:
                break
            if time.monotonic() >= until:
                self.stats.stop_timeouts += 1
                return False
            time.sleep(0.0002)
        if freeze.all_stopped is None:
            freeze.all_stopped = time.monotonic()
        return True

    def _late_openers(self, writers: Sequence[LiveWriter]) -> list[LiveWriter]:
        """Processes started since the scan that have the store open (checked while frozen:
        a listing of /proc, and the descriptors of the new processes only)."""
        assert self.table is not None
        known = {writer.pid for writer in writers} | {os.getpid()}
        if self._watchdog is not None:
            known.add(self._watchdog.pid)
        candidates = self.table.pids() - self._known - known
        new = set(self.table.openers(candidates, store_files(self.db))) if candidates else set()
        if not new:
            return []
        late = [writer_of(self.table, pid) for pid in sorted(new)]
        if self._watchdog is not None:
            late = [writer for writer in late if writer.pid != self._watchdog.pid]
        if any(not writer.may_signal for writer in late):
            return []  # cannot stop it; BEGIN may still succeed, and it is refused next time
        return late

    def _abandon(self, freeze: _Freeze) -> None:
        self._resume(freeze)
        self._release_gate_lock()
        return None

    def _resume(self, freeze: _Freeze) -> None:
        for writer in freeze.stopped:
            table = self.table
            if writer.start and table is not None and table.start_time(writer.pid) != writer.start:
                continue
            with contextlib.suppress(OSError):
                os.kill(writer.pid, signal.SIGCONT)
        if freeze.stopped and self._watchdog is not None:
            with contextlib.suppress(OSError, ValueError):
                self._watchdog.released()

    def _thaw(self, freeze: _Freeze) -> None:
        self._resume(freeze)
        self._release_gate_lock()
        now = time.monotonic()
        # how long the gateway was paused (to within the 0.2 ms of a look at it)
        held = now - (freeze.all_stopped or freeze.started)
        self._resumed_at, self._last_freeze = now, held
        if freeze.stopped:
            self.stats.freezes += 1
            self.stats.frozen_seconds += held
            self.stats.longest_freeze = max(self.stats.longest_freeze, held)
            if self._watchdog is not None:
                self.stats.watchdog_resumes += self._watchdog.fired()
            if self.on_freeze is not None:
                self.on_freeze(held, len(freeze.stopped))

    @contextlib.contextmanager
    def _capped(self, conn: sqlite3.Connection, freeze: _Freeze) -> Iterator[None]:
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

    def prepare(self, conn: sqlite3.Connection) -> None:
        """Our writing connection: no fsync and no checkpoint inside a commit (WAL).

        Both run after the commit instead, with everyone running again
        (:meth:`_after_commit`): an automatic checkpoint inside our COMMIT made
        freezes 300-380 ms long against the real gateway (WRITE-GATE.md).
        """
        if self._wal_mode is not None:
            return
        row = conn.execute("PRAGMA journal_mode").fetchone()
        self._wal_mode = bool(row) and str(row[0]).lower() == "wal"
        if self._wal_mode:
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint=0")

    def _checkpointer_ready(self) -> None:
        """The checkpoint thread started and its connection open, before the first freeze
        (opening it inside one would outlast :data:`CHECKPOINT_GRAB`)."""
        # if not, our checkpoint may start late once: the writer's may run instead
        with contextlib.suppress(OSError, RuntimeError):
            self._checkpoints().ready(1.0)

    def _checkpoint_first(self) -> None:
        """Our commit's checkpoint, started before the paused writers run (Checkpointer.start).

        Never fails the transaction, which is committed: a checkpoint that cannot
        start now runs after the next commit."""
        if not self._wal_mode:
            return
        with contextlib.suppress(OSError, RuntimeError, sqlite3.Error):
            self._checkpoints().start(CHECKPOINT_GRAB)

    def _after_commit(self, conn: sqlite3.Connection, *, checkpointing: bool = False) -> None:
        """With everyone running again: make the commit durable, keep the WAL short.

        The checkpoint runs beside us, on a connection and thread of its own
        (:class:`Checkpointer`), while we rest or prepare the next batch.
        """
        if not self._wal_mode:
            return
        if self.durable:
            wal = self._wal()
            if wal is not None:
                with contextlib.suppress(OSError):
                    os.fsync(wal)
        if checkpointing:
            return  # started before the thaw
        self._checkpoints().poke()

    def _checkpoints(self) -> Checkpointer:
        """The checkpoint thread of this gate, started on first use."""
        if self._checkpointer is None:
            self._checkpointer = Checkpointer(self.db, self.stats)
        return self._checkpointer

    @property
    def last_checkpoint(self) -> tuple[int, int, int]:
        """The newest checkpoint's ``(busy, WAL frames, frames checkpointed)``."""
        return self._checkpointer.last if self._checkpointer is not None else (0, 0, 0)

    def settle(self, timeout: float = 5.0) -> None:
        """Wait for the checkpoint after the last commit to end."""
        if self._checkpointer is not None:
            self._checkpointer.wait(timeout)

    # -- plumbing ---------------------------------------------------------------------

    def _watchdog_ready(self) -> Watchdog:
        if self._watchdog is None or not self._watchdog.alive():
            if self._watchdog is not None:
                self._watchdog.close()
            try:
                self._watchdog = Watchdog()
            except OSError as exc:
                raise BusyError(
                    f"{self.db}: cannot start the write gate's watchdog ({exc}); nothing "
                    "was written",
                    hint="stop the gateway first, or --live-writers ignore",
                ) from None
        return self._watchdog

    def _gate_lock(self) -> bool:
        if self._lock_fd is None:
            path = os.path.realpath(self.db) + "-tfadmin-gate.lock"
            try:
                self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                return True  # a read-only directory: no other process of ours can write either
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True

    def _release_gate_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _wal(self) -> int | None:
        if self._wal_fd is None:
            # SQLite takes no POSIX lock on the WAL itself, so this descriptor may close.
            with contextlib.suppress(OSError):
                self._wal_fd = os.open(store_files(self.db)[1], os.O_RDONLY | os.O_CLOEXEC)
        return self._wal_fd

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None
        for name in ("_lock_fd", "_wal_fd"):
            fd = getattr(self, name)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, None)
