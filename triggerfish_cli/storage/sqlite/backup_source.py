"""A SQLite store's physical snapshots for ``backup create`` (backup.counts.SnapshotSource).

The pages of one WAL read snapshot of the live store stream through the
consumer (snapshot.py: it never blocks the gateway's writers; the online
backup API into a scratch copy is the fallback), and the keys per namespace
and memories per level are counted (counts.py) from that same snapshot, so
they match the archive exactly. Reached through storage/backends.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from triggerfish_cli.backup.counts import PhysicalSnapshot
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.counts import count_rows
from triggerfish_cli.storage.sqlite.snapshot import stream_snapshot

T = TypeVar("T")


class SqliteSnapshots:
    """Physical snapshots of the live SQLite store ``provider``."""

    sqlite_version: str | None = sqlite3.sqlite_version

    def __init__(self, provider: StorageProvider) -> None:
        assert isinstance(provider, SqliteStorage)
        self.provider = provider

    def size(self) -> int | None:
        """About what a snapshot of the file reads: the database and its WAL."""
        path = self.provider.path
        try:
            size = path.stat().st_size
        except OSError:
            return None
        wal = Path(f"{path}-wal")
        return size + (wal.stat().st_size if wal.exists() else 0)

    def stream(
        self,
        scratch: Path,
        consume: Callable[[Iterator[bytes | memoryview]], T],
        *,
        chunk: int,
    ) -> tuple[T, PhysicalSnapshot]:
        """Stream a snapshot of the store through ``consume``; count its keys meanwhile.

        ``scratch``: where a fallback copy may go.
        """
        # the counts read the key index through the page cache: through the map,
        # every page near an index page would stay in our resident set
        with self.provider.unmapped():
            result, snapshot = stream_snapshot(
                self.provider, scratch, consume, inspect=count_rows, chunk=chunk
            )
        return result, PhysicalSnapshot(snapshot.page_size, snapshot.page_count, snapshot.inspected)
