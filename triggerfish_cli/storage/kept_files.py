"""Read-only descriptors of a SQLite store's files that never drop SQLite's locks.

POSIX record locks belong to a process and a file: closing *any* descriptor
of the file drops every lock the process holds on it, SQLite's own included
(its SHARED lock on the database file in WAL mode, its read mark and its
liveness lock on the ``-shm``). A descriptor opened beside SQLite to read
those files (backup_snapshot) is therefore only closed once this process
holds no lock on the file any more: :func:`release`, run when a store is
closed, closes the ones ``/proc/locks`` shows free (Linux; elsewhere they
stay open until the process ends). The ``-wal`` needs none of this: SQLite
takes no lock on it.
"""

from __future__ import annotations

import contextlib
import os
import threading

_KEPT: dict[tuple[int, int], int] = {}
_LOCK = threading.Lock()


class Replaced(OSError):
    """The file was replaced (renamed over) while it was opened."""


def kept(path: str) -> int:
    """A read-only descriptor of ``path``: the same one while it stays open here.

    The file is identified by device and inode, which no other file can take
    while a descriptor holds it.
    """
    status = os.stat(path)
    key = (status.st_dev, status.st_ino)
    with _LOCK:
        fd = _KEPT.get(key)
        if fd is None:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            opened = os.fstat(fd)
            _KEPT[(opened.st_dev, opened.st_ino)] = fd  # kept even if it is not ``path`` now
            if (opened.st_dev, opened.st_ino) != key:
                raise Replaced(f"{path} was replaced while it was opened")
    return fd


def release() -> None:
    """Close the kept descriptors of files this process holds no POSIX lock on."""
    with _LOCK:
        if not _KEPT:
            return
        locked = _locked_files()
        if locked is None:
            return  # no way to tell here: kept until the process ends
        for key, fd in list(_KEPT.items()):
            device, inode = key
            if (os.major(device), os.minor(device), inode) not in locked:
                del _KEPT[key]
                with contextlib.suppress(OSError):
                    os.close(fd)


def _locked_files() -> set[tuple[int, int, int]] | None:
    """(major, minor, inode) of every file this process holds a POSIX lock on."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    me = os.getpid()
    found: set[tuple[int, int, int]] = set()
    for line in lines:
        # "3: POSIX  ADVISORY  READ 27899 fe:00:2146530 128 128" ("->" marks a waiter)
        words = [word for word in line.split() if word != "->"]
        if len(words) < 6 or words[1] != "POSIX":
            continue
        try:
            pid = int(words[4])
            major, minor, inode = words[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        if pid == me:
            found.add(key)
    return found
