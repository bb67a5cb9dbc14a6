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
import itertools
import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from triggerfish_cli import cells
from triggerfish_cli.storage.batching import BatchSizer
from triggerfish_cli.storage.identity import ID_TABLE, ID_TABLE_SQL
from triggerfish_cli.storage.provider import (
    DEFAULT_BATCH,
    BatchCallback,
    PrefixStats,
    StorageProvider,
    after_batch,
    batched,
    prefix_upper_bound,
    uncovered_ranges,
)
from triggerfish_cli.storage.sqlite.session import SqliteSession
from triggerfish_cli.storage.sqlite.sql import (
    CELL_SQL,
    INSERT_FTS,
    MEMORY_FTS_SQL,
    MEMORY_INDEX_TABLES,
    MEMORY_META_SQL,
    UPSERT_META,
    cell_params,
    execute_rows,
    execute_split,
    gap_clause,
    range_clause,
    scan_queries,
    split_rows,
)
from triggerfish_cli.storage.sqlite.write_gate import ATTEMPTS, FreezeTooLong


class SqliteStorage(SqliteSession):
    """A gateway store in a SQLite file: the key-value methods (plumbing: session.py)."""

    def tables(self) -> set[str]:
        with self.errors("read schema"):
            rows = self.connection.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
        return {row[0] for row in rows}

    def record_store_id(self, candidate: str) -> None:
        """Record ``candidate`` as the id unless one is there (the first one written wins):
        one short transaction through the write gate, tried again if a hiccup cut it short."""
        # lazy: serialization adds 6 modules (json) to `kv --help`
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

    def fill(
        self,
        rows: Iterable[tuple[str, str]],
        memory_fts: Sequence[tuple[str, str, str, str, str]] = (),
        memory_meta: Sequence[tuple[str, str, str, str]] = (),
    ) -> int:
        """One transaction: kv's rows and the gateway's memory search tables (made first)."""
        with self.transaction("fill the store") as conn:
            conn.execute(MEMORY_FTS_SQL)
            conn.execute(MEMORY_META_SQL)
            conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?)", rows)
            conn.executemany(INSERT_FTS, memory_fts)
            conn.executemany(UPSERT_META, memory_meta)
        return len(memory_meta)

    def is_same_store(self, other: StorageProvider) -> bool:
        if other is self:
            return True
        if not isinstance(other, SqliteStorage):
            return False
        try:
            return self.path.resolve().samefile(other.path.resolve())
        except OSError:
            return False

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
        sizer = BatchSizer(50_000, budget=self.gate.budget, frames=self.gate.frame_budget)
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
                sizer.after(gone, self.gate)

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
        self,
        prefixes: Sequence[str],
        *,
        batch_size: int = DEFAULT_BATCH,
        excluding: Sequence[str] = (),
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
            queries = scan_queries(ranges, excluding, table_scan=count * 4 >= total)
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
            gate = self.gate
            first = 100 if gate.will_freeze() else batch_size
            sizer = self._sizers[sql] = BatchSizer(
                batch_size, budget=gate.budget, frames=gate.frame_budget, first=first
            )
        sizer.most = max(1, batch_size)
        sizer.size = min(sizer.size, sizer.most)
        pending: list[Sequence[str]] = []
        source = iter(rows)
        cuts = 0
        while True:
            # A tail of up to an eighth of the size goes with the last batch: each
            # transaction costs a freeze and a rest, however few rows it holds (an
            # eighth over the gate's 800 frames stays under the 1000 of the writer's
            # checkpoint; the sweep's tails were 1-10% of a batch).
            size = sizer.size
            room = size + size // 8
            if len(pending) <= room:
                pending.extend(itertools.islice(source, room + 1 - len(pending)))
            if not pending:
                return done
            if len(pending) <= room:
                size = len(pending)  # the last rows: all of them
            batch, rest = pending[:size], pending[size:]
            split = split_rows(batch)  # before the lock: the live writers may be paused then
            before = self.connection.total_changes
            try:
                with self.transaction("delete") as conn:
                    execute_split(conn, sql, split)
            except FreezeTooLong:
                cuts = cuts + 1 if len(batch) == 1 else 0
                if cuts >= ATTEMPTS:
                    raise
                sizer.cut()
                continue
            cuts = 0
            pending = rest
            sizer.after(len(batch), self.gate)
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
