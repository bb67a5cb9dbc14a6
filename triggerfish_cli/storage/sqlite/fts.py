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
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import UsageError
from triggerfish_cli.memory.index import (
    HIGHLIGHT_END,
    HIGHLIGHT_START,
    BatchCallback,
    Drift,
    IndexRow,
    SearchRequest,
    SearchResult,
    accept_rows,
    column_sizes,
    rank_score,
)
from triggerfish_cli.memory.keys import (
    LEVELS_BY_NAME,
    PREFIX,
    agent_prefix,
    split_key,
    visible_levels,
)
from triggerfish_cli.memory.record import MemoryRecord, parse_record
from triggerfish_cli.serialization import fast_loads
from triggerfish_cli.storage.batching import in_batches
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.fts_query import (
    fts_query,
    fts_string,
    has_tokens,
    level_match,
    query_phrases,
)
from triggerfish_cli.storage.sqlite.sql import (
    DELETE_META,
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
from triggerfish_cli.storage.sqlite.write_gate import WriteGate, retried

REPAIR_BATCH = 500

#: bm25 weights (agent_id, classification, key, content, tags) that isolate one
#: searched column each: key, content, tags.
COLUMN_WEIGHTS = ("0, 0, 1, 0, 0", "0, 0, 0, 1, 0", "0, 0, 0, 0, 1")

#: (agent_id, classification, key) of an index row
Triple = tuple[str, str, str]
SNIPPET_TOKENS = 16


def for_sqlite(provider: Any) -> Fts5Index:
    assert isinstance(provider, SqliteStorage)
    return Fts5Index(provider.connection, provider)


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


def _narrowed(match: str, request: SearchRequest) -> str:
    """``match`` limited inside the full-text index to the visible levels and the agent
    (by their tokens: necessary, not sufficient; the exact checks come after)."""
    narrowed = level_match(match, request.taint)
    if request.agent is not None and has_tokens(request.agent):
        narrowed = f"({narrowed}) AND {{agent_id}} : {fts_string(request.agent)}"
    return narrowed


#: How many of the best matches SQLite keeps at first (then 8 times more, and so on).
WINDOW = 1024

_ROWIDS_MATCHING = "SELECT rowid FROM memory_fts WHERE memory_fts MATCH"

#: The SQL function that scores a row (see ``rank_score``), registered per search.
RANK_FUNCTION = "triggerfish_rank"


def _ranker() -> Callable[[int, int, int, bytes | None], float]:
    """``rank_score`` from bm25's column booleans and a docsize blob, negated (the
    best sorts first); rows alike (most of them) share one computation."""
    scores: dict[tuple[int, int, int, bytes | None], float] = {}

    def rank(key: int, content: int, tags: int, sizes: bytes | None) -> float:
        shape = (key, content, tags, sizes)
        found = scores.get(shape)
        if found is None:
            found = scores[shape] = -rank_score(shape[:3], column_sizes(sizes, (2, 3, 4)))
        return found

    return rank


class Fts5Index:
    """:class:`~triggerfish_cli.memory.index.MemoryIndex` on a SQLite connection."""

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
        self.kind = "sqlite-fts5" if self.present else "scan"
        self._docsize = self.present and bool(
            conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_fts_docsize'").fetchone()
        )

    # -- plumbing -------------------------------------------------------------------

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

    # -- search ---------------------------------------------------------------------

    def search(self, request: SearchRequest) -> SearchResult:
        """Hits at the taint, ranked from the matching rows alone (see ``rank_score``).

        The level (and agent) filter is part of the MATCH expression (the
        gateway indexes ``classification`` and ``agent_id`` as full-text
        columns, weighted 0 in every score), so FTS5 itself drops the rows
        above the taint while it intersects its doclists: they are never
        read, scored or sorted. Every visible match is scored in SQL from
        its own row (which of key, content and tags it matches, and their
        lengths in tokens from ``memory_fts_docsize``), never from
        statistics over the whole table, and SQLite sorts the scores; only
        the best rows, whole groups of equal score, reach Python, where
        ties go by storage key and the exact level, agent and kv checks
        run. The result is a function of the visible rows alone.
        """
        if not self.present:
            assert self.storage is not None
            return ScanIndex(self.storage).search(request)
        narrowed = _narrowed(fts_query(request.text, request.raw), request)
        params: dict[str, Any] = {"match": narrowed}
        tagged = ""
        if request.tag is not None and has_tokens(request.tag):
            # A second cursor on the table: its phrase never counts in the scores.
            tagged = f" AND memory_fts.rowid IN ({_ROWIDS_MATCHING} :tag)"
            params["tag"] = f"{{tags}} : {fts_string(request.tag)}"
        sql = (
            f"SELECT memory_fts.rowid, {RANK_FUNCTION}({self._matched(request, params)}, "
            f"{'d.sz' if self._docsize else 'NULL'}) AS score FROM memory_fts "
            + ("LEFT JOIN memory_fts_docsize d ON d.id = memory_fts.rowid " * self._docsize)
            + f"WHERE memory_fts MATCH :match{tagged} ORDER BY score LIMIT :window"
        )
        self.conn.create_function(RANK_FUNCTION, 4, _ranker(), deterministic=True)
        result = SearchResult(self.kind)
        seen: set[str] = set()
        levels = visible_levels(request.taint)
        with self._errors("search", request.text):
            for group in self._ranked(sql, params, request.limit):
                self._accept(group, narrowed, request, levels, result, seen)
                if len(result.hits) >= request.limit:
                    break
        return result

    @staticmethod
    def _matched(request: SearchRequest, params: dict[str, Any]) -> str:
        """SQL for whether the row matches in key, content, tags (0 or 1 each).

        bm25 with the weight of one column only is below zero exactly when a
        matched phrase occurs there (its corpus statistics only scale it;
        they are never used). A plain query's phrases are its words, and all
        lie in those three columns: a row matches in key (tags) when it is
        among the rows one of the words matches there, and a row that
        matches in neither matches in content. Two small rowid sets then
        stand in for bm25 on most rows.
        """
        if request.raw:
            return ", ".join(f"bm25(memory_fts, {weights}) < 0" for weights in COLUMN_WEIGHTS)
        words = " OR ".join(query_phrases(request.text))
        for name, column in (("in_key", "key"), ("in_tags", "tags")):
            # Narrowed as the search itself: the sets never hold a row above the taint.
            params[name] = _narrowed(f"{{{column}}} : ({words})", request)
        in_key, in_tags = (
            f"memory_fts.rowid IN ({_ROWIDS_MATCHING} :{name})" for name in ("in_key", "in_tags")
        )
        in_content = f"bm25(memory_fts, {COLUMN_WEIGHTS[1]}) < 0"
        content = f"CASE WHEN {in_key} OR {in_tags} THEN {in_content} ELSE 1 END"
        return f"{in_key}, {content}, {in_tags}"

    def _ranked(
        self, sql: str, params: dict[str, Any], size: int
    ) -> Iterator[list[tuple[int, float]]]:
        """(rowid, negated score) in score order, in groups of at least ``size`` rows
        (doubling up to 256) that never split a run of equal scores: ties are
        ordered later, by storage key.

        SQLite keeps the best ``:window`` rows (a heap, not a sort of every
        match); the last run of equal scores may be cut there, so it is left
        for the next, wider window, which skips what was already given.
        """
        done: float | None = None
        window = WINDOW
        group: list[tuple[int, float]] = []
        while True:
            rows = self.conn.execute(sql, {**params, "window": window}).fetchall()
            complete = len(rows) < window
            if not complete:
                cut = rows[-1][1]
                rows = [row for row in rows if row[1] != cut]
            for row in rows:
                if done is not None and row[1] <= done:
                    continue  # given from the narrower window
                if len(group) >= size and row[1] != group[-1][1]:
                    yield group
                    done, group, size = group[-1][1], [], min(size * 2, 256)
                group.append(row)
            if group:  # whole runs: every score in it is better than the cut
                yield group
                done, group, size = group[-1][1], [], min(size * 2, 256)
            if complete:
                return
            window *= 8

    def _accept(
        self,
        group: list[tuple[int, float]],
        match: str,
        request: SearchRequest,
        levels: tuple[Level, ...],
        result: SearchResult,
        seen: set[str],
    ) -> None:
        """Keep the rows whose kv record is the live, visible top version.

        ``group``: (rowid, negated score) in score order, whole groups of equal
        score; their columns, memory_meta record and snippet are read here, and
        rows of equal score go by storage key.
        """
        rowids = [rowid for rowid, _ in group]
        score_of = dict(group)
        marks = ",".join("?" * len(rowids))
        names = {level.name for level in levels}
        rows: list[tuple[float, str, int, IndexRow]] = []
        # rowid IN (...) without a MATCH: one lookup per row, never the doclists.
        for rowid, agent, level, key, tags, meta in self.conn.execute(
            "SELECT rowid, agent_id, classification, key, tags, (SELECT record_json "
            "FROM memory_meta m WHERE m.agent_id = memory_fts.agent_id "
            "AND m.classification = memory_fts.classification AND m.key = memory_fts.key) "
            f"FROM memory_fts WHERE rowid IN ({marks})",
            rowids,
        ):
            # The exact filters (the MATCH narrowed by tokens only).
            if level not in names or (request.agent is not None and agent != request.agent):
                continue
            if request.tag is not None and f" {request.tag} " not in f" {tags} ":
                continue  # necessary; the record's own tags are checked exactly below
            skey = f"{PREFIX}{agent}:{level}:{key}"
            score = score_of[rowid]
            snippet = functools.partial(self._snippet, match, rowid)
            rows.append((score, skey, rowid, (skey, agent, level, key, meta, -score, snippet)))
        rows.sort(key=lambda row: row[:3])
        accept_rows([row[3] for row in rows], self._kv, request, levels, result, seen)

    def _snippet(self, match: str, rowid: int) -> str:
        """The marked snippet of one hit's content (a seek in the doclists: rowid = ?)."""
        row = self.conn.execute(
            f"SELECT snippet(memory_fts, 3, '{HIGHLIGHT_START}', '{HIGHLIGHT_END}', '…', "
            f"{SNIPPET_TOKENS}) FROM memory_fts WHERE memory_fts MATCH ? AND rowid = ?",
            (match, rowid),
        ).fetchone()
        return "" if row is None else str(row[0] or "")

    # -- writes ---------------------------------------------------------------------

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

    # -- drift and repair -------------------------------------------------------------

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
                drift.note("missing", _name(triple))
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
                drift.note("orphaned", _name(triple))
            elif meta_hash is None or not rows:
                drift.note("missing", _name(triple))
            elif meta_hash != wanted[0] or len(rows) > 1 or rows[0] != wanted[1]:
                drift.note("stale", _name(triple))
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
        return drift

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
                current = self._kv([_name(triple) for triple in batch])
                for triple in batch:
                    # Rows present at survey time are looked up again inside this
                    # transaction: the gateway may have rewritten them since.
                    if triple in had_rows:
                        rowids += [(rowid,) for rowid in self._rows_of(conn, *triple)]
                    skey = _name(triple)
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

        for count, _ in in_batches(fix, rewrite, most=REPAIR_BATCH, gate=self._gate()):
            drift.fixed += count
            if on_batch is not None:
                on_batch(count)


def _name(triple: Triple) -> str:
    """The storage key of an index row's (agent, level, key)."""
    return f"{PREFIX}{triple[0]}:{triple[1]}:{triple[2]}"


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
        from triggerfish_cli.memory.keys import agent_prefix, split_key, visible_levels
        from triggerfish_cli.storage.sqlite.fts import Fts5Index, in_memory_copy

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
