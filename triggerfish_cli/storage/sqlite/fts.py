"""The SQLite memory index: the gateway's own ``memory_fts`` and ``memory_meta`` tables.

Rows are written exactly as the gateway writes them (UPSTREAM.md): to index
a record, delete its memory_fts rows, insert the new one (tags joined by
single spaces), then ``INSERT OR REPLACE`` into memory_meta with the same
JSON as the kv value; to unindex, delete from both. A save or delete here
writes kv and both tables in one transaction.

Search lets FTS5 rank every match by bm25 (``ORDER BY rank``, as cheap as the
bare MATCH) and filters agent, level and tag in SQL as the rows stream out
in rank order; the rows that pass are checked against kv in small batches
(the kv value must equal memory_meta's, be live, and not be shadowed by a
live version at a higher visible level) until ``limit`` hits are found. Only
those few rows ever reach Python.

The gateway's own search (``src/tools/memory/search/search_fts5.ts``) asks
for ``LIMIT maxResults * 4`` rows and filters level and expiry afterwards,
so it returns fewer hits than asked whenever hidden rows rank high. Ours
reads on until it has ``limit`` hits or the matches run out: never fewer
than asked while that many visible records match.

The memories the index lacks or holds stale (the gateway never indexes what
cron and trigger runs save) are searched too, from kv, in a private index of
the same shape, and both results merged by score (:mod:`.fts_drift`): the
hits are those of a freshly reindexed store, and the store is not written.

The index's parts: :mod:`.fts_tables` (rows, the RAM copy, plumbing),
:mod:`.fts_search` (the ranked search), :mod:`.fts_drift` (the drifted
memories), :mod:`.fts_repair` (drift and repair); this module holds the
index class itself with its writes, and :class:`ScanIndex` for stores
without the tables.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.classification import Level
from triggerfish_cli.memory.index import BatchCallback, Drift, SearchRequest, SearchResult
from triggerfish_cli.memory.keys import PREFIX, agent_prefix, split_key, visible_levels
from triggerfish_cli.memory.record import MemoryRecord, parse_record
from triggerfish_cli.storage.batching import in_batches
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.fts_drift import drifted_copy
from triggerfish_cli.storage.sqlite.fts_marks import DROP_MARK, SET_MARK
from triggerfish_cli.storage.sqlite.fts_repair import Fts5Repair
from triggerfish_cli.storage.sqlite.fts_search import COLUMN_WEIGHTS, Fts5Search
from triggerfish_cli.storage.sqlite.fts_tables import (
    REPAIR_BATCH,
    Fts5Tables,
    fts_row,
    in_memory_copy,
)
from triggerfish_cli.storage.sqlite.sql import DELETE_META, INSERT_FTS, UPSERT_META, lenient
from triggerfish_cli.storage.sqlite.write_gate import retried

__all__ = ["COLUMN_WEIGHTS", "Fts5Index", "ScanIndex", "for_sqlite", "fts_row", "in_memory_copy"]


def for_sqlite(provider: Any) -> Fts5Index:
    assert isinstance(provider, SqliteStorage)
    return Fts5Index(provider.connection, provider)


class Fts5Index(Fts5Search, Fts5Repair):
    """:class:`~triggerfish_cli.memory.index.MemoryIndex` on a SQLite connection."""

    def search(self, request: SearchRequest) -> SearchResult:
        """Ranked hits from the index tables (:meth:`Fts5Search.search`) and from the
        memories they lack or hold stale (fts_drift.py), merged by score; a store
        without them is searched by a scan (:class:`ScanIndex`)."""
        if not self.present:
            assert self.storage is not None
            return ScanIndex(self.storage).search(request)
        if self.storage is None:  # a private copy of ours: it never drifts
            return super().search(request)
        # One read transaction (a WAL snapshot, no lock the gateway's writes meet, and no
        # checkpoint after it: a search writes nothing), so the index, the drifted
        # memories and the kv checks are of one moment. Finding the drifted memories
        # reads every value in scope: through the page cache, not the memory map, so
        # the resident set stays flat (storage.unmapped).
        reading = self.storage.read_snapshot("search", checkpoint=False)
        with self.storage.unmapped(), reading, self._errors("search", request.text):
            result = super().search(request)
            private, result.drifted = drifted_copy(self.conn, request, self.marked)
            try:
                if result.drifted:
                    _merge(result, _DriftSearch(private, self).search(request), request.limit)
            finally:
                private.close()
        return result

    # -- writes ---------------------------------------------------------------------

    def _reindex_one(
        self, conn: sqlite3.Connection, skey: str, value: str | None, rowids: Iterable[int]
    ) -> None:
        """Bring the index rows of one storage key in step with its kv value."""
        parts = split_key(skey)
        assert parts is not None
        agent, level, key = parts
        for rowid in rowids:
            conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (rowid,))
        record = None if value is None else parse_record(skey, value)
        if isinstance(record, MemoryRecord) and record.live:
            conn.execute(INSERT_FTS, fts_row(record))
            conn.execute(UPSERT_META, (agent, level.name, key, value))
        else:
            conn.execute(DELETE_META, (agent, level.name, key))
        if self.marked:  # in step (or soft-deleted) as kv's row is now, or no mark at all
            conn.execute(SET_MARK if isinstance(record, MemoryRecord) else DROP_MARK, (skey,))

    def write(
        self, storage_key: str, update: Callable[[str | None], str]
    ) -> tuple[str | None, str]:
        parts = split_key(storage_key)
        assert parts is not None

        def once() -> tuple[str | None, str]:
            with self._transaction("memory write") as conn:
                found = lenient(
                    conn,
                    lambda c: c.execute(
                        "SELECT value FROM kv WHERE key = ?", (storage_key,)
                    ).fetchone(),
                )
                old = None if found is None else cells.from_sqlite(found[0])
                new = update(old)
                conn.execute(
                    "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (storage_key, new)
                )
                if self.present:
                    rowids = self._rows_of(conn, parts[0], parts[1].name, parts[2])
                    self._reindex_one(conn, storage_key, new, rowids)
            return old, new

        return retried(once)

    def reindex(self, storage_keys: Sequence[str]) -> int:
        if not self.present:
            return 0
        triples = [
            (parts[0], parts[1].name, parts[2])
            for parts in map(split_key, storage_keys)
            if parts is not None
        ]
        # Every one may have rows: each is looked up again in its batch's transaction.
        self._rewrite(Drift(self.kind, ()), triples, set(triples), None)
        return len(triples)

    def hard_delete(
        self, items: Sequence[tuple[str, str]], *, on_batch: BatchCallback | None = None
    ) -> int:
        def purge(batch: Sequence[tuple[str, str]]) -> int:
            done = 0
            with self._transaction("memory purge") as conn:
                for skey, expected in batch:
                    cursor = conn.execute(
                        "DELETE FROM kv WHERE key = ? AND value = ?", (skey, expected)
                    )
                    if cursor.rowcount != 1:
                        continue  # rewritten meanwhile: whoever wrote it wins
                    done += 1
                    parts = split_key(skey)
                    if self.present and parts is not None:
                        rowids = self._rows_of(conn, parts[0], parts[1].name, parts[2])
                        self._reindex_one(conn, skey, None, rowids)
            return done

        deleted = 0
        for _, done in in_batches(items, purge, most=REPAIR_BATCH, gate=self._gate()):
            deleted += done
            if on_batch is not None:
                on_batch(done)
        return deleted


class _DriftSearch(Fts5Search):
    """The search on a private index of drifted memories (fts_drift.py), its hits
    checked against the store's kv."""

    def __init__(self, conn: sqlite3.Connection, store: Fts5Tables) -> None:
        super().__init__(conn)
        self._store = store

    def _kv(self, keys: Sequence[str]) -> dict[str, str]:
        return self._store._kv(keys)


