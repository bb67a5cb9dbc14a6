"""Errors of the core, each carrying the exit code the CLI maps it to.

The core never prints and never exits: it raises one of these. The CLI's one
error boundary (``cli/app.py``) turns them into a one-line message on stderr
and the exit code below. The table is documented in the README and the man
page and pinned by tests.
"""

from __future__ import annotations

EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "unexpected error",
    2: "usage error (bad option or argument)",
    3: "not found (key, memory, version, backup)",
    4: "refused by policy (taint, secrets guard, safety guard, missing --yes, "
    "another store's backup, a key that opens no recipient of an encrypted backup, "
    "a plain backup where encryption is required)",
    5: "verification failed (backup checksum, integrity check)",
    6: "busy or locked (another sweep running, database locked)",
    7: "backend unavailable (no store there, cannot connect or open, extra not installed)",
    8: "invalid data or config (malformed JSON, YAML, manifest, a kv table not the gateway's)",
    9: "cannot write (disk full, read-only file system, permission denied)",
    130: "interrupted",
}


class TriggerfishError(Exception):
    """Base of every error the core raises on purpose."""

    exit_code = 1

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

    exit_code = 2


class NotFoundError(TriggerfishError):
    """A key, memory, version or backup that does not exist."""

    exit_code = 3


class RefusedError(TriggerfishError):
    """Refused by policy: taint, secrets guard, safety guard, missing --yes."""

    exit_code = 4


class VerificationError(TriggerfishError):
    """A checksum or integrity check failed."""

    exit_code = 5


class BusyError(TriggerfishError):
    """Another process holds a lock we need (sweep lock, database lock)."""

    exit_code = 6


class BackendUnavailableError(TriggerfishError):
    """The store cannot be opened or reached."""

    exit_code = 7


class MissingStoreError(BackendUnavailableError):
    """No store where one was looked for: a missing SQLite file, a Postgres schema
    without its table, an S3 prefix holding nothing. Only the commands that make a
    store (``demo create``, ``migrate`` into its target, a restore into an empty
    target) create one; every other command stops here (exit 7)."""


class InvalidDataError(TriggerfishError):
    """Malformed data or configuration: JSON, YAML, a manifest, a policy."""

    exit_code = 8


class WriteError(TriggerfishError):
    """A file or store could not be written: disk full, quota, read-only, permissions.

    Whatever was being written is left out entirely (temp files removed), so
    the operator frees space and runs the same command again.
    """

    exit_code = 9


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
