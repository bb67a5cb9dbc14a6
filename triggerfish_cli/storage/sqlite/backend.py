"""The SQLite backend: the default, working on the gateway's own file.

The gateway creates ``kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)`` in a
WAL database and writes it with autocommitted ``INSERT OR REPLACE``. We use
that table as it is and never alter it (tables of our own are prefixed
``tfadmin_``). The gateway sets no busy timeout, so while we hold the write
lock its writes fail at once: every write transaction here is short, and
bulk work goes in batches.

Prefixes are listed exactly, with ``key >= :p AND key < :p_next`` range
queries on the primary-key index (binary collation, i.e. byte order), never
with the gateway's ``LIKE``, which treats ``_`` and ``%`` as wildcards,
ignores ASCII case and cannot use the index.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

from triggerfish_cli import cells
from triggerfish_cli.errors import (
    BackendUnavailableError,
    BusyError,
    InvalidDataError,
    MissingStoreError,
    TriggerfishError,
    WriteError,
)
from triggerfish_cli.storage import kept_files, key_ranges
from triggerfish_cli.storage.batching import BatchSizer
from triggerfish_cli.storage.identity import ID_TABLE, ID_TABLE_SQL
from triggerfish_cli.storage.provider import (
    DEFAULT_BATCH,
    BaseStorage,
    BatchCallback,
    PrefixStats,
    after_batch,
    batched,
    prefix_upper_bound,
    uncovered_ranges,
)
from triggerfish_cli.storage.sqlite.live_writers import LiveWriter, live_writers
from triggerfish_cli.storage.sqlite.write_gate import (
    ATTEMPTS,
    FreezeTooLong,
    WriteGate,
    mode_for,
    retried,
)

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


_UNDECODABLE = "could not decode to utf-8"


def lenient(conn: sqlite3.Connection, run: Callable[[sqlite3.Connection], T]) -> T:
    """``run(conn)``; when it meets TEXT that is not UTF-8, again with the lenient decoder
    (cells.py: such a cell becomes a str with lone surrogates), which stays on."""
    try:
        return run(conn)
    except sqlite3.OperationalError as exc:
        if _UNDECODABLE not in str(exc).lower() or conn.text_factory is cells.decode_text:
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
    plain, odd = split_rows(rows)
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


class SqliteStorage(BaseStorage):
    backend = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = False,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        live_writers: str | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.busy_timeout_ms = busy_timeout_ms
        #: freeze | refuse | ignore (write_gate.py); None: the operator's choice.
        self.gate_mode = mode_for(live_writers)
        self._gate: WriteGate | None = None
        self._sizers: dict[str, BatchSizer] = {}
        self._conn: sqlite3.Connection | None = None
        opened = _open(
            self.path, create=create, busy_timeout_ms=busy_timeout_ms, read_only=read_only
        )
        self._conn = opened.conn
        #: Only readable here: a read-only file or file system (or ``read_only``).
        self.read_only = opened.read_only
        if opened.fresh:  # asked to make the store: its table, through the write gate
            try:
                self.write(create_store, "create the store")
            except BaseException:
                self.close()
                raise

    # -- plumbing ---------------------------------------------------------

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection, for SQLite-specific modules (memory index, backup)."""
        if self._conn is None:
            raise BackendUnavailableError(f"{self.describe()}: the store is closed")
        return self._conn

    def describe(self) -> str:
        return f"sqlite:{self.path}"

    @property
    def gate(self) -> WriteGate:
        """The write gate every write transaction on this store passes (write_gate.py)."""
        if self._gate is None:
            self._gate = WriteGate(self.path, self.gate_mode, busy_timeout_ms=self.busy_timeout_ms)
        return self._gate

    @property
    def write_gate(self) -> WriteGate:
        return self.gate

    def live_writers(self) -> builtins.list[LiveWriter]:
        """The other processes that have the store open (the gateway's daemon and CLI)."""
        return live_writers(self.path)

    def atomic_loads(self) -> bool:
        """One transaction for a whole load, unless live writers must be paused for it
        (the gate keeps each transaction short: the load goes in batches then)."""
        return not self.gate.will_freeze()

    def gate_stats(self) -> dict[str, Any] | None:
        """What the write gate did so far (None: nothing was written)."""
        return None if self._gate is None else self._gate.stats.as_dict()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._gate is not None:
            self._gate.close()
            self._gate = None
        kept_files.release()  # descriptors read beside SQLite, now that its locks are gone

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Turn sqlite3 errors raised inside into TriggerfishErrors."""
        try:
            yield
        except sqlite3.Error as exc:
            raise translate_error(exc, f"{self.path}: {what}") from exc

    @contextmanager
    def transaction(self, what: str = "write") -> Iterator[sqlite3.Connection]:
        """A short write transaction (``BEGIN IMMEDIATE``): all or nothing.

        The only way this tool writes to a SQLite store: it passes the write
        gate, which keeps the live writers (the gateway) from writing while
        we hold the lock (storage/sqlite/write_gate.py). Interrupted (Ctrl-C) or
        failing, it rolls back and leaves the store as it was. Keep what runs
        inside short: the gateway is stopped meanwhile, and a transaction that
        would keep it stopped longer than the gate allows is rolled back
        (:class:`FreezeTooLong`, exit 6).
        """
        conn = self.connection
        with self.errors(what), self.gate.transaction(conn) as held:
            yield held

    def write(self, work: Callable[[sqlite3.Connection], T], what: str = "write") -> T:
        """``work(conn)`` in one transaction, tried again when a hiccup cut its freeze short."""

        def once() -> T:
            with self.transaction(what) as conn:
                return work(conn)

        return retried(once)

    @contextmanager
    def read_snapshot(self, what: str = "read") -> Iterator[sqlite3.Connection]:
        """One read transaction: every read inside sees the snapshot its first read took.

        In WAL mode a reader never blocks the gateway's writes; it only keeps
        a checkpoint from finishing past the snapshot until it ends, so a
        PASSIVE checkpoint runs as soon as it ends (the gateway's next commit
        does not inherit the backlog).
        """
        conn = self.connection
        with self.errors(what):
            conn.execute("BEGIN")
        try:
            yield conn
        finally:
            # Ending a read cannot lose anything; on a damaged (or, for a scan left
            # unfinished, already closed) connection it may fail too, and must not
            # hide the error that brought us here.
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    try:
                        conn.execute("COMMIT")
                    except sqlite3.Error:
                        conn.execute("ROLLBACK")
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()

    def _lenient(self, exc: sqlite3.Error) -> bool:
        """Met TEXT that is not UTF-8: from now on decode it as an odd cell (cells.py).

        True when the read is worth trying again. The strict default decoder
        is SQLite's own (fast); the lenient one runs in Python, so it is only
        switched on for a store that needs it.
        """
        conn = self.connection
        if _UNDECODABLE not in str(exc).lower() or conn.text_factory is cells.decode_text:
            return False
        conn.text_factory = cells.decode_text
        return True

    def _read(self, what: str, run: Callable[[sqlite3.Connection], T]) -> T:
        """``run(conn)``, tried again with the lenient decoder when a cell is not UTF-8."""
        try:  # not self.errors(): a generator context costs more than a short read
            try:
                return run(self.connection)
            except sqlite3.OperationalError as exc:
                if not self._lenient(exc):
                    raise
                return run(self.connection)
        except sqlite3.Error as exc:
            raise translate_error(exc, f"{self.path}: {what}") from exc

    def _rows(self, what: str, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        """All rows of a query on kv cells, each cell a str (cells.py)."""
        return odd_rows(self._read(what, lambda conn: conn.execute(sql, params).fetchall()))

    def _fetch(
        self, conn: sqlite3.Connection, sql: str, params: Sequence[Any], batch_size: int
    ) -> Iterator[tuple[Any, ...]]:
        """The rows of one query, ``batch_size`` at a time, each cell a str (cells.py).

        A cell that is not UTF-8 switches the decoder and the query runs
        again (same snapshot, same order), past the rows already given.
        """
        given = 0
        while True:
            with self.errors("scan"):
                cursor = conn.execute(sql, params)
            skip = given
            try:
                while True:
                    with self.errors("scan"):
                        try:
                            rows = cursor.fetchmany(batch_size)
                        except sqlite3.OperationalError as exc:
                            if not self._lenient(exc):
                                raise
                            raise _Again from None
                    if not rows:
                        return
                    if skip:
                        dropped = min(skip, len(rows))
                        rows, skip = rows[dropped:], skip - dropped
                    given += len(rows)
                    yield from odd_rows(rows)
            except _Again:
                continue

    def tables(self) -> set[str]:
        with self.errors("read schema"):
            rows = self.connection.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
        return {row[0] for row in rows}

    def record_store_id(self, candidate: str) -> None:
        """Record ``candidate`` as the id unless one is there (the first one written wins):
        one short transaction through the write gate, tried again if a hiccup cut it short."""
        from triggerfish_cli.serialization import now_iso

        rows = [("id", candidate), ("created", now_iso())]
        for attempt in range(3):
            try:
                with self.transaction("record the store's id") as conn:
                    conn.execute(ID_TABLE_SQL)
                    conn.executemany(
                        f"INSERT OR IGNORE INTO {ID_TABLE} (name, value) VALUES (?, ?)", rows
                    )
                return
            except FreezeTooLong:
                if attempt == 2:
                    raise

    def store_id(self) -> str | None:
        """This store's id (storage/identity.py); None when none was ever recorded."""
        with self.errors("read the store's id"):
            conn = self.connection
            if (
                conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (ID_TABLE,)
                ).fetchone()
                is None
            ):
                return None
            row = conn.execute(f"SELECT value FROM {ID_TABLE} WHERE name = 'id'").fetchone()
        return None if row is None else str(row[0])

    # -- the five ---------------------------------------------------------

    def get(self, key: str) -> str | None:
        if cells.is_plain(key):
            rows = self._rows("get", "SELECT value FROM kv WHERE key = ?", (key,))
        else:
            rows = self._rows(
                "get", f"SELECT value FROM kv WHERE key IS {CELL_SQL}", cell_params(key)
            )
        return rows[0][0] if rows else None

    def set(self, key: str, value: str) -> None:
        self.write(
            lambda conn: execute_rows(
                conn, "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", [(key, value)]
            ),
            "set",
        )

    def delete(self, key: str) -> None:
        self.write(
            lambda conn: execute_rows(conn, "DELETE FROM kv WHERE key = ?", [(key,)]), "delete"
        )

    def list(self, prefix: str | None = None) -> list[str]:
        where, params = range_clause(prefix)
        rows = self._rows("list", f"SELECT key FROM kv WHERE {where} ORDER BY key", params)
        return [row[0] for row in rows]

    def clear(self) -> None:
        """Delete every key, and the memory search rows that index them.

        One transaction when it fits in a pause of the live writers (always,
        with nobody to pause); else in gate-sized batches, by rowid, of the
        rows present when the clear began: what the gateway writes meanwhile
        stays.
        """
        present = self.tables()
        tables = [table for table in MEMORY_INDEX_TABLES if table in present] + ["kv"]

        def everything(conn: sqlite3.Connection) -> None:
            for table in tables:
                conn.execute(f"DELETE FROM {table}")

        try:
            self.write(everything, "clear")
            return
        except FreezeTooLong:
            pass
        with self.errors("clear"):
            tops = {
                table: self.connection.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
                for table in tables
            }
        sizer = BatchSizer(50_000, budget=self.gate.budget)
        cuts = 0
        for table in tables:
            if tops[table] is None:
                continue
            sql = (
                f"DELETE FROM {table} WHERE rowid IN "
                f"(SELECT rowid FROM {table} WHERE rowid <= ? LIMIT ?)"
            )
            while True:
                try:
                    with self.transaction("clear") as conn:
                        gone = conn.execute(sql, (tops[table], sizer.size)).rowcount
                except FreezeTooLong:
                    cuts = cuts + 1 if sizer.size == 1 else 0
                    if cuts >= ATTEMPTS:
                        raise
                    sizer.cut()
                    continue
                cuts = 0
                if gone == 0:
                    break
                sizer.record(gone, self.gate.last_hold, self.gate.last_frozen)

    # -- native admin operations -------------------------------------------

    def _paged(
        self, columns: str, prefix: str | None, start_after: str | None, batch_size: int
    ) -> Iterator[tuple[str, ...]]:
        last = start_after
        if not prefix and start_after is None:  # NULL keys first (they are not unique)
            yield from self._rows("scan", f"SELECT {columns} FROM kv WHERE key IS NULL")
            last = cells.NULL_CELL
        while True:
            where, params = range_clause(prefix, last)
            rows = self._rows(
                "scan",
                f"SELECT {columns} FROM kv WHERE {where} ORDER BY key LIMIT ?",
                [*params, batch_size],
            )
            yield from rows
            if len(rows) < batch_size:
                return
            last = rows[-1][0]

    def scan(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> Iterator[tuple[str, str]]:
        yield from self._paged("key, value", prefix, start_after, batch_size)  # type: ignore[misc]

    def head(self, prefix: str, limit: int) -> builtins.list[tuple[str, str]]:
        """One query, no generator: a listing's page costs little more than its SQL."""
        if not prefix or limit <= 0:
            return super().head(prefix, limit)
        where, params = range_clause(prefix)
        sql = f"SELECT key, value FROM kv WHERE {where} ORDER BY key LIMIT ?"
        return self._rows("scan", sql, [*params, limit])

    def snapshot_scan(self, *, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[str, str]]:
        """Every key and value in key order from ONE read transaction (WAL: no writer waits)."""
        with self.read_snapshot("scan") as conn:
            yield from self._fetch(conn, "SELECT key, value FROM kv ORDER BY key", (), batch_size)

    def scan_stored(self, *, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[str, bytes]]:
        """Every key with its value exactly as stored (UTF-8 bytes, not decoded), key order."""
        for key, value in self._paged("key, CAST(value AS BLOB)", None, None, batch_size):
            yield key, cells.raw_bytes(value)

    def scan_keys(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> Iterator[str]:
        for row in self._paged("key", prefix, start_after, max(batch_size, 5000)):
            yield row[0]

    def scan_many(
        self, prefixes: Sequence[str], *, batch_size: int = DEFAULT_BATCH
    ) -> Iterator[tuple[str, str]]:
        """One read transaction; a table scan in storage order when it is worth it.

        Rows are stored in write order (rowid), not key order: reading a key
        range costs a lookup per key, while a table scan reads pages in
        order, about twice as fast when most of the store is wanted. So when
        the prefixes hold at least a quarter of the keys (counted on the key
        index), one ``NOT INDEXED`` scan filters them; otherwise one range
        query per prefix. Either way inside one read transaction
        (:meth:`read_snapshot`): a consistent snapshot.
        """
        wanted = [prefix for prefix in prefixes if prefix]
        if not wanted:
            return
        with self.read_snapshot("scan") as conn:
            ranges = [range_clause(prefix) for prefix in wanted]
            with self.errors("scan"):
                count = sum(
                    int(
                        conn.execute(f"SELECT count(*) FROM kv WHERE {where}", params).fetchone()[0]
                    )
                    for where, params in ranges
                )
                total = int(conn.execute("SELECT count(*) FROM kv").fetchone()[0])
            if count * 4 >= total:
                where = " OR ".join(f"({clause})" for clause, _ in ranges)
                params = [param for _, clause_params in ranges for param in clause_params]
                queries = [(f"SELECT key, value FROM kv NOT INDEXED WHERE {where}", params)]
            else:
                queries = [(f"SELECT key, value FROM kv WHERE {w}", p) for w, p in ranges]
            for sql, params in queries:
                yield from self._fetch(conn, sql, params, batch_size)

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for batch in batched(keys, 500):
            plain = [key for key in batch if cells.is_plain(key)]
            marks = ",".join("?" * len(plain))
            if plain:
                found.update(
                    self._rows("get", f"SELECT key, value FROM kv WHERE key IN ({marks})", plain)
                )
            for key in batch:
                if not cells.is_plain(key):
                    value = self.get(key)
                    if value is not None:
                        found[key] = value
        return found

    def any_keys(self, probes: Sequence[tuple[str, str | None]]) -> builtins.list[bool]:
        """One query per 300 probes, each an index range probe (``key >= ? AND key < ?``).

        Both bounds must be plain columns of the probe: an ``OR`` around the
        upper bound would turn each probe into a scan to the end of the index.
        """
        found = [False] * len(probes)
        bounded: list[tuple[int, str, str | None, str]] = []
        for index, (prefix, after) in enumerate(probes):
            upper = prefix_upper_bound(prefix)
            if upper is None:  # no upper bound (empty or U+10FFFF prefix): the generic way
                found[index] = super().any_keys([(prefix, after)])[0]
                continue
            strict = after is not None and after >= prefix
            low = after if strict and after is not None else prefix
            bounded.append((index, low, low if strict else None, upper))
        for start in range(0, len(bounded), 300):
            chunk = bounded[start : start + 300]
            values = ",".join("(?,?,?,?)" for _ in chunk)
            with self.errors("probe keys"):
                hits = self.connection.execute(
                    f"WITH probe(i, low, excluded, high) AS (VALUES {values}) "
                    "SELECT i FROM probe WHERE EXISTS (SELECT 1 FROM kv "
                    "WHERE key >= probe.low AND key < probe.high AND key IS NOT probe.excluded)",
                    [value for row in chunk for value in row],
                ).fetchall()
            for (index,) in hits:
                found[index] = True
        return found

    def set_many(self, items: Iterable[tuple[str, str]]) -> int:
        """All items in one transaction: a failure writes none of them."""
        rows = items if isinstance(items, (builtins.list, tuple)) else builtins.list(items)

        def write_all(conn: sqlite3.Connection) -> int:
            before = conn.total_changes
            execute_rows(conn, "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", rows)
            return conn.total_changes - before

        return self.write(write_all, "write")

    def set_batched(self, items: Sequence[tuple[str, str]]) -> int:
        """Gate-sized transactions (see :meth:`_batched_write`): not atomic, never too long."""
        return self._batched_write(
            "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", items, len(items), 0.0, None
        )

    def _batched_write(
        self,
        sql: str,
        rows: Iterable[Sequence[str]],
        batch_size: int,
        pause: float,
        on_batch: BatchCallback | None,
    ) -> int:
        """``sql`` for each row, in transactions sized so each holds the lock briefly.

        ``batch_size`` is the most rows per transaction; while the write gate
        pauses live writers, batches shrink to its budget (and a batch cut
        short by the gate's cap is tried again in halves).
        """
        done = 0
        sizer = self._sizers.get(sql)
        if sizer is None:  # learnt once per statement: a sweep calls this once per batch
            first = 100 if self.gate.will_freeze() else batch_size
            sizer = self._sizers[sql] = BatchSizer(batch_size, budget=self.gate.budget, first=first)
        sizer.most = max(1, batch_size)
        sizer.size = min(sizer.size, sizer.most)
        pending: list[Sequence[str]] = []
        source = iter(rows)
        cuts = 0
        while True:
            if len(pending) < sizer.size:
                pending.extend(itertools.islice(source, sizer.size - len(pending)))
            if not pending:
                return done
            batch, rest = pending[: sizer.size], pending[sizer.size :]
            before = self.connection.total_changes
            try:
                with self.transaction("delete") as conn:
                    execute_rows(conn, sql, batch)
            except FreezeTooLong:
                cuts = cuts + 1 if len(batch) == 1 else 0
                if cuts >= ATTEMPTS:
                    raise
                sizer.cut()
                continue
            cuts = 0
            pending = rest
            sizer.record(len(batch), self.gate.last_hold, self.gate.last_frozen)
            changed = self.connection.total_changes - before
            done += changed
            after_batch(changed, pause, on_batch)

    def delete_many(
        self,
        keys: Iterable[str],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        rows = ((key,) for key in keys)
        return self._batched_write(
            "DELETE FROM kv WHERE key = ?", rows, batch_size, pause, on_batch
        )

    def delete_if_unchanged(
        self,
        items: Iterable[tuple[str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        return self._batched_write(
            "DELETE FROM kv WHERE key = ? AND value = ?", items, batch_size, pause, on_batch
        )

    def replace_if_unchanged(
        self,
        items: Iterable[tuple[str, str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        rows = ((new, key, expected) for key, expected, new in items)
        return self._batched_write(
            "UPDATE kv SET value = ? WHERE key = ? AND value = ?", rows, batch_size, pause, on_batch
        )

    def lock_path(self, name: str) -> Path:
        """The lock file of ``name``, beside the database: ``<db>-tfadmin-<name>.lock``."""
        from triggerfish_cli.storage.locks import lock_file_name

        target = self.path.resolve()
        return target.with_name(f"{target.name}-tfadmin-{lock_file_name(name)}.lock")

    def lock(self, name: str, wait: float = 0.0) -> AbstractContextManager[None]:
        """An OS file lock (flock) beside the database file.

        Every process of this tool on this host that opens the same file
        (through any path: it is resolved) takes the same lock. The gateway
        never takes it; it only keeps our own jobs apart.
        """
        from triggerfish_cli.storage.locks import file_lock

        return file_lock(self.lock_path(name), wait, what=f"{name} on {self.describe()}")

    @contextmanager
    def unmapped(self) -> Iterator[None]:
        """Reads through SQLite's page cache instead of the memory map, for the block.

        A listing of every value in key order touches nearly every page of
        the file; read through the map, each page touched stays in our
        resident set (a 700 MiB store: ~650 MB of RSS, though it is page
        cache the kernel can take back). Through the small page cache the
        resident set stays flat (about 80 MB), at about twice the time.
        """
        conn = self.connection
        with self.errors("read"):
            conn.execute("PRAGMA mmap_size=0")
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """No fsync after each commit during a long idempotent batched job (a sweep).

        Commits never fsync inside a freeze anyway (the write gate runs our
        connection with ``synchronous=NORMAL`` in WAL mode and syncs the WAL
        after each commit, with everyone running again); here even that sync
        is skipped: the file stays consistent whatever happens, only the last
        commits may be lost on an OS crash or power cut, which an idempotent
        job simply redoes. The gateway's own connections are not affected.
        """
        gate = self.gate
        durable, gate.durable = gate.durable, False
        try:
            yield
        finally:
            gate.durable = durable

    def checkpoint(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint(mode)``: ``(busy, wal frames, frames checkpointed)``.

        PASSIVE never waits for and never blocks the gateway: it copies what
        it can of the WAL into the database. Run between the batches of a
        long job, it keeps the WAL small, so that the gateway's next commit
        does not pay for a large automatic checkpoint.
        """
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        with self.errors("checkpoint"):
            row = self.connection.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)

    def count(self, prefix: str | None = None) -> int:
        where, params = range_clause(prefix)
        with self.errors("count"):
            row = self.connection.execute(
                f"SELECT count(*) FROM kv WHERE {where}", params
            ).fetchone()
        return int(row[0])

    def prefix_stats(self, prefixes: Sequence[str]) -> dict[str, PrefixStats]:
        stats: dict[str, PrefixStats] = {}
        with self.errors("stats"):
            for prefix in prefixes:
                where, params = range_clause(prefix)
                count, size = self.connection.execute(
                    "SELECT count(*), coalesce(sum(length(CAST(value AS BLOB))), 0) "
                    f"FROM kv WHERE {where}",
                    params,
                ).fetchone()
                stats[prefix] = PrefixStats(int(count), int(size))
        return stats

    def other_stats(self, known: Sequence[str], sep: str = ":") -> dict[str, PrefixStats]:
        """Group the keys in the gaps between the known prefix ranges by first segment."""
        groups: dict[str, PrefixStats] = {}
        for low, high in uncovered_ranges(known):
            where, params = gap_clause(low, high)
            if low is None:  # NULL keys sort first (cells.py): in the first gap
                where = f"({where}) OR key IS NULL"
            # A NULL key's group is NULL, a BLOB key's an empty BLOB (cells.py).
            rows = self._rows(
                "stats",
                "SELECT CASE WHEN key IS NULL THEN NULL WHEN typeof(key) = 'blob' THEN x'' "
                "WHEN instr(key, ?) > 0 "
                "THEN substr(key, 1, instr(key, ?) + length(?) - 1) ELSE '' END AS grp, "
                "count(*), coalesce(sum(length(CAST(value AS BLOB))), 0) "
                f"FROM kv WHERE {where} GROUP BY grp",
                [sep, sep, sep, *params],
            )
            for group, count, size in rows:
                groups[group] = groups.get(group, PrefixStats()) + PrefixStats(
                    int(count), int(size)
                )
        return groups


class _Again(Exception):
    """A query to run again (with the lenient decoder)."""


class _Opened(NamedTuple):
    conn: sqlite3.Connection
    #: The file can only be read here (a read-only file, directory or file system).
    read_only: bool
    #: The store is to be made: a new file, or an empty one, with ``create``.
    fresh: bool


def _open(path: Path, *, create: bool, busy_timeout_ms: int, read_only: bool = False) -> _Opened:
    """Open a gateway store; refuse anything else without touching it.

    Opening never writes: no table is created, the journal mode is never
    changed (a rollback-journal copy stays one), and a file that cannot be
    written here (a read-only file or file system) is opened read-only, as
    an immutable file when SQLite cannot make its shared-memory file and no
    WAL content is there to miss. Only with ``create`` is a missing (or
    empty) store made, in WAL mode as the gateway makes it; the caller
    writes its table (through the write gate).
    """
    if path.is_dir():
        raise BackendUnavailableError(f"{path}: is a directory, not a SQLite store")
    try:
        size: int | None = path.stat().st_size
    except FileNotFoundError:
        size = None
    except OSError as exc:
        raise BackendUnavailableError(f"{path}: cannot read: {exc.strerror}") from exc
    timeout = busy_timeout_ms / 1000
    if size is None:
        if not create or read_only:
            raise MissingStoreError(f"no Triggerfish store at {path}", hint=_MISSING_HINT)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise BackendUnavailableError(
                f"{path.parent}: cannot create directory: {exc.strerror}"
            ) from exc
        _create_private(path)  # 0600, like its backups
        conn = _connect(path, "rw", timeout)
        _tune(conn, journal_wal=True)
        return _Opened(conn, False, True)
    if size:
        try:
            # Through a kept descriptor, never one closed here: closing any descriptor
            # of the file drops every POSIX lock this process holds on it, and a
            # connection of ours already open on the store would lose its SHARED
            # lock; another process closing its own connection would then take itself
            # for the last one and delete the WAL we are still writing (kept_files.py).
            header = os.pread(kept_files.kept(str(path)), len(SQLITE_HEADER), 0)
        except OSError as exc:
            raise BackendUnavailableError(f"{path}: cannot read: {exc.strerror}") from exc
        if header != SQLITE_HEADER:
            raise InvalidDataError(f"{path}: not a SQLite database")
    elif not create or read_only:
        raise MissingStoreError(
            f"no Triggerfish store at {path}: an empty file", hint=_MISSING_HINT
        )
    conn, objects, writable = _connect_existing(path, timeout, read_only=read_only)
    try:
        fresh = _check_schema(conn, objects, path, create=create and not read_only)
        if fresh and not writable:
            raise BackendUnavailableError(f"{path}: read-only here: cannot make a store in it")
        _tune(conn, journal_wal=fresh)
    except BaseException:
        conn.close()
        raise
    return _Opened(conn, not writable, fresh)


def _create_private(path: Path) -> None:
    """A new store file, owner only (0600) whatever the umask, like its backups.

    SQLite gives its -wal and -shm files the mode of the database file, so
    they are private too. An existing file is never touched.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return
    except OSError as exc:
        from triggerfish_cli.errors import write_error

        raise write_error(path, exc) from exc


_MISSING_HINT = "check the path, or make a demo store with `triggerfish-admin demo create`"


def _connect(
    path: Path, mode: str, timeout: float, *, immutable: bool = False
) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.absolute()))}?mode={mode}" + ("&immutable=1" if immutable else "")
    try:
        # One thread at a time uses it, but not always the one that opened it.
        return sqlite3.connect(
            uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise BackendUnavailableError(f"{path}: cannot open: {exc}") from exc


def _connect_existing(
    path: Path, timeout: float, *, read_only: bool
) -> tuple[sqlite3.Connection, list[tuple[str, str, str | None]], bool]:
    """A connection to an existing file, its schema, and whether it can be written.

    Read-write where the file and its directory can be written; else
    ``mode=ro``; else (a WAL store on a read-only file system with no
    ``-shm`` beside it, which SQLite cannot create) ``immutable``, which is
    exact only when no WAL content is waiting: with some, it is refused.
    """
    writable = not read_only and os.access(path, os.W_OK)
    modes = ["rw", "ro"] if writable else ["ro"]
    failure: sqlite3.Error | None = None
    for mode in modes:
        conn = _connect(path, mode, timeout)
        try:
            return conn, _schema(conn), writable and mode == "rw"
        except sqlite3.Error as exc:
            conn.close()
            if not _cannot_open(exc):
                raise translate_error(exc, f"{path}: read schema") from exc
            failure = exc
    wal = Path(f"{path}-wal")
    try:
        waiting = wal.stat().st_size > 0
    except OSError:
        waiting = False
    if waiting:
        raise BackendUnavailableError(
            f"{path}: cannot read it here: SQLite cannot open its shared-memory file "
            f"({failure}), and its WAL holds changes not yet in the file",
            hint="copy the store with its -wal and -shm files, or read it where it can be written",
        )
    conn = _connect(path, "ro", timeout, immutable=True)
    try:
        return conn, _schema(conn), False
    except sqlite3.Error as exc:
        conn.close()
        raise translate_error(exc, f"{path}: read schema") from exc


def _cannot_open(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "unable to open" in text or "readonly" in text or "read-only" in text


def _schema(conn: sqlite3.Connection) -> list[tuple[str, str, str | None]]:
    return [
        (str(kind), str(name), sql)
        for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master")
    ]


def _check_schema(
    conn: sqlite3.Connection,
    objects: Sequence[tuple[str, str, str | None]],
    path: Path,
    *,
    create: bool,
) -> bool:
    """Is this the gateway's store? True: an empty database, to be made one (``create``)."""
    tables = {name: sql for kind, name, sql in objects if kind == "table"}
    if "kv" in tables:
        try:
            problems = kv_shape_problems(conn, tables["kv"])
        except sqlite3.Error as exc:
            raise translate_error(exc, f"{path}: read schema") from exc
        if problems:
            raise InvalidDataError(
                f"{path}: table kv is not the gateway's "
                f"(key TEXT PRIMARY KEY, value TEXT NOT NULL): {'; '.join(problems)}",
                hint="not a Triggerfish store as the gateway makes it; nothing was changed",
            )
        return False
    if objects:
        raise InvalidDataError(
            f"{path}: SQLite database without a kv table: not a Triggerfish store"
        )
    if not create:
        raise MissingStoreError(
            f"no Triggerfish store at {path}: an empty SQLite database", hint=_MISSING_HINT
        )
    return True


def kv_shape_problems(conn: sqlite3.Connection, sql: str | None) -> list[str]:
    """How table ``kv`` differs from the gateway's (key TEXT PRIMARY KEY, value TEXT NOT NULL)."""
    columns = conn.execute("PRAGMA table_info(kv)").fetchall()  # cid, name, type, notnull, dflt, pk
    named = {str(row[1]): row for row in columns}
    if "key" not in named or "value" not in named:
        listed = ", ".join(str(row[1]) for row in columns)
        return [f"its columns are ({listed}), not (key, value)"]
    problems = [f"an extra column {name!r}" for name in named if name not in ("key", "value")]
    key, value = named["key"], named["value"]
    for column in (key, value):
        declared = str(column[2] or "")
        if declared.upper() != "TEXT":
            problems.append(f"{column[1]} is declared {declared or 'without a type'}, not TEXT")
    primary = [str(row[1]) for row in sorted(columns, key=lambda row: row[5]) if row[5]]
    if primary != ["key"]:
        problems.append(
            "key is not its primary key (so INSERT OR REPLACE adds a row instead of replacing one)"
            if not primary
            else f"its primary key is ({', '.join(primary)}), not (key)"
        )
    if not value[3]:
        problems.append("value is not NOT NULL")
    if sql is not None and "without rowid" in " ".join(sql.lower().split()):
        problems.append("it is a WITHOUT ROWID table")
    return problems


def _tune(conn: sqlite3.Connection, *, journal_wal: bool) -> None:
    """Connection settings; ``journal_wal`` only for a store being made (the gateway's mode)."""
    if journal_wal:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as exc:
            raise translate_error(exc, "set WAL mode") from exc
    try:
        # Reads through a memory map: no read() system call per page, which
        # halves the cost of index-driven scans over a large store. Only the
        # main file is mapped (the WAL is read as usual); writes are unchanged.
        conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
        conn.execute(f"PRAGMA cache_size={CACHE_SIZE_KIB}")
    except sqlite3.Error:
        pass


def create_store(conn: sqlite3.Connection) -> None:
    """The gateway's table, in a store being made (run inside a write transaction)."""
    conn.execute(KV_SCHEMA)