def _merge(result: SearchResult, extra: SearchResult, limit: int) -> None:
    """``extra``'s hits into ``result``'s: by score, then storage key; the best ``limit``.

    Both are ranked by the same rule and each record is searched in one of
    them only, so the best of the merge are the best of all.
    """
    hits = {hit.record.storage_key: hit for hit in extra.hits}
    hits.update({hit.record.storage_key: hit for hit in result.hits})
    ranked = sorted(hits.values(), key=lambda hit: (-hit.score, hit.record.storage_key))
    result.hits = ranked[:limit]
    result.stale += extra.stale
    result.malformed += [key for key in extra.malformed if key not in result.malformed]


class ScanIndex:
    """No stored index: every search reads all memories and indexes them in RAM.

    The RAM index holds exactly what a fresh ``reindex`` would put in the
    SQLite tables (every live record, all agents and levels), and the search
    runs the same code as the SQLite index on it, so the results are the
    same. Writes go straight to kv; there is nothing to check or repair.
    """

    kind = "scan"

    def __init__(self, provider: StorageProvider) -> None:
        self.provider = provider

    def search(self, request: SearchRequest) -> SearchResult:
        """The RAM index holds the visible levels only: hidden rows are never read.

        Keys are listed first and only the values at visible levels (of the
        agent asked for) are fetched, so what lies above the taint is neither
        read nor indexed; scores come from each row alone (``rank_score``).
        """
        levels = set(visible_levels(request.taint))
        keys = [
            skey
            for skey in self.provider.scan_keys(agent_prefix(request.agent), batch_size=2000)
            if (parts := split_key(skey)) is not None and parts[1] in levels
        ]
        values = self.provider.get_many(keys)
        index = Fts5Index(in_memory_copy((key, values[key]) for key in keys if key in values))
        try:
            result = index.search(request)
        finally:
            index.conn.close()
        result.kind = self.kind
        return result

    def write(
        self, storage_key: str, update: Callable[[str | None], str]
    ) -> tuple[str | None, str]:
        old = self.provider.get(storage_key)
        new = update(old)
        self.provider.set(storage_key, new)
        return old, new

    def reindex(self, storage_keys: Sequence[str]) -> int:
        return 0  # nothing stored to bring in step

    def hard_delete(
        self, items: Sequence[tuple[str, str]], *, on_batch: BatchCallback | None = None
    ) -> int:
        return self.provider.delete_if_unchanged(items, batch_size=500, on_batch=on_batch)

    def check(self, levels: Sequence[Level], *, agent: str | None = None) -> Drift:
        drift = Drift(self.kind, tuple(levels), indexed=False)
        wanted = set(levels)
        for skey, value in self.provider.scan(
            PREFIX if agent is None else f"{PREFIX}{agent}:", batch_size=2000
        ):
            record = parse_record(skey, value)
            if isinstance(record, MemoryRecord) and record.live and record.level in wanted:
                drift.records += 1
        return drift

    def repair(self, levels: Sequence[Level], *, on_batch: BatchCallback | None = None) -> Drift:
        return self.check(levels)
