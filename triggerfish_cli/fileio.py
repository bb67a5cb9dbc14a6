"""Files written so that a crash never leaves a half-written one under the final name."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from triggerfish_cli.errors import write_error


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts): the temp files
    here carry their writer's pid, so that a dead one's are known and removed."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # there, but not ours to signal
    return True


@contextlib.contextmanager
def atomic_writer(
    path: Path,
    *,
    mode: int | None = None,
    binary: bool = False,
    keep_mode: bool = True,
) -> Iterator[IO[Any]]:
    """Write to a temp file beside ``path``; fsync and rename it into place on success.

    On any error (or Ctrl-C) the temp file is removed and ``path`` is left
    exactly as it was; a disk full or read-only place is exit 9, naming
    ``path``. The temp file's name holds our pid (``.<name>.<pid>.<random>.tmp``)
    so that one left by a killed process is recognised and removed later
    (``backup_dest.remove_stale``). ``mode`` sets the new file's permissions;
    otherwise an existing file's mode is kept (``keep_mode``), else 0644 minus
    umask.

    What is not a regular file is written as it is, never replaced: a device
    (``-o /dev/null``: replacing it, as root, broke /dev/null for the whole
    machine), a pipe (``-o /dev/stdout``), a FIFO. A symbolic link to a file
    stays a link: the file it names is replaced.
    """
    path = Path(path)
    try:
        found = os.stat(path)
    except OSError:
        found = None
    if found is not None and not stat.S_ISREG(found.st_mode):
        with _written_through(path, binary) as handle:
            yield handle
        return
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    directory = path.parent if str(path.parent) else Path(".")
    if mode is None and keep_mode and path.exists():
        mode = path.stat().st_mode & 0o7777
    try:
        fd, temp_name = tempfile.mkstemp(
            prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=directory
        )
    except OSError as exc:
        raise write_error(path, exc) from exc
    temp = Path(temp_name)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        if isinstance(exc, OSError):
            raise write_error(path, exc) from exc
        raise
    fsync_dir(directory)


@contextlib.contextmanager
def _written_through(path: Path, binary: bool) -> Iterator[IO[Any]]:
    """``path`` opened for writing in place (a device, a pipe: nothing to rename)."""
    try:
        with open(path, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            yield handle
    except OSError as exc:
        raise write_error(path, exc) from exc
