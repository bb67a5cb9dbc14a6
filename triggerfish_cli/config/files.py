"""``triggerfish.yaml`` on disk: read exactly, locked while a config command works on
it, and the gateway's own backup copies of it beside it (``backups/``)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from triggerfish_cli.config import redaction
from triggerfish_cli.errors import (
    BusyError,
    InvalidDataError,
    NotFoundError,
)
from triggerfish_cli.fileio import atomic_writer
from triggerfish_cli.serialization import parse_iso, to_iso, utc_now


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ConfigFile:
    """``triggerfish.yaml`` as read: its exact text, and what the store would keep of it."""

    path: Path
    text: str
    mode: int

    @property
    def sha256(self) -> str:
        return sha256_text(self.text)

    def masked(self) -> str:
        """The text with plain-text secrets masked (what a version of it holds)."""
        return redaction.display_mask(self.text)


def read_config(path: Path, *, missing_ok: bool = False) -> ConfigFile | None:
    """Read the file exactly (bytes, strict UTF-8: no newline translation)."""
    try:
        data = path.read_bytes()
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        if missing_ok:
            return None
        raise NotFoundError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise InvalidDataError(f"{path}: is a directory, not a config file") from None
    except OSError as exc:
        raise InvalidDataError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidDataError(f"{path}: not UTF-8 text ({exc.reason})") from None
    return ConfigFile(path, text, mode)


@contextlib.contextmanager
def config_lock(path: Path, timeout: float = 10.0) -> Iterator[None]:
    """Serialise config-changing commands on one file (an advisory lock on its directory).

    Two operators snapshotting at once would otherwise both take the same
    number. The gateway does not take this lock; a rollback re-checks the
    file it read before it writes instead.
    """
    try:
        # lazy: POSIX only: without fcntl (Windows) no lock is taken
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        yield
        return
    try:
        fd = os.open(path.parent if str(path.parent) else ".", os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BusyError(
                        f"{path}: another triggerfish-admin config command is working on it"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


# -- the gateway's own backup copies ----------------------------------------------

_BACKUP_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2})-(\d{2})-(\d{2}(?:\.\d{1,9})?)Z$")


def backup_time(name: str, stem: str) -> str | None:
    """``triggerfish.yaml.2026-02-16T14-30-45.123Z`` -> ``2026-02-16T14:30:45.123Z``."""
    if not name.startswith(stem + "."):
        return None
    match = _BACKUP_TIME.match(name[len(stem) + 1 :])
    if match is None:
        return None
    day, hour, minute, second = match.groups()
    moment = parse_iso(f"{day}T{hour}:{minute}:{second}Z")
    return to_iso(moment) if moment is not None else None


def backup_name(stem: str, created_at: str) -> str:
    """The gateway's name for a copy made at ``created_at``: ':' becomes '-'."""
    return f"{stem}.{created_at.replace(':', '-')}"


def default_backups_dir(config_path: Path) -> Path:
    """Where the gateway keeps copies of this file: ``<its directory>/backups``."""
    return config_path.parent / "backups"


def write_backup_copy(config: ConfigFile) -> Path:
    """A copy in the gateway's own format, for a file whose secrets the store cannot keep."""
    directory = default_backups_dir(config.path)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    moment = utc_now()
    while True:  # never replace a copy made in the same millisecond, nor anything else
        target = directory / backup_name(config.path.name, to_iso(moment))
        try:
            with atomic_writer(target, mode=0o600, binary=True, exclusive=True) as handle:
                handle.write(config.text.encode("utf-8"))
            return target
        except FileExistsError:
            moment += timedelta(milliseconds=1)
