"""The SQLite memory index's tables: their rows, a RAM copy, and the index's plumbing.

:class:`Fts5Tables` is the base of the index's parts (search, drift and
repair, and :class:`~triggerfish_cli.storage.sqlite.fts.Fts5Index` itself):
the connection, its errors, the write gate, kv lookups and the memory_fts
rows of one record.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from triggerfish_cli.errors import UsageError
from triggerfish_cli.memory.keys import PREFIX
from triggerfish_cli.memory.record import MemoryRecord, parse_record
from triggerfish_cli.serialization import fast_loads
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.fts_marks import has_marks
from triggerfish_cli.storage.sqlite.fts_query import fts_string, has_tokens
from triggerfish_cli.storage.sqlite.sql import (
    INSERT_FTS,
    KV_SCHEMA,
    MEMORY_FTS_SQL,
    MEMORY_META_SQL,
    UPSERT_META,
    lenient,
    odd_rows,
    private_transaction,
    translate_error,
)
from triggerfish_cli.storage.sqlite.write_gate import WriteGate

REPAIR_BATCH = 500

#: (agent_id, classification, key) of an index row
Triple = tuple[str, str, str]


def fts_row(record: MemoryRecord) -> tuple[str, str, str, str, str]:
    return (record.agent, record.level.name, record.key, record.content, " ".join(record.tags))


def in_memory_copy(rows: Iterable[tuple[str, str]]) -> sqlite3.Connection:
    """A RAM database with kv and both index tables holding every live record of ``rows``."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(KV_SCHEMA)
    conn.execute(MEMORY_FTS_SQL)
    conn.execute(MEMORY_META_SQL)
    loads = fast_loads()
    with private_transaction(conn):
        for skey, value in rows:
            record = parse_record(skey, value, loads)
            if isinstance(record, MemoryRecord) and record.live:
                conn.execute("INSERT INTO kv (key, value) VALUES (?, ?)", (skey, value))
                conn.execute(INSERT_FTS, fts_row(record))
                conn.execute(UPSERT_META, (*fts_row(record)[:3], value))
    return conn


def _query_error(exc: sqlite3.Error) -> bool:
    """Whether SQLite rejected the MATCH expression (rather than the database)."""
    text = str(exc)
    return text.startswith(("fts5:", "no such column", "unknown special query")) or any(
        part in text for part in ("unterminated string", "malformed MATCH", "parser stack")
    )


_KV_IN = "SELECT key, value FROM kv WHERE key IN "


def _fetch_all(sql: str, params: Sequence[Any]) -> Callable[[sqlite3.Connection], list[Any]]:
    """A read of every row of ``sql`` (for :func:`lenient`)."""
    return lambda conn: conn.execute(sql, params).fetchall()



def triple_key(triple: Triple) -> str:
    """The storage key of an index row's (agent, level, key)."""
    return f"{PREFIX}{triple[0]}:{triple[1]}:{triple[2]}"


class Fts5Tables:
    """The connection to the index tables (of a store, or a private RAM copy)."""

    def __init__(self, conn: sqlite3.Connection, storage: SqliteStorage | None = None) -> None:
        self.conn = conn
        self.storage = storage
        names = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE name IN ('memory_fts', 'memory_meta')"
            )
        }
        self.present = names == {"memory_fts", "memory_meta"}
        self.marked = self.present and has_marks(conn)
        self.kind = "sqlite-fts5" if self.present else "scan"
        self._docsize = self.present and bool(
            conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_fts_docsize'").fetchone()
        )

    @contextmanager
    def _errors(self, what: str, query: str | None = None) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            if query is not None and _query_error(exc):
                raise UsageError(f"invalid FTS5 query {query!r}: {exc}") from None
            where = f"{self.storage.path}: {what}" if self.storage else what
            raise translate_error(exc, where) from exc

    @contextmanager
    def _transaction(self, what: str) -> Iterator[sqlite3.Connection]:
        """On a store: its write gate. A private database of ours (RAM): a plain one."""
        if self.storage is not None:
            with self.storage.transaction(what) as conn:
                yield conn
            return
        with private_transaction(self.conn) as conn:
            yield conn

    def _gate(self) -> WriteGate | None:
        return self.storage.gate if self.storage is not None else None

    def _kv(self, keys: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(odd_rows(lenient(self.conn, _fetch_all(f"{_KV_IN}({marks})", chunk))))
        return found


    def _rows_of(self, conn: sqlite3.Connection, agent: str, level: str, key: str) -> list[int]:
        """rowids of the memory_fts rows of one record.

        The gateway deletes them with ``DELETE ... WHERE agent_id = ? AND
        classification = ? AND key = ?``, a scan of the whole table; a MATCH
        on the key's (or agent's) own tokens finds the same rows through the
        full-text index. Text without tokens falls back to the scan.
        """
        for column, text in (("key", key), ("agent_id", agent)):
            if has_tokens(text):
                rows = conn.execute(
                    "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? "
                    "AND agent_id = ? AND classification = ? AND key = ?",
                    (f"{{{column}}} : {fts_string(text)}", agent, level, key),
                )
                return [row[0] for row in rows]
        rows = conn.execute(
            "SELECT rowid FROM memory_fts WHERE agent_id = ? AND classification = ? AND key = ?",
            (agent, level, key),
        )
        return [row[0] for row in rows]

