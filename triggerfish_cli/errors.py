"""Errors of the core, each carrying the exit code the CLI maps it to.

The core never prints and never exits: it raises one of these. The CLI's one
error boundary (``cli/app.py``) turns them into a one-line message on stderr
and the exit code below. The table is documented in the README and the man
page and pinned by tests.
"""

from __future__ import annotations

import enum
import os


class ExitStatus(enum.IntEnum):
    """The exit codes of every command (README, man page, ``help --json``)."""

    SUCCESS = 0
    UNEXPECTED = 1
    USAGE = 2
    NOT_FOUND = 3
    REFUSED = 4
    VERIFICATION_FAILED = 5
    BUSY = 6
    BACKEND_UNAVAILABLE = 7
    INVALID_DATA = 8
    CANNOT_WRITE = 9
    OUT_OF_RESOURCES = 10
    INTERRUPTED = 130

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS: dict[ExitStatus, str] = {
    ExitStatus.SUCCESS: "success",
    ExitStatus.UNEXPECTED: "unexpected error",
    ExitStatus.USAGE: "usage error (bad option or argument)",
    ExitStatus.NOT_FOUND: "not found (key, memory, version, backup)",
    ExitStatus.REFUSED: "refused by policy (taint, secrets guard, safety guard, missing --yes, "
    "another store's backup, a key that opens no recipient of an encrypted backup, "
    "a plain backup where encryption is required)",
    ExitStatus.VERIFICATION_FAILED: "verification failed (backup checksum, integrity check)",
    ExitStatus.BUSY: "busy or locked (another sweep running, database locked)",
    ExitStatus.BACKEND_UNAVAILABLE: "backend unavailable (no store there, cannot connect or "
    "open, extra not installed)",
    ExitStatus.INVALID_DATA: "invalid data or config (malformed JSON, YAML, manifest, a kv "
    "table not the gateway's)",
    ExitStatus.CANNOT_WRITE: "cannot write (disk full, read-only file system, permission denied, "
    "no such directory)",
    ExitStatus.OUT_OF_RESOURCES: "out of resources (too many open files, out of memory, cannot "
    "start a thread)",
    ExitStatus.INTERRUPTED: "interrupted",
}

#: Code -> meaning, in order (for the reference tables).
EXIT_CODES: dict[int, str] = {int(status): status.meaning for status in ExitStatus}


class TriggerfishError(Exception):
    """Base of every error the core raises on purpose."""

    exit_code: int = ExitStatus.UNEXPECTED.value

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class UsageError(TriggerfishError):
    """A bad option or argument the parser could not catch."""

    exit_code: int = ExitStatus.USAGE.value


class NotFoundError(TriggerfishError):
    """A key, memory, version or backup that does not exist."""

    exit_code: int = ExitStatus.NOT_FOUND.value


class RefusedError(TriggerfishError):
    """Refused by policy: taint, secrets guard, safety guard, missing --yes."""

    exit_code: int = ExitStatus.REFUSED.value


class NotConfirmedError(RefusedError):
    """The operator declined at a prompt: nothing changed (exit 4). An answer, not a
    failure: its line has no "error:" prefix."""


class VerificationError(TriggerfishError):
    """A checksum or integrity check failed."""

    exit_code: int = ExitStatus.VERIFICATION_FAILED.value


class BusyError(TriggerfishError):
    """Another process holds a lock we need (sweep lock, database lock)."""

    exit_code: int = ExitStatus.BUSY.value


class BackendUnavailableError(TriggerfishError):
    """The store cannot be opened or reached."""

    exit_code: int = ExitStatus.BACKEND_UNAVAILABLE.value


class MissingStoreError(BackendUnavailableError):
    """No store where one was looked for: a missing SQLite file, a Postgres schema
    without its table, an S3 prefix holding nothing. Only the commands that make a
    store (``demo create``, ``kv import --create``, ``migrate`` into its target, a
    restore into an empty target) create one; every other command stops here (exit 7)."""


class InvalidDataError(TriggerfishError):
    """Malformed data or configuration: JSON, YAML, a manifest, a policy."""

    exit_code: int = ExitStatus.INVALID_DATA.value


class WriteError(TriggerfishError):
    """A file or store could not be written: disk full, quota, read-only, permissions.

    Whatever was being written is left out entirely (temp files removed), so
    the operator frees space and runs the same command again.
    """

    exit_code: int = ExitStatus.CANNOT_WRITE.value


