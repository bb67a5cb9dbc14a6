"""The work on the files a SQLite store lives in, for the modules outside storage/.

A physical restore (backup/physical.py) swaps a checked scratch copy in for
the store's file: it asks here who has the file open, gives the scratch its
identity, empties the live store's WAL into its file first and reads the rows
of a physical snapshot. ``status`` asks which processes have a file open.
They reach it through the Backend table (``Backend.files``: ``storage.backends.files_of``
the manifest's or the store's backend; ``openers``), never by importing this module.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from triggerfish_cli.cells import decode_text
from triggerfish_cli.errors import BusyError
from triggerfish_cli.serialization import now_iso
from triggerfish_cli.storage.identity import ID_TABLE, ID_TABLE_SQL
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.live_writers import (
    LiveWriter,
    describe_writers,
    live_writers,
    process_table,
)
from triggerfish_cli.storage.sqlite.sql import odd_rows, private_transaction


class LocalFiles:
    """SQLite's: a store is one file, with its ``-wal``, ``-shm`` and ``-journal``."""

    #: The files SQLite keeps beside a store's (``<db>-wal``, ...).
    SIDE_FILES = ("-wal", "-shm", "-journal")

    def writers(self, db: Path) -> list[LiveWriter]:
        """The other processes that have ``db`` open, as the write gate sees them: open
        files, then the ``-shm`` lock."""
        return live_writers(db)

    def describe_writers(self, writers: Sequence[Any]) -> str:
        """``writers`` (of :meth:`writers` or ``provider.live_writers()``) for a message."""
        return describe_writers(writers)

    def open(self, db: Path) -> StorageProvider:
        """The store in ``db`` (a restore's audit record goes into the store it produced)."""
        return SqliteStorage(db)

    def set_identity(self, scratch: Path, store_id: str | None) -> None:
        """Give the checked scratch copy the identity the restored store keeps.

        A private file nobody else has open (no write gate); its WAL is folded
        back into it before the swap, and fsynced (``synchronous=FULL``).
        """
        with contextlib.closing(sqlite3.connect(scratch, isolation_level=None)) as conn:
            present = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (ID_TABLE,)
            ).fetchone()
            current = (
                conn.execute(f"SELECT value FROM {ID_TABLE} WHERE name = 'id'").fetchone()
                if present
                else None
            )
            if (current[0] if current else None) == store_id:
                return
            conn.execute("PRAGMA synchronous=FULL")
            with private_transaction(conn):
                if present:
                    conn.execute(f"DELETE FROM {ID_TABLE}")
                if store_id is not None:
                    conn.execute(ID_TABLE_SQL)
                    conn.executemany(
                        f"INSERT INTO {ID_TABLE} (name, value) VALUES (?, ?)",
                        [("id", store_id), ("created", now_iso())],
                    )
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()

    def checkpoint(self, db: Path, force: bool) -> None:
        """Move every committed page of the WAL into the file, so a copy of the file
        has them all (BusyError while a writer keeps it from emptying, unless ``force``)."""
        try:
            with contextlib.closing(sqlite3.connect(db, timeout=5, isolation_level=None)) as conn:
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as exc:
            text = str(exc).lower()
            if force or not ("locked" in text or "busy" in text):
                return  # a damaged store (what a restore is for): kept as it is, -wal included
            raise BusyError(f"{db}: cannot checkpoint its WAL: {exc}") from exc
        wal = Path(str(db) + "-wal")
        if not force and ((busy and busy[0]) or (wal.exists() and wal.stat().st_size > 0)):
            raise BusyError(
                f"{db}: its WAL could not be emptied (a writer is active)",
                hint="stop the gateway first, or pass --force",
            )

    def snapshot_rows(self, snapshot: Path) -> Iterator[tuple[str, str]]:
        """Every ``(key, value)`` of a physical snapshot file, in key order; TEXT that is
        not UTF-8 too (cells.py)."""
        with contextlib.closing(sqlite3.connect(snapshot)) as conn:
            conn.text_factory = decode_text
            cursor = conn.execute("SELECT key, value FROM kv ORDER BY key")
            while rows := cursor.fetchmany(5000):
                yield from odd_rows(rows)

    def openers(self, path: Path) -> list[int] | None:
        """The processes that have ``path`` open, any file (None: this system does not
        show them)."""
        table = process_table()
        if table is None:
            return None
        return table.openers(table.pids(), [os.path.realpath(path)])


LOCAL_FILES = LocalFiles()
