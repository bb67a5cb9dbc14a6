"""The write gate's ledger: which processes a freeze of ours stopped, for the next run.

A run of ours killed together with its watchdog (``kill -9`` of both, or
``systemctl kill`` of a cron job's cgroup) would leave the writers it had
stopped stopped for good, looking like someone's Ctrl-Z. So before its first
SIGSTOP a freeze records what it is about to stop, in the gate's lock file
beside the store (``<store>-tfadmin-gate.lock``, which each freeze holds an
``flock`` on), one line::

    F tfadmin-gate/1 boot=<boot id> owner=<pid>:<start> stopped=<pid>:<start>,...

and marks it resumed (first byte ``-``) once it has sent SIGCONT. The line is
rewritten only when what it says changes; otherwise a freeze writes one byte
before and one after, without fsync (a machine that crashes resumes
everything anyway). Start times are ``/proc/<pid>/stat`` field 22.

Holding the lock (so that no live run of ours is freezing), the next run of
any command that opens the store (:func:`recover`), and each freeze of a run
already going (:meth:`LedgerFile.take_over`), resume each process an ``F`` line
names whose owner is gone (its pid gone, or its start time another), when
that process is still stopped and still the same process. A process the line
does not name is never resumed: someone's Ctrl-Z, a debugger.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from triggerfish_cli.errors import RefusedError, write_error
from triggerfish_cli.storage.sqlite.live_writers import GONE, ProcessTable, process_table

#: The gate's lock file, beside the store; the ledger is its content.
SUFFIX = "-tfadmin-gate.lock"
MAGIC = "tfadmin-gate/1"
READ_SIZE = 4096
#: (pid, start time)
Process = tuple[int, int]
_BOOT: list[str] = []


def lock_path(db: Path) -> str:
    return os.path.realpath(db) + SUFFIX


def boot_id() -> str:
    """This boot's id (Linux): start times count from boot, so a ledger of another boot
    names no process of this one. Empty elsewhere (``ps`` start dates hold the year)."""
    if not _BOOT:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
                _BOOT.append(handle.read().strip())
        except OSError:
            _BOOT.append("")
    return _BOOT[0]


@dataclass(frozen=True)
class Ledger:
    #: A freeze may have them stopped right now (``F``); ``-``: resumed.
    frozen: bool
    boot: str
    owner: Process
    stopped: tuple[Process, ...]

    def line(self) -> bytes:
        stopped = ",".join(f"{pid}:{start}" for pid, start in self.stopped)
        owner = f"{self.owner[0]}:{self.owner[1]}"
        mark = "F" if self.frozen else "-"
        return f"{mark} {MAGIC} boot={self.boot} owner={owner} stopped={stopped}\n".encode()

    @classmethod
    def parse(cls, data: bytes) -> Ledger | None:
        """The first line of ``data`` (a longer line written before may follow it)."""
        first, newline, _ = data.partition(b"\n")
        words = first.decode("ascii", "replace").split(" ")
        if not newline or len(words) != 5 or words[0] not in "F-" or words[1] != MAGIC:
            return None
        fields = dict(word.partition("=")[::2] for word in words[2:])
        try:
            owner = _process(fields["owner"])
            stopped = tuple(_process(item) for item in fields["stopped"].split(",") if item)
        except (KeyError, ValueError):
            return None
        return cls(words[0] == "F", fields.get("boot", ""), owner, stopped)


def _process(text: str) -> Process:
    pid, _, start = text.partition(":")
    return int(pid), int(start)


def _gone(owner: Process, table: ProcessTable) -> bool:
    look = table.look(owner[0])
    return look is None or look.start != owner[1] or look.state in GONE


def left_by_the_dead(ledger: Ledger | None, table: ProcessTable) -> bool:
    """The ledger of a freeze whose run is gone (it may have left processes stopped)."""
    if ledger is None or not ledger.frozen or ledger.boot != boot_id():
        return False
    return _gone(ledger.owner, table)  # not a live run of ours: its watchdog answers for it


def resume_leftovers(ledger: Ledger, table: ProcessTable) -> list[str]:
    """SIGCONT what the dead run ``ledger`` names left stopped (lock held); one notice each."""
    notices = []
    for pid, start in ledger.stopped:
        look = table.look(pid)
        if look is None or look.start != start or look.state != "T":
            continue  # running again (its watchdog), gone, another process, or traced
        command, _, user = table.describe(pid)
        who = f"pid {pid} ({user}: {command[:300]}) left stopped by an earlier run of "
        try:
            os.kill(pid, signal.SIGCONT)
        except PermissionError:
            notices.append(
                f"{who}triggerfish-admin that died; we may not resume it: kill -CONT {pid}"
            )
            continue
        except ProcessLookupError:
            continue
        notices.append(f"{who}triggerfish-admin that died; resumed")
    return notices


class LedgerFile:
    """The ledger in the gate's lock file ``fd`` (held by a :class:`Freezer` during each
    freeze), written only while that lock is held."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path
        #: The line last written, while nobody else wrote since (at each take_over).
        self._written: bytes | None = None
        _refuse_links(fd, path)

    def take_over(self, table: ProcessTable) -> list[str]:
        """At the start of each freeze: resume what a dead run left stopped."""
        try:
            data = os.pread(self.fd, READ_SIZE, 0)
        except OSError:
            data = b""
        if self._written is None or data[1 : len(self._written)] != self._written[1:]:
            self._written = None
        ledger = Ledger.parse(data)
        if ledger is None or not left_by_the_dead(ledger, table):
            return []
        notices = resume_leftovers(ledger, table)
        with contextlib.suppress(OSError):
            self.thawed()
        return notices

    def frozen(self, owner: Process, stopped: Sequence[Process]) -> None:
        """Before the first SIGSTOP: ``owner`` is about to stop ``stopped``."""
        line = Ledger(True, boot_id(), owner, tuple(stopped)).line()
        try:
            if line == self._written:
                os.pwrite(self.fd, b"F", 0)
            else:
                self._written = None
                os.pwrite(self.fd, line, 0)
                self._written = line
        except OSError as exc:  # nothing stopped yet
            raise write_error(self.path, exc) from None

    def thawed(self) -> None:
        """After the last SIGCONT."""
        os.pwrite(self.fd, b"-", 0)