#: errno values that mean "this place cannot take the write" (exit 9).
WRITE_ERRNOS = frozenset({28, 122, 27, 30, 13, 1, 5})  # ENOSPC EDQUOT EFBIG EROFS EACCES EPERM EIO


#: errno values met writing where a directory is missing (exit 9): what, what to do.
NO_DIRECTORY_ERRNOS = {
    2: ("no such directory", "create the directory first, or name another path"),  # ENOENT
    20: ("a part of the path is a file, not a directory", "name another path"),  # ENOTDIR
}


def write_error(path: object, exc: OSError) -> TriggerfishError:
    """The one-line error for an OSError met writing ``path`` (exit 9 when it is one):
    a full, read-only or forbidden place, or a directory that is not there."""
    reason = exc.strerror or str(exc)
    if exc.errno in NO_DIRECTORY_ERRNOS:
        what, hint = NO_DIRECTORY_ERRNOS[exc.errno]
        return WriteError(f"{path}: cannot write: {what}", hint=hint)
    if exc.errno in WRITE_ERRNOS:
        return WriteError(f"{path}: cannot write: {reason}", hint=_WRITE_HINTS.get(exc.errno))
    return TriggerfishError(f"{path}: cannot write: {reason}")


class ResourceError(TriggerfishError):
    """The process ran out of open files, memory or threads (its limits, or the
    system's): nothing is wrong with the store or the input."""

    exit_code: int = ExitStatus.OUT_OF_RESOURCES.value


#: errno values that mean "out of a resource" (exit 10): what ran out, what to do.
RESOURCE_ERRNOS = {
    23: ("the system's open-file table is full", "close some files and run it again"),
    24: ("too many open files", "raise the open-file limit, ulimit -n, and run it again"),
    12: ("out of memory", "free some memory or raise the limit, ulimit -v, and run it again"),
}

#: Out of open files, and what to do about it.
TOO_MANY, FILES_HINT = RESOURCE_ERRNOS[24]


def resource_errno(exc: BaseException) -> int | None:
    """The errno of the shortage behind ``exc`` (an OSError itself, or the one it was
    raised from or while handling), or None when no resource ran out."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in RESOURCE_ERRNOS:
            return cause.errno
        cause = cause.__cause__ or cause.__context__
    return None


def out_of_files(spare: int = 2) -> bool:
    """Whether this process cannot open ``spare`` more files (EMFILE, ENFILE) now.

    SQLite hides the errno: out of files it says "unable to open database
    file", or opens the store read-only and later says "attempt to write a
    readonly database". A store in WAL mode needs two files beside it (-wal,
    -shm): asking the system for two tells a shortage from a real failure.
    """
    held: list[int] = []
    try:
        for _ in range(spare):
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        return exc.errno in (23, 24)
    finally:
        for fd in held:
            os.close(fd)
    return False


#: What the dynamic loader says when it cannot map a library for want of memory.
_NO_MAP = ("failed to map segment", "cannot map zero-fill")


def _loader_errno(exc: BaseException) -> int | None:
    """The shortage behind an ImportError of a compiled module: the dynamic loader's
    message (all there is of it) names it, or says it could not map the library."""
    if not isinstance(exc, ImportError):
        return None
    text = str(exc).lower()
    for errno in RESOURCE_ERRNOS:
        if os.strerror(errno).lower() in text:
            return errno
    return 12 if any(sign in text for sign in _NO_MAP) else None


def resource_error(exc: BaseException) -> ResourceError | None:
    """``exc`` as the error of the shortage behind it (exit 10), or None when no
    resource ran out: open files, memory, threads."""
    if isinstance(exc, ResourceError):
        return exc
    if isinstance(exc, MemoryError):
        return ResourceError("out of memory", hint=RESOURCE_ERRNOS[12][1])
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return ResourceError(
            "cannot start a thread",
            hint="raise the memory, stack or process limits (ulimit -v, -s, -u) and run it again",
        )
    errno = resource_errno(exc) or _loader_errno(exc)
    if errno is None:
        return None
    what, hint = RESOURCE_ERRNOS[errno]
    if isinstance(exc, TriggerfishError):
        message = exc.message
    elif isinstance(exc, OSError):
        message = f"{exc.filename}: {what}" if exc.filename else what
    else:
        message = f"{what} ({type(exc).__name__}: {exc})"
    return ResourceError(message, hint=hint)


_WRITE_HINTS = {
    28: "free some space and run it again: nothing was left half-written",
    122: "free some space and run it again: nothing was left half-written",
}
