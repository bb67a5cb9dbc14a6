"""Stopping and resuming a store's live writers (SIGSTOP, SIGCONT) for one write of ours.

:class:`Freezer` is the process side of the write gate (:mod:`write_gate` holds the
SQLite side): it finds the live writers, stops each one and waits until every
thread of it is stopped, finds a process that opened the store since the scan,
tells whether a stopped writer holds a read snapshot, and resumes them. It
never stops a process that was not running (someone else's Ctrl-Z or
debugger), never one whose pid now belongs to another process (its start time
is checked), never us or the watchdog. Before the first stop it starts the
watchdog (:mod:`watchdog`), which resumes everything if we die or a freeze
outlasts its deadline, and each freeze holds a lock file beside the store so
that two processes of ours never freeze at the same time. In that file each
freeze records what it stops before stopping it (:mod:`gate_ledger`), for the
next run should we die with the watchdog. It never stops the foreground job of
a terminal (an operator's ``sqlite3``: its shell would take the terminal back)
nor a process that has the database open read-only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from triggerfish_cli import threads
from triggerfish_cli.errors import BusyError
from triggerfish_cli.fileio import open_lock_file
from triggerfish_cli.storage.sqlite.gate_ledger import LedgerFile, Process, lock_path
from triggerfish_cli.storage.sqlite.gate_stats import GateStats
from triggerfish_cli.storage.sqlite.live_writers import (
    GONE,
    STOPPED,
    LiveWriter,
    ProcessTable,
    live_writers,
    process_table,
    shm_readers,
    store_files,
    writer_of,
)
from triggerfish_cli.storage.sqlite.watchdog import Watchdog

HELD_SIGNALS = threads.HELD_SIGNALS


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


class Freeze:
    """One freeze: what we stopped, since when, and the cap of its transaction."""

    def __init__(self, started: float, cap: float) -> None:
        self.started = started
        self.cap_at = started + cap
        self.stopped: list[LiveWriter] = []
        #: When every writer was seen stopped: a writer inside a system call (its
        #: fsync) goes on until it returns, and was not paused before.
        self.all_stopped: float | None = None
        #: The ledger names what it stops (gate_ledger.py).
        self.recorded = False


class Freezer:
    """The live writers of one store, stopped and resumed around our writes."""

    def __init__(self, db: Path, stats: GateStats, *, deadline: float, stop_timeout: float) -> None:
        self.db = db
        self.stats = stats
        #: A freeze the watchdog ends by itself (seconds).
        self.deadline = deadline
        #: How long every thread of a stopped writer is waited for before the try is given up.
        self.stop_timeout = stop_timeout
        #: None where this system cannot stop a process (no /proc and no lsof).
        self.table: ProcessTable | None = process_table()
        self.watchdog: Watchdog | None = None
        self._lock_fd: int | None = None
        #: The pids of the last scan: a pid not among them is looked at as a late opener.
        self._known: set[int] = set()
        #: What each freeze stopped, in the lock file (gate_ledger.py); None: no lock file.
        self._ledger: LedgerFile | None = None
        self._me: Process | None = None
        #: Processes a run of ours that died had left stopped, resumed (one line each).
        self.notices: list[str] = []

    def writers(self) -> list[LiveWriter]:
        """The other processes that have the store open and may write it (a scan of /proc:
        never while frozen); one that has the database open read-only cannot."""
        if self.table is not None:
            self._known = self.table.pids()
        found = [
            writer
            for writer in live_writers(self.db, self.table)
            if (self.watchdog is None or writer.pid != self.watchdog.pid) and not writer.reads_only
        ]
        self.stats.writers.update(writer.pid for writer in found)
        return found

    def begin(self, cap: float) -> Freeze | None:
        """A new freeze holding the gate's lock file; None while another process of ours
        is freezing this store."""
        self._watchdog_ready()  # before the cap's clock starts: a start takes tens of ms
        if not self._gate_lock():
            return None
        try:
            ledger = self._ledger_file()
            if ledger is not None and self.table is not None:
                self.notices += ledger.take_over(self.table)
        except BaseException:
            self._release_gate_lock()
            raise
        return Freeze(time.monotonic(), cap)

    def stop(self, freeze: Freeze, writers: Sequence[LiveWriter]) -> bool:
        """SIGSTOP ``writers`` (registered with the watchdog first); wait for every thread."""
        assert self.table is not None
        targets = []
        for writer in writers:
            look = self.table.look(writer.pid)
            if look is None or (writer.start and look.start != writer.start):
                continue  # gone, or the pid now belongs to another process
            if look.state in STOPPED or look.state in GONE:
                continue  # gone, or stopped by someone else: theirs to resume, not ours
            if look.foreground or writer.reads_only:
                continue  # an operator's job at a terminal, or a reader: never paused
            targets.append(writer)
        if not targets:
            return True
        watchdog = self._watchdog_ready()
        processes = [(writer.pid, writer.start) for writer in (*freeze.stopped, *targets)]
        if self._ledger is not None:
            self._ledger.frozen(self._owner(), processes)
            freeze.recorded = True
        watchdog.guard(freeze.started + self.deadline, processes)
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

    def late_openers(self, writers: Sequence[LiveWriter]) -> list[LiveWriter]:
        """Processes started since the scan that have the store open (checked while frozen:
        a listing of /proc, and the descriptors of the new processes only)."""
        assert self.table is not None
        known = {writer.pid for writer in writers} | {os.getpid()}
        if self.watchdog is not None:
            known.add(self.watchdog.pid)
        candidates = self.table.pids() - self._known - known
        new = set(self.table.openers(candidates, store_files(self.db))) if candidates else set()
        if not new:
            return []
        late = [writer_of(self.table, pid, self.db) for pid in sorted(new)]
        if self.watchdog is not None:
            late = [writer for writer in late if writer.pid != self.watchdog.pid]
        if any(not writer.may_signal for writer in late):
            return []  # cannot stop it; BEGIN may still succeed, and it is refused next time
        return late

    def reading(self, freeze: Freeze) -> bool:
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

    def resume(self, freeze: Freeze) -> None:
        """SIGCONT what this freeze stopped (each pid still the process we stopped)."""
        for writer in freeze.stopped:
            table = self.table
            if writer.start and table is not None and table.start_time(writer.pid) != writer.start:
                continue
            with contextlib.suppress(OSError):
                os.kill(writer.pid, signal.SIGCONT)
        if freeze.stopped and self.watchdog is not None:
            with contextlib.suppress(OSError, ValueError):
                self.watchdog.released()
        if freeze.recorded and self._ledger is not None:
            with contextlib.suppress(OSError):
                self._ledger.thawed()

    def end(self, freeze: Freeze) -> None:
        """Resume everyone and let go of the gate's lock file."""
        self.resume(freeze)
        self._release_gate_lock()

    def watchdog_resumes(self) -> int:
        """Freezes the watchdog ended since the last call (their deadline passed)."""
        return self.watchdog.fired() if self.watchdog is not None else 0

    def _watchdog_ready(self) -> Watchdog:
        if self.watchdog is None or not self.watchdog.alive():
            if self.watchdog is not None:
                self.watchdog.close()
            try:
                self.watchdog = Watchdog()
            except OSError as exc:
                raise BusyError(
                    f"{self.db}: cannot start the write gate's watchdog ({exc}); nothing "
                    "was written",
                    hint="stop the gateway first, or --live-writers ignore",
                ) from None
        return self.watchdog

    def _ledger_file(self) -> LedgerFile | None:
        """The ledger in the lock file (None where there is none: a read-only directory)."""
        if self._ledger is None and self._lock_fd is not None:
            self._ledger = LedgerFile(self._lock_fd, lock_path(self.db))
        return self._ledger

    def _owner(self) -> Process:
        """This process, as the ledger names it (pid, start time)."""
        if self._me is None or self._me[0] != os.getpid():
            assert self.table is not None
            self._me = (os.getpid(), self.table.start_time(os.getpid()) or 0)
        return self._me

    def _gate_lock(self) -> bool:
        if self._lock_fd is None:
            try:
                self._lock_fd = open_lock_file(Path(lock_path(self.db)))  # a link: refused (exit 4)
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

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.close()
            self.watchdog = None
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None
        self._ledger = None
