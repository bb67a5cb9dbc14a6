"""Advisory locks between processes of this tool, on an OS file lock (flock).

A lock is a small file: whoever holds ``flock(LOCK_EX)`` on it holds the
lock. The operating system releases it when the holder closes the file or
dies, even by ``kill -9``, so a crashed sweep never leaves a stale lock
behind and there is nothing to clean up. The file itself stays (unlinking
it would let two processes lock two different files of the same name); it
holds, for messages only, who holds the lock: pid, host, time. It is never
opened through a symbolic link: one at its name is refused (exit 4).

SQLite keeps its lock file beside the database (``<db>-tfadmin-<name>.lock``).
Backends without a lock of their own fall back to a host-local file under
``<base>/run/locks/``, which serialises jobs run on this host only. Unix only
(``fcntl``); elsewhere taking a lock is an error rather than no lock.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from triggerfish_cli.errors import WRITE_ERRNOS, BackendUnavailableError, BusyError, WriteError
from triggerfish_cli.fileio import open_lock_file
from triggerfish_cli.paths import base_dir
from triggerfish_cli.serialization import now_iso

#: How often a waiting process tries again.
POLL_SECONDS = 0.05


def lock_file_name(name: str) -> str:
    """A file-name-safe form of a lock name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "lock"


def host_lock_path(store: str, name: str) -> Path:
    """The host-local lock file for ``name`` on the store described as ``store``."""
    digest = hashlib.sha256(store.encode("utf-8")).hexdigest()[:16]
    return base_dir() / "run" / "locks" / f"{lock_file_name(name)}-{digest}.lock"


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return f" ({text})" if text else ""


@contextmanager
def file_lock(path: Path, wait: float = 0.0, *, what: str = "lock") -> Iterator[None]:
    """Hold an exclusive flock on ``path`` for the block; BusyError after ``wait`` s."""
    try:
        # lazy: POSIX only: without fcntl (Windows) the lock is refused clearly
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        raise BackendUnavailableError(f"{what}: file locks need a Unix system (fcntl)") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = open_lock_file(path)  # a link at its name: refused (exit 4)
    except OSError as exc:
        failure = f"{path}: cannot create the {what} lock file: {exc.strerror}"
        if exc.errno in WRITE_ERRNOS:  # a read-only file system, no permission, disk full
            raise WriteError(failure, hint="nothing was changed") from exc
        raise BackendUnavailableError(failure) from exc  # out of files: exit 10 (errors.py)
    try:
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    waited = f" after waiting {wait:g} s" if wait > 0 else ""
                    raise BusyError(
                        f"{what} is held by another process{_holder(path)}{waited}",
                        hint="wait for it to finish, or pass --wait SECONDS",
                    ) from None
                time.sleep(POLL_SECONDS)
        _write_holder(fd)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _write_holder(fd: int) -> None:
    note = f"pid {os.getpid()} on {socket.gethostname()} since {now_iso()}"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, note.encode("utf-8"), 0)
    except OSError:  # the note is for messages only
        pass
