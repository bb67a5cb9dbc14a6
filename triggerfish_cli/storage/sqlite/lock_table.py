"""The machine's table of POSIX locks, as SQLite's connections hold them on a store's files.

``/proc/locks`` lists every lock of the machine (its holder's pid, the file's
device and inode, the byte range); ``/proc/<pid>/fdinfo/<fd>`` lists those one
process holds on one file. :mod:`live_writers` reads them to find who has a
store open, and who holds a read snapshot.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

#: SQLite's WAL read-mark locks (WAL_READ_LOCK(0..4)) of the -shm file: a connection
#: holds one of them, shared, for as long as it has a read snapshot (a read
#: transaction, or an autocommitted write between taking its snapshot and the write lock).
SHM_READ_LOCKS = range(123, 128)


def lock_holders(targets: Sequence[str]) -> set[int] | None:
    """Pids holding a POSIX lock on the store's files, from ``/proc/locks`` (Linux).

    None when that cannot tell who has the store open: no ``-shm`` file (the
    store is not in WAL mode, or nobody has it open) or no ``/proc/locks``.
    Locks of processes in other PID namespaces are not listed there (the -shm
    probe of :func:`live_writers` finds those).
    """
    inodes = set()
    for path in targets:
        try:
            info = os.stat(path)
        except OSError:
            if path.endswith("-shm"):
                return None
            continue
        inodes.add((os.major(info.st_dev), os.minor(info.st_dev), info.st_ino))
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    return {lock.pid for lock in posix_locks(lines) if lock.file in inodes and lock.pid > 0}


@dataclass(frozen=True)
class PosixLock:
    """One POSIX lock of a lock table (``/proc/locks``, or the ``lock:`` lines of fdinfo)."""

    pid: int
    #: (device major, device minor, inode) of the locked file.
    file: tuple[int, int, int]
    start: int
    #: None: to the end of the file.
    end: int | None
    #: Asked for, not held ("->" in the table).
    waiting: bool


def posix_locks(lines: Iterable[str]) -> Iterator[PosixLock]:
    """The POSIX locks in lines of a lock table; other kinds and odd lines skipped."""
    for line in lines:
        # "3: POSIX  ADVISORY  READ 27899 fe:00:2146530 128 128"; a waiter: "3: -> POSIX ..."
        words = line.split()
        waiting = "->" in words
        if waiting:
            words.remove("->")
        if len(words) < 8 or words[1] != "POSIX":
            continue
        try:
            major, minor, inode = words[5].split(":")
            file = (int(major, 16), int(minor, 16), int(inode))
            pid, start = int(words[4]), int(words[6])
            end = None if words[7] == "EOF" else int(words[7])
        except ValueError:
            continue
        yield PosixLock(pid, file, start, end, waiting)


def marks_read(lock: PosixLock) -> bool:
    """The lock covers one of SQLite's read-mark bytes of a -shm file (a read snapshot)."""
    first, last = SHM_READ_LOCKS[0], SHM_READ_LOCKS[-1]
    return lock.start <= last and (lock.end is None or lock.end >= first)
