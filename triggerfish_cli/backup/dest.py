"""Where backups live: a local directory (here) or an S3 prefix (storage/s3/destination.py);
backup/destinations.py opens either.

Both offer the same small interface to create, list, verify, restore and
prune: archives by name, their manifests (read from the archive's end), and
a ``<name>.verified`` marker per archive recording the last verification.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from triggerfish_cli.backup.archive import is_archive_name, read_manifest
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.errors import NotFoundError, TriggerfishError, UsageError, write_error
from triggerfish_cli.fileio import (
    atomic_writer,
    fsync_dir,
    nofollow,
    pid_alive,
    publish,
    refuse_link,
)

MARKER_SUFFIX = ".verified"


@dataclass
class Entry:
    """One archive in a destination."""

    name: str
    size: int
    manifest: Manifest | None = None
    error: str | None = None
    marker: dict[str, Any] | None = None

    @property
    def verified(self) -> str:
        """``yes`` (verified, this very payload), ``keyless`` (an encrypted one verified
        without its key: the encrypted bytes are intact, the contents not checked),
        ``FAILED``, or ``no``."""
        if self.manifest is None or self.marker is None:
            return "no"
        if self.marker.get("sha256") != self.manifest.archive_sha256:
            return "no"
        if self.marker.get("size") not in (None, self.size):  # changed since verified
            return "no"
        if not self.marker.get("ok"):
            return "FAILED"
        return "keyless" if self.marker.get("contents_checked") is False else "yes"

    @property
    def contents_checked_at(self) -> str | None:
        """When a verify that checked the contents found this very archive good."""
        return (self.marker or {}).get("at") if self.verified == "yes" else None

    @property
    def created(self) -> str:
        return self.manifest.created if self.manifest else ""

    def as_dict(self) -> dict[str, Any]:
        manifest = self.manifest
        return {
            "name": self.name,
            "created": manifest.created if manifest else None,
            "kind": manifest.kind if manifest else None,
            "label": manifest.label if manifest else None,
            "size": self.size,
            "keys": manifest.keys if manifest and not manifest.sealed else None,
            "compression": manifest.compression if manifest else None,
            "encrypted": manifest.encrypted if manifest else None,
            "verified": self.verified,
            "verified_at": (self.marker or {}).get("at") if self.verified != "no" else None,
            "store_id": manifest.store_id if manifest else None,
            "source": manifest.source or None if manifest else None,
            "host": manifest.host if manifest else None,
            "partial": manifest.partial if manifest else None,
            "max_taint": manifest.max_taint if manifest else None,
            "error": self.error,
        }


class Destination(Protocol):
    def describe(self) -> str: ...

    def entries(self) -> list[Entry]: ...

    def entry(self, name: str) -> Entry: ...

    def exists(self, name: str) -> bool: ...

    def writer(self, name: NewName) -> contextlib.AbstractContextManager[IO[bytes]]: ...

    def staging(self, name: NewName) -> contextlib.AbstractContextManager[Path]: ...

    def local_copy(
        self, name: str, scratch: Path | None
    ) -> contextlib.AbstractContextManager[Path]: ...

    def delete(self, name: str) -> None: ...

    def read_range(self, name: str, offset: int, length: int) -> bytes: ...

    def write_marker(self, name: str, marker: dict[str, Any]) -> None: ...

    def scratch_dir(self) -> Path | None: ...


@dataclass
class NewName:
    """The name a new archive is published under: ``pick(serial)`` for the first
    ``serial`` (from ``serial`` on) that nothing has when the archive is published.

    A name is claimed atomically, never replaced: two runs that pick the same
    name in the same millisecond both keep their archive, the later one under
    the next serial (a hard link or an exclusive create here, a conditional put
    in S3).
    """

    pick: Callable[[int], str]
    serial: int = 0

    @property
    def name(self) -> str:
        return self.pick(self.serial)


def parse_marker(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class LocalDestination:
    """A directory of archives (created 0700 when missing, for ``backup create``)."""

    def __init__(self, directory: Path, *, create: bool = False) -> None:
        self.directory = directory
        if directory.exists() and not directory.is_dir():
            raise UsageError(
                f"{directory}: is a file, not a directory of backups",
                hint="backups go in a directory (or s3://bucket/prefix); the archive's "
                "name is chosen for it",
            )
        if create:
            try:
                directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                raise write_error(directory, exc) from exc

    def describe(self) -> str:
        return str(self.directory)

    def path(self, name: str) -> Path:
        return self.directory / name

    def exists(self, name: str) -> bool:
        return self.path(name).exists()

    def entries(self) -> list[Entry]:
        if not self.directory.is_dir():
            return []
        found = []
        for child in sorted(self.directory.iterdir()):
            if is_archive_name(child.name) and child.is_file():
                found.append(self.entry(child.name))
        return found

    def entry(self, name: str) -> Entry:
        path = self.path(name)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise NotFoundError(f"{path}: no such backup") from None
        entry = Entry(name, size)
        try:
            entry.manifest = read_manifest(path)
        except TriggerfishError as exc:
            entry.error = str(exc)
        with contextlib.suppress(OSError):
            entry.marker = parse_marker(self.path(name + MARKER_SUFFIX).read_text(encoding="utf-8"))
        return entry

    @contextlib.contextmanager
    def writer(self, name: NewName) -> Iterator[IO[bytes]]:
        with self.staging(name) as temp, open(temp, "r+b", opener=nofollow) as handle:
            yield handle

    @contextlib.contextmanager
    def staging(self, name: NewName) -> Iterator[Path]:
        """A private (0600) temp file beside the final name; fsynced and published on
        success under ``name.name``, the first of its names free then (never replacing
        anything there, a link included: :func:`fileio.publish`)."""
        final = self.path(name.name)
        try:
            remove_stale(self.directory)
            fd, temp_name = tempfile.mkstemp(
                prefix=f".{name.name}.{os.getpid()}.", suffix=".tmp", dir=self.directory
            )
        except OSError as exc:
            raise write_error(final, exc) from exc
        os.close(fd)
        temp = Path(temp_name)
        try:
            yield temp
            with open(temp, "rb+", opener=nofollow) as handle:
                os.fsync(handle.fileno())
            while True:
                final = self.path(name.name)
                try:
                    publish(temp, final)
                    break
                except FileExistsError:
                    name.serial += 1
        except BaseException as exc:
            temp.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise write_error(final, exc) from exc
            raise
        fsync_dir(self.directory)

    @contextlib.contextmanager
    def local_copy(self, name: str, scratch: Path | None) -> Iterator[Path]:
        path = self.path(name)
        if not path.is_file():
            raise NotFoundError(f"{path}: no such backup")
        yield path

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        with self.path(name).open("rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    def delete(self, name: str) -> None:
        for victim in (self.path(name), self.path(name + MARKER_SUFFIX)):
            with contextlib.suppress(FileNotFoundError):
                victim.unlink()

    def write_marker(self, name: str, marker: dict[str, Any]) -> None:
        """Best effort (a read-only destination is verified all the same), but a marker
        that is a symbolic link is refused (exit 4): never written through, nor replaced."""
        path = self.path(name + MARKER_SUFFIX)
        refuse_link(path, "a verification marker")
        with contextlib.suppress(TriggerfishError), atomic_writer(path, mode=0o600) as handle:
            handle.write(json.dumps(marker) + "\n")

    def scratch_dir(self) -> Path | None:
        return self.directory if os.access(self.directory, os.W_OK) else None


@contextlib.contextmanager
def temp_dir(near: Path | None, what: str) -> Iterator[Path]:
    """A private scratch directory in ``near`` (else the system temp), removed afterwards."""
    try:
        if near is not None:
            near.mkdir(parents=True, exist_ok=True, mode=0o700)
            remove_stale(near)
        path = Path(
            tempfile.mkdtemp(prefix=f".tfadmin-{os.getpid()}-", suffix=f".{what}", dir=near)
        )
    except OSError as exc:
        where = near or tempfile.gettempdir()
        raise write_error(f"{where} (scratch)", exc) from exc
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


_STALE = re.compile(r"^\.(?:triggerfish-.+\.(\d+)\.[^.]+\.tmp|tfadmin-(\d+)-.+)$")


def remove_stale(directory: Path) -> list[str]:
    """Remove the temp files and scratch directories of our processes that died (kill -9)."""
    removed: list[str] = []
    try:
        children = list(directory.iterdir())
    except OSError:
        return removed
    for child in children:
        match = _STALE.match(child.name)
        if match is None:
            continue
        pid = int(match.group(1) or match.group(2))
        if pid == os.getpid() or pid_alive(pid):
            continue
        with contextlib.suppress(OSError):
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
            removed.append(child.name)
    return removed
