"""Errors of the core, each carrying the exit code the CLI maps it to.

The core never prints and never exits: it raises one of these. The CLI's one
error boundary (``cli/app.py``) turns them into a one-line message on stderr
and the exit code below. The table is documented in the README and the man
page and pinned by tests.
"""

from __future__ import annotations

import enum


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
    ExitStatus.CANNOT_WRITE: "cannot write (disk full, read-only file system, permission denied)",
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
    store (``demo create``, ``migrate`` into its target, a restore into an empty
    target) create one; every other command stops here (exit 7)."""


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


def write_error(path: object, exc: OSError) -> TriggerfishError:
    """The one-line error for an OSError met writing ``path`` (exit 9 when it is one)."""
    reason = exc.strerror or str(exc)
    if exc.errno in WRITE_ERRNOS:
        return WriteError(f"{path}: cannot write: {reason}", hint=_WRITE_HINTS.get(exc.errno))
    return TriggerfishError(f"{path}: cannot write: {reason}")


_WRITE_HINTS = {
    28: "free some space and run it again: nothing was left half-written",
    122: "free some space and run it again: nothing was left half-written",
}
