"""SQLite statements and helpers shared by the backend's modules: the gateway's
schema, key-range clauses, binding and reading odd cells, error translation."""

from __future__ import annotations

import builtins
import itertools
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from triggerfish_cli import cells
from triggerfish_cli.errors import (
    FILES_HINT,
    TOO_MANY,
    BackendUnavailableError,
    BusyError,
    InvalidDataError,
    ResourceError,
    TriggerfishError,
    WriteError,
    out_of_files,
)
from triggerfish_cli.storage import key_ranges

#: Exactly the statement the gateway runs at start-up.
KV_SCHEMA = "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)"

#: The gateway's memory search tables, created by the gateway at start-up.
MEMORY_INDEX_TABLES = ("memory_fts", "memory_meta")
#: Their statements, exactly as the gateway runs them (UPSTREAM.md).
MEMORY_FTS_SQL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5("
    "agent_id, classification, key, content, tags, tokenize='porter unicode61')"
)
MEMORY_META_SQL = (
    "CREATE TABLE IF NOT EXISTS memory_meta ("
    "agent_id TEXT NOT NULL, classification TEXT NOT NULL, key TEXT NOT NULL, "
    "record_json TEXT NOT NULL, PRIMARY KEY (agent_id, classification, key))"
)
# The gateway's index statements (src/tools/memory/search/search_fts5.ts), verbatim.
DELETE_FTS = "DELETE FROM memory_fts WHERE agent_id = ? AND classification = ? AND key = ?"
INSERT_FTS = (
    "INSERT INTO memory_fts (agent_id, classification, key, content, tags) VALUES (?, ?, ?, ?, ?)"
)
UPSERT_META = (
    "INSERT OR REPLACE INTO memory_meta (agent_id, classification, key, record_json) "
    "VALUES (?, ?, ?, ?)"
)
DELETE_META = "DELETE FROM memory_meta WHERE agent_id = ? AND classification = ? AND key = ?"

T = TypeVar("T")

SQLITE_HEADER = b"SQLite format 3\x00"
DEFAULT_BUSY_TIMEOUT_MS = 5000
MMAP_SIZE = 2_147_418_112  # SQLite's default ceiling (about 2 GiB)
CACHE_SIZE_KIB = -65_536  # a 64 MiB page cache (negative: KiB), grown only as used


def gap_clause(low: str | None, high: str | None) -> tuple[str, list[str]]:
    """SQL condition and parameters selecting keys with ``low <= key < high`` (None: open)."""
    return key_ranges.between(low, high, mark="?", true="1")


def range_clause(prefix: str | None, start_after: str | None = None) -> tuple[str, list[Any]]:
    """SQL condition and parameters selecting keys under ``prefix`` after ``start_after``.

    A NULL key (cells.py) sorts before every other: keys after it are all
    the others. Keys after an odd cell compare with its stored bytes, and a
    prefix that is not UTF-8 text selects by its bytes.
    """
    if prefix and not cells.is_plain(prefix):
        low = cells.raw_bytes(prefix)
        conditions: builtins.list[str] = ["key >= CAST(? AS TEXT)"]
        params: builtins.list[Any] = [low]
        high = low.rstrip(b"\xff")
        if high:
            conditions.append("key < CAST(? AS TEXT)")
            params.append(high[:-1] + bytes([high[-1] + 1]))
        if start_after is not None and start_after != cells.NULL_CELL:
            conditions.append(f"key > {CELL_SQL}")
            params += cell_params(start_after)
        return " AND ".join(conditions), params
    if start_after is not None and not cells.is_plain(start_after):
        if start_after == cells.NULL_CELL:
            start_after = None
            if not prefix:
                return "key IS NOT NULL", []
        else:
            where, params = key_ranges.under(prefix, None, mark="?", true="1")
            return f"({where}) AND key > {CELL_SQL}", [
                *params,
                *cell_params(start_after),
            ]
    return key_ranges.under(prefix, start_after, mark="?", true="1")


def scan_queries(
    ranges: Sequence[tuple[str, builtins.list[Any]]],
    excluding: Sequence[str],
    *,
    table_scan: bool,
) -> builtins.list[tuple[str, builtins.list[Any]]]:
    """The queries of a scan of key ``ranges`` (range_clause) but none under ``excluding``:
    one ``NOT INDEXED`` table scan in storage order, or one range query each."""
    skips = [range_clause(prefix) for prefix in excluding if prefix]
    skip = "".join(f" AND NOT ({clause})" for clause, _ in skips)
    skip_params = [param for _, clause_params in skips for param in clause_params]
    if table_scan:
        where = " OR ".join(f"({clause})" for clause, _ in ranges)
        params = [param for _, clause_params in ranges for param in clause_params]
        return [
            (f"SELECT key, value FROM kv NOT INDEXED WHERE ({where}){skip}", params + skip_params)
        ]
    return [(f"SELECT key, value FROM kv WHERE ({w}){skip}", p + skip_params) for w, p in ranges]


