"""The live writers of a SQLite store: every other process that has it open.

The write gate (write_gate.py) pauses them around each of our write
transactions; ``status`` and the restore guard name them. Found through
``/proc/<pid>/fd`` on Linux, ``lsof`` and ``ps`` where there is no ``/proc``
(macOS, the BSDs), plus the lock every SQLite connection holds on the
store's ``-shm`` file: that one also shows a process we cannot see (another
PID namespace: a container) or whose open files we may not read (another
user, when we are not root).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triggerfish_cli.storage.sqlite.lock_table import lock_holders, marks_read, posix_locks

#: SQLite's lock bytes in the -shm file: the WAL write lock, and the "dead man
#: switch" every connection holds a shared lock on while it has the file open.
SHM_WRITE_LOCK = 120
#: The checkpoint lock: one connection at a time runs a checkpoint.
SHM_CKPT_LOCK = 121
SHM_DMS_LOCK = 128
STOPPED = frozenset("Tt")
GONE = frozenset("ZX")
_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux (x86_64, aarch64)


@dataclass(frozen=True)
class LiveWriter:
    """Another process with the store open."""

    pid: int
    #: Its start time (clock ticks since boot, /proc/<pid>/stat field 22); 0 unknown.
    start: int
    command: str
    user: str
    may_signal: bool
    why_not: str | None = None
    #: Its state letter when looked at (``T``: stopped); None unknown.
    state: str | None = None
    #: The foreground job of a terminal (:class:`Look`), or a process whose every
    #: descriptor of the database file is read-only (``less``, ``sqlite3 -readonly``):
    #: our writes never pause either.
    foreground: bool = False
    reads_only: bool = False

    def label(self) -> str:
        return f"pid {self.pid} ({self.user}: {self.command})"

    @property
    def stopped(self) -> bool:
        return self.state is not None and self.state in STOPPED

    def not_paused(self) -> str | None:
        """Why our writes never pause it, though we may signal it (None: they do)."""
        if self.reads_only:
            return "it has the database open read-only"
        if self.foreground:
            return "the foreground job of a terminal"
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "command": self.command,
            "user": self.user,
            "may_signal": self.may_signal,
            "why_not": self.why_not,
            "stopped": self.stopped,
            "not_paused": self.not_paused(),
        }


@dataclass(frozen=True)
class Look:
    """What one read of a process's ``stat`` tells the write gate."""

    state: str
    #: Clock ticks since boot (``/proc/<pid>/stat`` field 22); 0 unknown.
    start: int
    #: The foreground job of a terminal that a job-control shell manages: its
    #: process group is the terminal's foreground group and not the session's
    #: own (a shell's job). Stopped, its shell would say "Stopped", take the
    #: terminal back and leave it in the background when resumed.
    foreground: bool


def store_files(db: Path) -> list[str]:
    """The real paths of the store, its WAL and its shared-memory file."""
    base = os.path.realpath(db)
    return [base, base + "-wal", base + "-shm"]


