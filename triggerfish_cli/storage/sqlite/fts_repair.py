"""The SQLite memory index's drift check and repair (``memory check`` / ``reindex``).

The index rows are derived from kv: a survey compares every live record
with its memory_meta and memory_fts rows, and a repair rewrites those that
differ in short gated batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

from triggerfish_cli.classification import Level
from triggerfish_cli.memory.index import BatchCallback, Drift
from triggerfish_cli.memory.keys import LEVELS_BY_NAME, agent_prefix, split_key
from triggerfish_cli.memory.record import MemoryRecord, parse_record
from triggerfish_cli.serialization import fast_loads
from triggerfish_cli.storage.batching import in_batches
from triggerfish_cli.storage.sqlite.fts_marks import (
    DROP_MARK,
    MARK_BATCH,
    MARKS_SQL,
    SET_MARK,
    mark_range,
    windows,
)
from triggerfish_cli.storage.sqlite.fts_tables import (
    REPAIR_BATCH,
    Fts5Tables,
    Triple,
    fts_row,
    triple_key,
)
from triggerfish_cli.storage.sqlite.sql import (
    DELETE_META,
    INSERT_FTS,
    MEMORY_FTS_SQL,
    MEMORY_META_SQL,
    UPSERT_META,
)


class Fts5Repair(Fts5Tables):
    """Drift between kv and the index tables, and its repair."""

    def _kv_rows(self, agent: str | None) -> Iterable[tuple[str, str]]:
        if self.storage is not None:
            return self.storage.scan(agent_prefix(agent), batch_size=2000)
        prefix = agent_prefix(agent)
        return self.conn.execute(
            "SELECT key, value FROM kv WHERE key >= ? AND substr(key, 1, ?) = ? ORDER BY key",
            (prefix, len(prefix), prefix),
        )

    def _survey(
        self, levels: Sequence[Level], agent: str | None
    ) -> tuple[Drift, list[Triple], set[Triple]]:
        """The drift, the records to fix, and those that had memory_fts rows."""
        drift = Drift(self.kind, tuple(levels), indexed=self.present)
        drift.tables_missing = not self.present
        names = {level.name for level in levels}
        loads = fast_loads()
        want: dict[Triple, tuple[int, int]] = {}
        with self._errors("read kv"):
            for skey, value in self._kv_rows(agent):
                parts = split_key(skey)
                if parts is None or parts[1].name not in names:
                    continue
                record = parse_record(skey, value, loads)
                if isinstance(record, MemoryRecord) and record.live:
                    want[fts_row(record)[:3]] = (hash(value), hash(fts_row(record)[3:]))
        drift.records = len(want)
        if not self.present:
            for triple in sorted(want):
                drift.note("missing", triple_key(triple))
            return drift, sorted(want), set()
        where, params = self._scope(levels, agent)
        meta: dict[Triple, int] = {}
        fts: dict[Triple, list[int]] = {}
        with self._errors("read the memory index"):
            for a, c, k, record_json in self.conn.execute(
                f"SELECT agent_id, classification, key, record_json FROM memory_meta{where}", params
            ):
                meta[(a, c, k)] = hash(record_json)
            for a, c, k, content, tags in self.conn.execute(
                f"SELECT agent_id, classification, key, content, tags FROM memory_fts{where}",
                params,
            ):
                fts.setdefault((a, c, k), []).append(hash((content, tags)))
        fix: list[Triple] = []
        for triple in sorted(want.keys() | meta.keys() | fts.keys(), key=repr):
            wanted, meta_hash, rows = want.get(triple), meta.get(triple), fts.get(triple, [])
            if len(rows) > 1:
                drift.duplicates += len(rows) - 1
            if wanted is None:
                drift.note("orphaned", triple_key(triple))
            elif meta_hash is None or not rows:
                drift.note("missing", triple_key(triple))
            elif meta_hash != wanted[0] or len(rows) > 1 or rows[0] != wanted[1]:
                drift.note("stale", triple_key(triple))
            else:
                drift.in_sync += 1
                continue
            fix.append(triple)
        return drift, fix, set(fts)

    @staticmethod
    def _scope(levels: Sequence[Level], agent: str | None) -> tuple[str, list[str]]:
        """WHERE clause for index rows of these levels (all rows when every level is in)."""
        conditions: list[str] = []
        params: list[str] = []
        if len(levels) < len(Level):
            conditions.append(f"classification IN ({','.join('?' * len(levels))})")
            params += [level.name for level in levels]
        if agent is not None:
            conditions.append("agent_id = ?")
            params.append(agent)
        return (" WHERE " + " AND ".join(conditions) if conditions else ""), params

    def check(self, levels: Sequence[Level], *, agent: str | None = None) -> Drift:
        return self._survey(levels, agent)[0]

    def repair(self, levels: Sequence[Level], *, on_batch: BatchCallback | None = None) -> Drift:
        if not self.present:
            with self._transaction("create the memory index tables") as conn:
                conn.execute(MEMORY_FTS_SQL)
                conn.execute(MEMORY_META_SQL)
            self.present, self.kind, self._docsize = True, "sqlite-fts5", True
        drift, fix, had_rows = self._survey(levels, None)
        # The rows are derived from kv: a power cut loses at most the last
        # batches of index rows (drift the next reindex repairs), never kv.
        with self.storage.bulk_writes() if self.storage else contextlib.nullcontext():
            self._rewrite(drift, fix, had_rows, on_batch)
            self._mark()
        return drift

    def _mark(self) -> None:
        """Mark every memory now in step with its index rows (fts_marks.py), in gated
        batches of key ranges, replacing the marks there were."""
        if not self.marked:
            with self._transaction("create the memory index marks") as conn:
                conn.execute(MARKS_SQL)
            self.marked = True

        def mark(keys: Sequence[str]) -> None:
            with self._transaction("memory index marks") as conn:
                mark_range(conn, keys[0], keys[-1])

        with self._errors("mark the memory index"):
            for window in windows(self.conn):
                for _ in in_batches(window, mark, most=MARK_BATCH, gate=self._gate()):
                    pass

    def _rewrite(
        self,
        drift: Drift,
        fix: list[Triple],
        had_rows: set[Triple],
        on_batch: BatchCallback | None,
    ) -> None:
        loads = fast_loads()

        def rewrite(batch: Sequence[Triple]) -> None:
            rowids: list[tuple[int]] = []
            dropped: list[Triple] = []
            fts: list[tuple[str, str, str, str, str]] = []
            meta: list[tuple[str, str, str, str]] = []
            with self._transaction("memory reindex") as conn:
                current = self._kv([triple_key(triple) for triple in batch])
                for triple in batch:
                    # Rows present at survey time are looked up again inside this
                    # transaction: the gateway may have rewritten them since.
                    if triple in had_rows:
                        rowids += [(rowid,) for rowid in self._rows_of(conn, *triple)]
                    skey = triple_key(triple)
                    # A row under no real level, or with ':' in its agent, is no record's.
                    valid = split_key(skey) == (triple[0], LEVELS_BY_NAME.get(triple[1]), triple[2])
                    value = current.get(skey) if valid else None
                    record = None if value is None else parse_record(skey, value, loads)
                    if isinstance(record, MemoryRecord) and record.live:
                        fts.append(fts_row(record))
                        meta.append((*triple, record.value))
                    else:
                        dropped.append(triple)
                conn.executemany("DELETE FROM memory_fts WHERE rowid = ?", rowids)
                conn.executemany(INSERT_FTS, fts)
                conn.executemany(UPSERT_META, meta)
                conn.executemany(DELETE_META, dropped)
                if self.marked:
                    conn.executemany(SET_MARK, [(triple_key(row[:3]),) for row in meta])
                    conn.executemany(DROP_MARK, [(triple_key(triple),) for triple in dropped])

        for count, _ in in_batches(fix, rewrite, most=REPAIR_BATCH, gate=self._gate()):
            drift.fixed += count
            if on_batch is not None:
                on_batch(count)

