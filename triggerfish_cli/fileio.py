"""Files written so that a crash never leaves a half-written one under the final name,
and never through a symbolic link someone else could have planted (issue 35).

For every file the tool writes:

- :func:`atomic_writer`: a whole file under its name (temp file, fsync, rename);
  ``exclusive=True`` claims a new name and never replaces anything;
- :func:`publish`: give a finished temp file a name nothing has (FileExistsError);
- :func:`make_directory`: ``mkdir -p`` (0700), exit 9 naming it when it cannot be made;
- :func:`open_lock_file`: a lock file, refused (exit 4) when a link is at its name;
- :func:`refuse_link`: the same refusal for a marker or a file about to be replaced;
- :func:`nofollow`: an ``opener`` for ``open()`` of a temp file of ours (ELOOP on a link);
- :func:`trusted_link`: whether a link cannot have been planted (root's or ours, in a
  directory only root or we can write); only the link at the final name is judged.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from triggerfish_cli.errors import RefusedError, WriteError, write_error


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


def make_directory(directory: Path, mode: int = 0o700, *, no_link: bool = False) -> None:
    """``mkdir -p -m 700``: every directory missing on the way to ``directory`` is made
    ``mode`` (less the umask); those there are left as they are.

    WriteError (exit 9, one line naming ``directory``) when it cannot be: a file in
    the way, a read-only or full place; with ``no_link``, when ``directory``, or the
    directory the first missing one would be made in, is a symbolic link (what goes
    in it is never written through one).
    """
    missing: list[Path] = []
    for place in (directory, *directory.parents):
        if os.path.lexists(place):
            break
        missing.append(place)
    if no_link and os.path.islink(place):
        raise WriteError(
            f"{place}: cannot write: is a symbolic link: never written through",
            hint="name a real directory, or remove the link",
        )
    try:
        for place in reversed(missing):
            with contextlib.suppress(FileExistsError):  # made meanwhile by another
                os.mkdir(place, mode)
        if not directory.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))
    except OSError as exc:
        raise write_error(directory, exc) from exc


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
    exclusive: bool = False,
) -> Iterator[IO[Any]]:
    """Write to a temp file beside ``path``; fsync and rename it into place on success.

    On any error (or Ctrl-C) the temp file is removed and ``path`` is left
    exactly as it was; a disk full or read-only place is exit 9, naming
    ``path``. The temp file's name holds our pid (``.<name>.<pid>.<random>.tmp``)
    so that one left by a killed process is recognised and removed later
    (``backup_dest.remove_stale``). ``mode`` sets the new file's permissions;
    otherwise an existing regular file's mode is kept (``keep_mode``), else
    0644 minus umask. ``exclusive``: the name is claimed, never replaced
    (:func:`publish`): FileExistsError when anything is there, a link included.

    What is at ``path`` decides how it is written (:func:`follows`):

    - nothing, or a regular file: replaced by the temp file (rename);
    - a device, a pipe, a socket: written as it is, never replaced (``-o
      /dev/null``: replacing it, as root, broke /dev/null for the machine);
    - a symbolic link that cannot have been planted by someone else (owned by
      root or by us, in a directory only root or we can write: ``/dev/stdout``,
      ``/proc/self/fd/1``, an operator's own link to a config kept in git): what
      it leads to is written as above (a regular file replaced where it is);
      a link to a directory or a block device is refused (exit 4);
    - any other symbolic link: the new file replaces the link itself (the
      rename is over the link, never through it); the file it named is not
      opened, and keeps its bytes and mode.
    """
    path = Path(path)
    if not exclusive:
        through = follows(path)
        if through is not None:
            path = through
            if _in_place(path):
                with _written_through(path, binary) as handle:
                    yield handle
                return
    directory = path.parent if str(path.parent) else Path(".")
    if mode is None and keep_mode and not exclusive:
        mode = _regular_mode(path)
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
        if exclusive:
            publish(temp, path)
        else:
            os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        if isinstance(exc, OSError) and not isinstance(exc, FileExistsError):
            raise write_error(path, exc) from exc
        raise
    fsync_dir(directory)


def follows(path: Path) -> Path | None:
    """Where :func:`atomic_writer` writes for ``path``: ``path`` itself (nothing there, a
    file, a device, a pipe), what a link there leads to when the link cannot have been
    planted (:func:`trusted_link`), or None: the link is replaced, never followed.
    RefusedError (exit 4) for a trusted link to a directory or a block device."""
    try:
        found = os.lstat(path)
    except OSError:
        return path
    if not stat.S_ISLNK(found.st_mode):
        return path
    try:
        named = os.stat(path)
    except OSError:
        return None  # a dangling link: replaced
    if not trusted_link(path, found):
        return None
    if stat.S_ISDIR(named.st_mode) or stat.S_ISBLK(named.st_mode):
        kind = "directory" if stat.S_ISDIR(named.st_mode) else "block device"
        raise RefusedError(f"{path}: a symbolic link to a {kind}: never written through")
    if stat.S_ISREG(named.st_mode):
        return Path(os.path.realpath(path))  # replaced where it is, the link kept
    return path  # a device, a pipe: opened through the link


def trusted_link(path: Path, found: os.stat_result | None = None) -> bool:
    """Whether the symbolic link ``path`` cannot have been planted by someone else: it is
    owned by root or by us, and so is its directory, which no group or other may write.
    ``found``: its ``lstat``, when already at hand."""
    owners = {0, os.geteuid()}
    try:
        link = found or os.lstat(path)
        directory = os.stat(path.parent if str(path.parent) else ".")
    except OSError:
        return False
    return (
        link.st_uid in owners
        and directory.st_uid in owners
        and not directory.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def refuse_link(path: Path, what: str) -> None:
    """RefusedError (exit 4, one line) when ``path`` is a symbolic link: a lock, a marker,
    a store about to be replaced is never written through one, nor replaced."""
    if os.path.islink(path):
        raise RefusedError(
            f"{path}: is a symbolic link: {what} is never written through a link",
            hint="remove the link, or name the file itself, and run it again",
        )


def open_lock_file(path: Path, mode: int = 0o600) -> int:
    """A descriptor (read-write, close-on-exec) of the lock file ``path``, created ``mode``
    when missing, never through a symbolic link.

    RefusedError (exit 4, one line naming ``path``) when a link, or anything but a
    regular file, is at ``path``; any other failure is the OSError as it is.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            refuse_link(path, "a lock file")
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RefusedError(f"{path}: not a regular file: never used as a lock file")
    return fd


def nofollow(path: str | os.PathLike[str], flags: int) -> int:
    """An ``opener`` for :func:`open` that never follows a symbolic link at ``path``
    (ELOOP): ``open(temp, "ab", opener=nofollow)`` for a temp file of ours."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def publish(temp: Path, final: Path) -> None:
    """Give the finished file ``temp`` the name ``final`` (same directory) only if nothing
    has that name: a name is claimed atomically, never replaced. FileExistsError when it
    is taken (by a file, a link, anything); ``temp`` is then left as it was.

    A hard link, then ``temp`` removed; where the file system has no hard links
    the name is first claimed with an empty file created exclusively, then the
    temp file renamed over that claim.
    """
    try:
        os.link(temp, final, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        try:
            os.replace(temp, final)
        except BaseException:
            final.unlink(missing_ok=True)  # our empty claim
            raise
        return
    os.unlink(temp)


#: What link() fails with where a file system has no hard links (vfat, some FUSE).
_NO_HARD_LINKS = frozenset(
    {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK}
)


def _regular_mode(path: Path) -> int | None:
    """The mode of the regular file at ``path`` (None: nothing, or not one)."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return found.st_mode & 0o7777 if stat.S_ISREG(found.st_mode) else None


def _in_place(path: Path) -> bool:
    """Whether ``path`` is written as it is: a device, a pipe (not a file, not nothing)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def _written_through(path: Path, binary: bool) -> Iterator[IO[Any]]:
    """``path`` opened for writing in place (a device, a pipe: nothing to rename).

    Through a link only when one is there now (a trusted one, see :func:`follows`);
    else opened with O_NOFOLLOW, so that a link put there since is refused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    if not os.path.islink(path):
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, 0o666)
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            yield handle
    except OSError as exc:
        raise write_error(path, exc) from exc