class ProcessTable:
    """Processes and their open files, through ``/proc`` (Linux)."""

    def __init__(self) -> None:
        self.me = os.getpid()
        #: (pid, file) -> the descriptor through which it has the file open
        #: (:meth:`holds_read_mark`; checked against the file's inode at each use).
        self._fds: dict[tuple[int, str], str] = {}

    def pids(self) -> set[int]:
        return {int(name) for name in os.listdir("/proc") if name.isdigit()}

    def holds_read_mark(self, pid: int, shm: str) -> bool | None:
        """Whether ``pid`` holds one of SQLite's read-mark locks on ``shm`` (a read snapshot).

        From ``/proc/<pid>/fdinfo/<fd>`` of its descriptor of the -shm file,
        which lists every POSIX lock the process holds on that file: a small
        read of one process's table. (``/proc/locks`` would tell as well, but
        the kernel takes a machine-wide lock to list it, which took 6-15 ms
        each time, inside the freeze.) None: this cannot tell (no such
        descriptor, not our process to read).
        """
        try:
            inode = os.stat(shm).st_ino
        except OSError:
            return None
        fd = self._fds.get((pid, shm))
        text = self._fdinfo(pid, fd, inode) if fd is not None else None
        if text is None:
            fd = self._descriptor(pid, shm)
            text = self._fdinfo(pid, fd, inode) if fd is not None else None
            if text is None:
                return None
            self._fds[(pid, shm)] = fd  # type: ignore[assignment]
        lines = [line[5:] for line in text.splitlines() if line.startswith("lock:")]
        return any(marks_read(lock) for lock in posix_locks(lines) if not lock.waiting)

    @staticmethod
    def _fdinfo(pid: int, fd: str, inode: int) -> str | None:
        """``/proc/<pid>/fdinfo/<fd>`` if that descriptor is still the file ``inode``."""
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii", errors="replace") as handle:
                text = handle.read()
        except OSError:
            return None
        return text if f"\nino:\t{inode}\n" in text else None

    @staticmethod
    def _descriptor(pid: int, path: str) -> str | None:
        try:
            return _descriptor_of(pid, {path})
        except OSError:
            return None

    def openers(self, pids: Sequence[int] | set[int], targets: Sequence[str]) -> list[int]:
        """The processes among ``pids`` that have one of ``targets`` open.

        Every descriptor of every process is read (1-2 ms for a busy machine,
        before each write and never while anyone is paused). The descriptors
        of another user's processes are not ours to read unless we are root:
        for those the lock table (``/proc/locks``) tells whether they hold a
        lock on the store's files, as every open connection to a WAL store
        does on its -shm file. (That table is one small read, but the kernel
        serialises it with every lock taken on the machine: it can take
        milliseconds on a busy one, so it is not read when it is not needed.)
        """
        wanted = set(targets)
        found = []
        unreadable = []
        for pid in pids:
            if pid == self.me:
                continue
            try:
                if _descriptor_of(pid, wanted) is not None:
                    found.append(pid)
            except PermissionError:
                unreadable.append(pid)
            except OSError:
                continue  # gone
        if unreadable:
            holders = lock_holders(targets) or set()
            found += [pid for pid in unreadable if pid in holders]
        return sorted(found)

    def start_time(self, pid: int) -> int | None:
        fields = self._stat(f"/proc/{pid}/stat")
        return int(fields[19]) if fields and len(fields) > 19 else None

    def state(self, pid: int) -> str | None:
        fields = self._stat(f"/proc/{pid}/stat")
        return fields[0] if fields else None

    def look(self, pid: int) -> Look | None:
        """State, start time and terminal of ``pid`` from one read; None when it is gone."""
        fields = self._stat(f"/proc/{pid}/stat")
        if not fields or len(fields) <= 19:
            return None
        # state, ppid, pgrp, session, tty_nr, tpgid, ... (proc(5))
        pgrp, session, tty, tpgid = fields[2:6]
        foreground = tty != "0" and tpgid == pgrp and pgrp != session
        return Look(fields[0], int(fields[19]), foreground)

    def reads_only(self, pid: int, db: str) -> bool:
        """Every descriptor ``pid`` has on the file ``db`` is open read-only (False when
        it has none, or they cannot be read)."""
        try:
            inode = os.stat(db).st_ino
            modes = [self._access(pid, fd, inode) for fd in _descriptors_of(pid, {db})]
        except OSError:
            return False
        return bool(modes) and all(mode == os.O_RDONLY for mode in modes)

    def _access(self, pid: int, fd: str, inode: int) -> int:
        """``O_RDONLY``, ``O_WRONLY`` or ``O_RDWR``: how descriptor ``fd`` was opened."""
        text = self._fdinfo(pid, fd, inode)
        flags = next((line for line in (text or "").splitlines() if line[:6] == "flags:"), "")
        return int(flags[6:].strip() or "2", 8) & os.O_ACCMODE  # unknown: read-write

    def stopped(self, pid: int) -> bool:
        """Every thread of ``pid`` stopped (or gone)."""
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return True  # the process is gone
        for tid in tids:
            fields = self._stat(f"/proc/{pid}/task/{tid}/stat")
            if fields and fields[0] not in STOPPED and fields[0] not in GONE:
                return False
        return True

    def describe(self, pid: int) -> tuple[str, int, str]:
        """(command line, uid, user name) of ``pid``."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                raw = handle.read()
            command = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            command = ""
        if not command:
            try:
                with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
                    command = f"[{handle.read().strip()}]"
            except OSError:
                command = "?"
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            uid = -1
        return command, uid, _user_name(uid)

    @staticmethod
    def _stat(path: str) -> list[str] | None:
        """The fields of a ``stat`` file after the command name: ``[state, ppid, ...]``.

        The name (in parentheses) may hold spaces and parentheses (``V8
        DefaultWorke``): split after the last ``)``.
        """
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return None
        end = data.rfind(b")")
        return data[end + 2 :].decode("ascii", "replace").split() if end >= 0 else None


def shm_readers(db: Path) -> set[int] | None:
    """Pids holding one of SQLite's read-mark locks of the store's -shm (a read snapshot).

    From ``/proc/locks`` (every holder of a shared lock, which a lock query
    cannot list); None when this system cannot tell (no -shm, no /proc/locks).
    """
    shm = store_files(db)[2]
    try:
        info = os.stat(shm)
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    inode = (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino)
    return {
        lock.pid
        for lock in posix_locks(lines)
        if not lock.waiting and lock.file == inode and lock.pid > 0 and marks_read(lock)
    }


def _descriptors_of(pid: int, paths: set[str]) -> Iterator[str]:
    """The descriptors of ``pid`` open on one of ``paths`` (PermissionError: not ours to read)."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in paths:
                yield fd
        except OSError:
            continue  # closed meanwhile