def _refuse_links(fd: int, path: str) -> None:
    """The lock file must be a plain file with no other name: the ledger is written into
    it, and a link would write it into whatever file the link names."""
    found, named = os.fstat(fd), os.lstat(path)
    if (
        not stat.S_ISREG(named.st_mode)
        or (found.st_dev, found.st_ino) != (named.st_dev, named.st_ino)
        or found.st_nlink != 1
    ):
        raise RefusedError(
            f"{path}: the write gate's lock file is a link (symbolic or hard) or not a plain "
            "file; nothing was written",
            hint="remove it (no triggerfish-admin may be running): it is made again",
        )


# -- the next run ---------------------------------------------------------------------------


def peek(db: Path) -> Ledger | None:
    """The ledger as it is (never through a link; a few microseconds when there is none)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(lock_path(db), flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return Ledger.parse(os.pread(fd, READ_SIZE, 0))
    finally:
        os.close(fd)


@contextlib.contextmanager
def gate_locked(db: Path, wait: float = 0.0) -> Iterator[int | None]:
    """The gate's lock file, locked: no run of ours freezes the store meanwhile.

    None when there is no such file (no run of ours ever froze this store), it
    is a link, or a run of ours held the lock all along ``wait`` seconds.
    """
    path = lock_path(db)
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, os.O_RDWR | flags)
    except OSError:
        fd = -1
    if fd < 0:
        try:
            fd = os.open(path, os.O_RDONLY | flags)  # flock needs no write access
        except OSError:
            yield None
            return
    try:
        until = time.monotonic() + wait
        while not _locked(fd):
            if time.monotonic() >= until:
                yield None
                return
            time.sleep(0.005)
        try:
            _refuse_links(fd, path)
        except (RefusedError, OSError):
            yield None
            return
        yield fd
    finally:
        os.close(fd)  # and with it the lock


def _locked(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def recover(db: Path, table: ProcessTable | None = None) -> list[str]:
    """At the opening of a store: resume what a run of ours that died left stopped.

    One read of the lock file when there is nothing to do; the lock is taken
    only when its ledger names an owner that is gone. Never an error: a lock
    file that cannot be read is left for the next run to look at.
    """
    try:
        return _recover(db, table)
    except OSError:
        return []


def _recover(db: Path, table: ProcessTable | None) -> list[str]:
    ledger = peek(db)
    if ledger is None or not ledger.frozen:
        return []
    table = table if table is not None else process_table()
    if table is None or not left_by_the_dead(ledger, table):
        return []
    with gate_locked(db) as fd:
        return [] if fd is None else recover_locked(fd, table)


def recover_locked(fd: int, table: ProcessTable) -> list[str]:
    """:func:`recover` with the lock held (``fd``, from :func:`gate_locked`)."""
    try:
        ledger = Ledger.parse(os.pread(fd, READ_SIZE, 0))
    except OSError:
        return []
    if ledger is None or not left_by_the_dead(ledger, table):
        return []
    notices = resume_leftovers(ledger, table)
    with contextlib.suppress(OSError):
        os.pwrite(fd, b"-", 0)  # not when it could only be read: the next run looks again
    return notices