def sqlite_param(text: str) -> tuple[Any, int]:
    """``(parameter, cast)`` binding the cell: ``CASE WHEN cast THEN CAST(p AS TEXT) ELSE p``."""
    if cells.is_plain(text):
        return text, 0
    if text == cells.NULL_CELL:
        return None, 0
    if text.startswith(cells.BLOB_MARK):
        return cells.raw_bytes(text), 0
    return cells.raw_bytes(text), 1


#: The SQL expression of a cell bound with :func:`sqlite_param` (three parameters).
CELL_SQL = "CASE WHEN ? THEN CAST(? AS TEXT) ELSE ? END"


def cell_params(text: str) -> list[Any]:
    """The three parameters of :data:`CELL_SQL` for ``text``."""
    param, cast = sqlite_param(text)
    return [cast, param, param]


UNDECODABLE = "could not decode to utf-8"


def lenient(conn: sqlite3.Connection, run: Callable[[sqlite3.Connection], T]) -> T:
    """``run(conn)``; when it meets TEXT that is not UTF-8, again with the lenient decoder
    (cells.py: such a cell becomes a str with lone surrogates), which stays on."""
    try:
        return run(conn)
    except sqlite3.OperationalError as exc:
        if UNDECODABLE not in str(exc).lower() or conn.text_factory is cells.decode_text:
            raise
        conn.text_factory = cells.decode_text
        return run(conn)


_ONLY_STR = frozenset({str})


def odd_rows(rows: builtins.list[Any]) -> builtins.list[Any]:
    """Rows of kv cells with every cell a str (cells.py): BLOBs and NULLs converted."""
    if set(map(type, itertools.chain.from_iterable(rows))) <= _ONLY_STR:  # the usual case, in C
        return rows
    for index, row in enumerate(rows):
        for cell in row:
            if cell.__class__ is not str:
                rows[index] = tuple(cells.from_sqlite(item) for item in row)
                break
    return rows


def cell_statement(sql: str) -> str:
    """``sql`` (one ``?`` per key or value) taking odd cells: three parameters each."""
    cell = CELL_SQL
    sql = sql.replace("SET value = ?", f"SET value = {cell}")
    sql = re.sub(r"\b(key|value) = \?", lambda m: f"{m.group(1)} IS {cell}", sql)
    return sql.replace("VALUES (?, ?)", f"VALUES ({cell}, {cell})")


def split_rows(
    rows: Iterable[Sequence[str]],
) -> tuple[builtins.list[Sequence[str]], builtins.list[builtins.list[Any]]]:
    """Plain rows as they are; rows holding an odd cell with their parameters expanded."""
    rows = rows if isinstance(rows, builtins.list) else builtins.list(rows)
    if all(map(str.isascii, itertools.chain.from_iterable(rows))):  # the usual case, in C
        return rows, []
    plain: builtins.list[Sequence[str]] = []
    odd: builtins.list[builtins.list[Any]] = []
    for row in rows:
        if all(cells.is_plain(cell) for cell in row):
            plain.append(row)
        else:
            odd.append([param for cell in row for param in cell_params(cell)])
    return plain, odd


def execute_rows(conn: sqlite3.Connection, sql: str, rows: Iterable[Sequence[str]]) -> None:
    """``executemany(sql, rows)``, odd cells (cells.py) bound as exactly what they are."""
    execute_split(conn, sql, split_rows(rows))


def execute_split(
    conn: sqlite3.Connection,
    sql: str,
    split: tuple[builtins.list[Sequence[str]], builtins.list[builtins.list[Any]]],
) -> None:
    """:func:`execute_rows` of rows :func:`split_rows` has already looked at (before the
    write lock was taken: that look reads every cell of a non-ASCII row)."""
    plain, odd = split
    if plain:
        conn.executemany(sql, plain)
    if odd:
        conn.executemany(cell_statement(sql), odd)


def translate_error(exc: sqlite3.Error, where: str) -> TriggerfishError:
    """Map a sqlite3 error to the error (and exit code) an operator should see."""
    text = str(exc)
    lowered = text.lower()
    if "locked" in lowered or "busy" in lowered:
        return BusyError(
            f"{where}: the database is locked by another process ({text})",
            hint="retry, or stop the writer that holds it",
        )
    if "not a database" in lowered or "malformed" in lowered or "corrupt" in lowered:
        return InvalidDataError(f"{where}: {text}")
    if "disk is full" in lowered:
        return WriteError(f"{where}: {text}", hint="nothing of this transaction was written")
    if out_of_files():  # SQLite's "unable to open", or a read-only open, for want of files
        return ResourceError(f"{where}: {TOO_MANY} ({text})", hint=FILES_HINT)
    if "readonly" in lowered or "read-only" in lowered:
        return WriteError(
            f"{where}: the store can only be read here ({text})",
            hint="a read-only file or file system; nothing was written",
        )
    if isinstance(exc, sqlite3.OperationalError):
        return BackendUnavailableError(f"{where}: {text}")
    return TriggerfishError(f"{where}: {text}")


@contextmanager
def private_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction on a private database of ours (in RAM, or a scratch copy
    nobody else opens): nobody to pause, so no write gate. Never on a store."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