def _descriptor_of(pid: int, paths: set[str]) -> str | None:
    return next(_descriptors_of(pid, paths), None)


class LsofTable(ProcessTable):
    """Where there is no ``/proc`` (macOS, the BSDs): ``lsof`` and ``ps``."""

    def pids(self) -> set[int]:
        out = _run(["ps", "-A", "-o", "pid="])
        return {int(word) for word in out.split() if word.isdigit()}

    def openers(self, pids: Sequence[int] | set[int], targets: Sequence[str]) -> list[int]:
        existing = [path for path in targets if os.path.exists(path)]
        if not existing:
            return []
        out = _run(["lsof", "-t", "--", *existing])
        wanted = set(pids)
        return sorted({int(word) for word in out.split() if word.isdigit()} & wanted - {self.me})

    def start_time(self, pid: int) -> int | None:
        out = _run(["ps", "-o", "lstart=", "-p", str(pid)]).strip()
        return _stable_number(out) if out else None

    def state(self, pid: int) -> str | None:
        out = _run(["ps", "-o", "stat=", "-p", str(pid)]).strip()
        return out[:1] or None

    def look(self, pid: int) -> Look | None:
        """From ``ps``'s STAT: ``+`` in the foreground group of its terminal, ``s`` a
        session leader (a foreground process that is not one is taken for a job)."""
        stat, _, started = (
            _run(["ps", "-o", "stat=,lstart=", "-p", str(pid)]).strip().partition(" ")
        )
        if not stat:
            return None
        return Look(stat[0], _stable_number(started.strip()), "+" in stat and "s" not in stat)

    def reads_only(self, pid: int, db: str) -> bool:
        """From lsof's access mode of each descriptor (``r``, ``w``, ``u``)."""
        out = _run(["lsof", "-a", "-p", str(pid), "-F", "a", "--", db])
        modes = [line[1:] for line in out.splitlines() if line[:1] == "a"]
        return bool(modes) and all(mode == "r" for mode in modes)

    def stopped(self, pid: int) -> bool:
        state = self.state(pid)
        return state is None or state in STOPPED or state in GONE

    def describe(self, pid: int) -> tuple[str, int, str]:
        out = _run(["ps", "-o", "uid=,command=", "-p", str(pid)]).strip()
        uid_text, _, command = out.partition(" ")
        uid = int(uid_text) if uid_text.isdigit() else -1
        return command.strip() or "?", uid, _user_name(uid)


def _run(command: list[str]) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout


def _stable_number(text: str) -> int:
    """A start time for a ``ps`` start date: the same in every process (not ``hash()``)."""
    # lazy: zlib (0.5 ms) only where there is no /proc
    import zlib

    return zlib.crc32(text.encode()) or 1


def _user_name(uid: int) -> str:
    if uid < 0:
        return "?"
    try:
        # lazy: POSIX only (ImportError caught); not loaded by `kv get --raw`
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return str(uid)


def process_table() -> ProcessTable | None:
    """How this system shows processes and their files (None: it cannot)."""
    if os.path.isdir("/proc/self/fd"):
        return ProcessTable()
    if sys.platform != "win32" and shutil.which("lsof") and shutil.which("ps"):
        return LsofTable()
    return None


def _may_signal(pid: int) -> tuple[bool, str | None]:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return False, "another user's process: we may not signal it"
    except ProcessLookupError:
        return True, None  # gone since the scan
    return True, None


#: Probe descriptors on -shm files, by (device, inode). Never closed: closing any
#: descriptor of a file drops every POSIX lock this process holds on it, SQLite's
#: own included (a POSIX lock belongs to the process, not to the descriptor).
_PROBES: dict[tuple[int, int], int] = {}
_PROBES_LOCK = threading.Lock()


def probe_fd(path: str) -> int | None:
    """A read-only descriptor of ``path`` (the -shm), kept open for later looks at it."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    key = (info.st_dev, info.st_ino)
    with _PROBES_LOCK:
        fd = _PROBES.get(key)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                return None
            _PROBES[key] = fd
    return fd


def shm_lock_holder(db: Path, byte: int) -> int | None:
    """The pid of a process holding SQLite's lock ``byte`` of the store's -shm file.

    None: nobody holds it (or this system cannot tell). 0: a process of
    another PID namespace, which we cannot see. It may be this process.
    """
    getlk = getattr(fcntl, "F_OFD_GETLK", None)
    if getlk is None:
        return None
    fd = probe_fd(store_files(db)[2])
    if fd is None:
        return None
    try:
        answer = fcntl.fcntl(fd, getlk, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, byte, 1, 0))
    except OSError:
        return None
    kind, _, _, _, pid = _FLOCK.unpack(answer)
    return None if kind == fcntl.F_UNLCK else int(pid)


def live_writers(db: Path, table: ProcessTable | None = None) -> list[LiveWriter]:
    """Every other process that has the store open, and whether we may signal it."""
    table = table if table is not None else process_table()
    found: list[LiveWriter] = []
    seen: set[int] = set()
    if table is not None:
        for pid in sorted(table.openers(table.pids(), store_files(db))):
            found.append(writer_of(table, pid, db))
            seen.add(pid)
    holder = shm_lock_holder(db, SHM_DMS_LOCK)
    if holder == 0:
        found.append(
            LiveWriter(
                0,
                0,
                "a process of another PID namespace (a container?) holding the store's lock",
                "?",
                False,
                "not visible from here: run triggerfish-admin where the gateway runs",
            )
        )
    elif holder is not None and holder != os.getpid() and holder not in seen:
        # It holds the store's lock, but its open files are not ours to read.
        found.append(writer_of(table, holder, db) if table is not None else _unseen(holder))
    return found


def writer_of(table: ProcessTable, pid: int, db: Path) -> LiveWriter:
    command, _, user = table.describe(pid)
    may, why = _may_signal(pid)
    look = table.look(pid)
    reads_only = table.reads_only(pid, store_files(db)[0])
    if look is None:
        return LiveWriter(pid, 0, command[:300], user, may, why, reads_only=reads_only)
    return LiveWriter(
        pid, look.start, command[:300], user, may, why, look.state, look.foreground, reads_only
    )


def _unseen(pid: int) -> LiveWriter:
    may, why = _may_signal(pid)
    return LiveWriter(pid, 0, "?", "?", may, why)


def describe_writers(writers: Sequence[LiveWriter], limit: int = 5) -> str:
    shown = "; ".join(writer.label() for writer in writers[:limit])
    more = len(writers) - limit
    return shown + (f"; and {more} more" if more > 0 else "")
