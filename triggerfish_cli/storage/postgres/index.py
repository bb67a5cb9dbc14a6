"""The PostgreSQL memory index: a table of our own with an english tsvector and a GIN index.

kv stays the source of truth and is never altered: the index lives beside it
in the store's schema, in ``tfadmin_memory_fts``::

    storage_key text COLLATE "C" PRIMARY KEY,   -- memory:<agent>:<LEVEL>:<key>
    agent_id, classification, key, content, tags text NOT NULL,
    record_json text NOT NULL,                  -- the kv value that was indexed
    document tsvector GENERATED ALWAYS AS (to_tsvector('english', key)
        || to_tsvector('english', content) || to_tsvector('english', tags)) STORED
    + GIN (document)

One row per live record, like the SQLite tables (memory_fts + memory_meta).
Saves and deletes through our core write kv and the row in one transaction
(the kv row locked with ``FOR UPDATE``); ``memory reindex`` creates the
table and brings it in step with kv. Until it exists, search scans (the
:class:`~triggerfish_cli.storage.sqlite.fts.ScanIndex`), as on SQLite without the
gateway's tables. The gateway does not know the table: each search first
indexes what it wrote directly to kv (:meth:`PgFtsIndex.catch_up`), so
search sees what ``memory get`` sees.

Plain-word queries: each word becomes ``phraseto_tsquery('english', word)``
(so its tokens must occur in that order, like an FTS5 string), all of them
ANDed; words without a lexeme are dropped. Raw queries are Postgres's own
``to_tsquery('english', text)`` syntax (``&``, ``|``, ``!``, ``<->``, ``:*``).
Hits are ranked by ``ts_rank_cd``: scores are comparable within one search,
not with the bm25 scores of SQLite. Matching differs from FTS5's porter
tokenizer at the edges: english stop words (``the``, ``and``) are not
indexed, the snowball stemmer is not porter, and accents are significant.

Every hit is checked against kv exactly as on SQLite (same value as indexed,
live, not shadowed by a live version at a higher visible level, tag), and
level, agent and tag are filtered in SQL before the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from triggerfish_cli.classification import Level
from triggerfish_cli.errors import TriggerfishError, UsageError
from triggerfish_cli.memory.index import (
    HIGHLIGHT_END,
    HIGHLIGHT_START,
    BatchCallback,
    Drift,
    IndexRow,
    SearchRequest,
    SearchResult,
    accept_rows,
)
from triggerfish_cli.memory.keys import PREFIX, agent_prefix, split_key, visible_levels
from triggerfish_cli.memory.record import MemoryRecord, parse_record
from triggerfish_cli.serialization import fast_loads
from triggerfish_cli.storage.postgres.backend import PostgresStorage
from triggerfish_cli.storage.sqlite.fts import ScanIndex

TABLE = "tfadmin_memory_fts"
BATCH = 500
_COLUMNS = "storage_key, agent_id, classification, key, content, tags, record_json"
#: ASCII punctuation separates tokens, as in FTS5's unicode61 tokenizer (Postgres's own
#: parser would keep ``alice.c``, ``a/b`` or ``x@y.z`` whole, as file, host or email).
_PUNCT = r"'[!-/:-@\[-`{-~]+'"


def _words(column: str) -> str:
    """SQL: ``column`` with ASCII punctuation turned into spaces."""
    return f"regexp_replace({column}, {_PUNCT}, ' ', 'g')"


_HEADLINE = (
    f"StartSel={HIGHLIGHT_START}, StopSel={HIGHLIGHT_END}, MaxWords=16, MinWords=6, "
    "ShortWord=0, MaxFragments=1, FragmentDelimiter=…"
)


def for_postgres(provider: Any) -> PgFtsIndex:
    assert isinstance(provider, PostgresStorage)
    return PgFtsIndex(provider)


def _row(record: MemoryRecord) -> tuple[str, ...]:
    return (
        record.storage_key,
        record.agent,
        record.level.name,
        record.key,
        record.content,
        " ".join(record.tags),
        record.value,
    )


class PgFtsIndex:
    """:class:`~triggerfish_cli.memory.index.MemoryIndex` on a Postgres store."""

    def __init__(self, storage: PostgresStorage) -> None:
        # lazy: psycopg (~290 ms) is banned at module level (TID253)
        from psycopg import sql

        self.storage = storage
        conn = storage.connection
        self.name = sql.Identifier(storage.schema, TABLE).as_string(conn).replace("%", "%%")
        self.index_name = sql.Identifier(f"{TABLE}_document").as_string(conn)
        with storage.errors("open the memory index"):
            row = conn.execute(
                "SELECT to_regclass(%s)::oid",
                (sql.Identifier(storage.schema, TABLE).as_string(conn),),
            ).fetchone()
        self.present = bool(row and row[0])
        self.kind = "postgres-fts" if self.present else "scan"

    @contextmanager
    def _transaction(self, what: str) -> Iterator[Any]:
        conn = self.storage.connection
        with self.storage.errors(what), conn.transaction():
            yield conn

    # -- search ---------------------------------------------------------------------

    def _query(self, request: SearchRequest) -> tuple[str, list[Any]]:
        """The tsquery expression and its parameters."""
        if request.raw:
            if not request.text.strip():
                raise UsageError("the query is empty")
            return "to_tsquery('english', %s)", [request.text]
        words = request.text.split()
        kept: list[str] = []
        if words:
            with self.storage.errors("search"):
                rows = self.storage.connection.execute(
                    f"SELECT w, numnode(phraseto_tsquery('english', {_words('w')})) > 0 "
                    "FROM unnest(%s::text[]) WITH ORDINALITY AS u(w, n) ORDER BY n",
                    (words,),
                ).fetchall()
            kept = [word for word, useful in rows if useful]
        if not kept:
            raise UsageError(
                f"nothing to search for in {request.text!r}",
                hint="give at least one word or number (english stop words are not indexed)",
            )
        parts = " && ".join(f"phraseto_tsquery('english', {_words('%s')})" for _ in kept)
        return f"({parts})", kept

    def search(self, request: SearchRequest) -> SearchResult:
        if not self.present:
            return ScanIndex(self.storage).search(request)
        if "\x00" in request.text:
            raise UsageError("the query holds a NUL character")
        query, params = self._query(request)
        if not self.storage.read_only:
            self.catch_up()
        levels = visible_levels(request.taint)
        where = ["f.document @@ q.q", "f.classification = ANY(%s)"]
        filters: list[Any] = [[level.name for level in levels]]
        if request.agent is not None:
            where.append("f.agent_id = %s")
            filters.append(request.agent)
        if request.tag is not None:
            where.append("strpos(' ' || f.tags || ' ', %s) > 0")  # checked exactly below
            filters.append(f" {request.tag} ")
        statement = (
            f"SELECT f.storage_key, f.agent_id, f.classification, f.key, f.record_json, "
            f"ts_rank_cd(f.document, q.q) AS score, "
            f"ts_headline('english', f.content, q.q, %s) "
            f"FROM {self.name} f, (SELECT {query}) AS q(q) WHERE {' AND '.join(where)} "
            "ORDER BY score DESC, f.storage_key LIMIT %s OFFSET %s"
        )
        result = SearchResult(self.kind)
        seen: set[str] = set()
        offset, batch = 0, request.limit
        # lazy: psycopg (~290 ms) is banned at module level (TID253)
        from psycopg import errors

        while len(result.hits) < request.limit:
            try:
                with self.storage.errors("search"):
                    rows = self.storage.connection.execute(
                        statement, [_HEADLINE, *params, *filters, batch, offset]
                    ).fetchall()
            except TriggerfishError as exc:
                if request.raw and isinstance(exc.__cause__, errors.SyntaxError):
                    raise UsageError(f"invalid tsquery {request.text!r}: {exc}") from None
                raise
            if not rows:
                break
            self._accept(rows, request, levels, result, seen)
            offset += len(rows)
            if len(rows) < batch:
                break
            batch = min(batch * 2, 256)
        return result

    def _accept(
        self,
        rows: list[tuple[Any, ...]],
        request: SearchRequest,
        levels: tuple[Level, ...],
        result: SearchResult,
        seen: set[str],
    ) -> None:
        """Keep the rows whose kv record is the live, visible top version."""
        checked: list[IndexRow] = [
            (skey, agent, level, key, indexed, float(score), marked)
            for skey, agent, level, key, indexed, score, marked in rows
        ]
        accept_rows(checked, self.storage.get_many, request, levels, result, seen)

    def catch_up(self) -> int:
        """Index what was written to kv behind our back (by the gateway); the count fixed.

        One full join of the memory range of kv with the index (a hash join,
        one pass over each) finds the rows out of step: memories in kv that
        look live (``"expired":false``, as the gateway writes it; parsing
        decides) and are not indexed, index rows whose kv value changed, and
        index rows whose kv row is gone. Only those are rewritten, in one short
        transaction, so a search on Postgres always sees what ``memory get``
        sees. Skipped on a read-only store (the rows then stay stale until
        ``memory reindex``).
        """
        kv, conn = self.storage.kv, self.storage.connection
        with self.storage.errors("memory index catch-up"):
            rows = conn.execute(
                "SELECT coalesce(k.key, f.storage_key) FROM "
                f"(SELECT key, value FROM {kv} WHERE key >= %s AND key < %s) AS k "
                f"FULL JOIN {self.name} AS f ON f.storage_key = k.key "
                "WHERE CASE WHEN k.key IS NULL THEN true "  # its kv row is gone
                "WHEN f.storage_key IS NULL THEN strpos(k.value, %s) > 0 "  # not indexed
                "ELSE f.record_json <> k.value END",  # changed since
                (PREFIX, PREFIX[:-1] + ";", '"expired":false'),
            ).fetchall()
        keys = sorted(row[0] for row in rows)
        for start in range(0, len(keys), BATCH):
            self._resync(keys[start : start + BATCH], "memory index catch-up")
        return len(keys)

    def _resync(self, keys: Sequence[str], what: str) -> None:
        """Rewrite the rows of ``keys`` from kv as it is now, in one transaction."""
        with self._transaction(what) as conn:
            # Read kv inside the transaction: the gateway may have written since.
            current = dict(
                conn.execute(
                    f"SELECT key, value FROM {self.storage.kv} WHERE key = ANY(%s) FOR SHARE",
                    (list(keys),),
                ).fetchall()
            )
            for skey in keys:
                self._index(conn, skey, current.get(skey))

    # -- writes ---------------------------------------------------------------------

    def _index(self, conn: Any, skey: str, value: str | None) -> None:
        """Bring the row of one storage key in step with its kv value (in a transaction)."""
        record = None if value is None else parse_record(skey, value)
        if isinstance(record, MemoryRecord) and record.live and record.storage_key == skey:
            conn.execute(
                f"INSERT INTO {self.name} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (storage_key) DO UPDATE SET agent_id = EXCLUDED.agent_id, "
                "classification = EXCLUDED.classification, key = EXCLUDED.key, "
                "content = EXCLUDED.content, tags = EXCLUDED.tags, "
                "record_json = EXCLUDED.record_json",
                _row(record),
            )
        else:
            conn.execute(f"DELETE FROM {self.name} WHERE storage_key = %s", (skey,))

    def write(
        self, storage_key: str, update: Callable[[str | None], str]
    ) -> tuple[str | None, str]:
        kv = self.storage.kv
        with self._transaction("memory write") as conn:
            row = conn.execute(
                f"SELECT value FROM {kv} WHERE key = %s FOR UPDATE", (storage_key,)
            ).fetchone()
            old = None if row is None else str(row[0])
            new = update(old)
            conn.execute(
                f"INSERT INTO {kv} (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (storage_key, new),
            )
            if self.present:
                self._index(conn, storage_key, new)
        return old, new

    def reindex(self, storage_keys: Sequence[str]) -> int:
        if not self.present:
            return 0
        keys = sorted(storage_keys)
        for start in range(0, len(keys), BATCH):
            self._resync(keys[start : start + BATCH], "memory reindex of imported rows")
        return len(keys)

    def hard_delete(
        self, items: Sequence[tuple[str, str]], *, on_batch: BatchCallback | None = None
    ) -> int:
        deleted = 0
        for start in range(0, len(items), BATCH):
            chunk = [(k, v) for k, v in items[start : start + BATCH] if "\x00" not in k + v]
            with self._transaction("memory purge") as conn:
                gone = conn.execute(
                    f"DELETE FROM {self.storage.kv} AS kv "
                    "USING unnest(%s::text[], %s::text[]) AS d(key, value) "
                    "WHERE kv.key = d.key AND kv.value = d.value RETURNING kv.key",
                    ([k for k, _ in chunk], [v for _, v in chunk]),
                ).fetchall()
                keys = [row[0] for row in gone]
                if self.present and keys:
                    conn.execute(f"DELETE FROM {self.name} WHERE storage_key = ANY(%s)", (keys,))
            deleted += len(keys)
            if on_batch is not None:
                on_batch(len(keys))
        return deleted

    # -- drift and repair -------------------------------------------------------------

    def _survey(self, levels: Sequence[Level], agent: str | None) -> tuple[Drift, list[str]]:
        """The drift, and the storage keys whose rows must be rewritten or removed."""
        drift = Drift(self.kind, tuple(levels), indexed=self.present)
        drift.tables_missing = not self.present
        names = {level.name for level in levels}
        loads = fast_loads()
        want: dict[str, str] = {}
        for skey, value in self.storage.scan(agent_prefix(agent), batch_size=2000):
            parts = split_key(skey)
            if parts is None or parts[1].name not in names:
                continue
            record = parse_record(skey, value, loads)
            if isinstance(record, MemoryRecord) and record.live:
                want[skey] = value
        drift.records = len(want)
        have: dict[str, str] = {}
        if self.present:
            where = "classification = ANY(%s)"
            params: list[Any] = [sorted(names)]
            if agent is not None:
                where += " AND agent_id = %s"
                params.append(agent)
            with self.storage.errors("read the memory index"):
                have = dict(
                    self.storage.connection.execute(
                        f"SELECT storage_key, record_json FROM {self.name} WHERE {where}", params
                    ).fetchall()
                )
        fix: list[str] = []
        for skey in sorted(want.keys() | have.keys()):
            wanted, indexed = want.get(skey), have.get(skey)
            if wanted is None:
                drift.note("orphaned", skey)
            elif indexed is None:
                drift.note("missing", skey)
            elif indexed != wanted:
                drift.note("stale", skey)
            else:
                drift.in_sync += 1
                continue
            fix.append(skey)
        return drift, fix

    def check(self, levels: Sequence[Level], *, agent: str | None = None) -> Drift:
        return self._survey(levels, agent)[0]

    def create(self) -> None:
        """The table and its GIN index (idempotent; never touches kv)."""
        with self._transaction("create the memory index table") as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.name} ("
                'storage_key text COLLATE "C" PRIMARY KEY, agent_id text NOT NULL, '
                "classification text NOT NULL, key text NOT NULL, content text NOT NULL, "
                "tags text NOT NULL, record_json text NOT NULL, "
                "document tsvector GENERATED ALWAYS AS ("
                f"to_tsvector('english', {_words('key')}) || "
                f"to_tsvector('english', {_words('content')}) || "
                f"to_tsvector('english', {_words('tags')})) STORED)"
            )
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS {self.index_name} ON {self.name} USING GIN (document)"
            )
        self.present, self.kind = True, "postgres-fts"

    def repair(self, levels: Sequence[Level], *, on_batch: BatchCallback | None = None) -> Drift:
        if not self.present:
            self.create()
        drift, fix = self._survey(levels, None)
        for start in range(0, len(fix), BATCH):
            batch = fix[start : start + BATCH]
            self._resync(batch, "memory reindex")
            drift.fixed += len(batch)
            if on_batch is not None:
                on_batch(len(batch))
        if fix:  # fresh planner statistics for the searches and catch-ups that follow
            with self.storage.errors("memory reindex"):
                self.storage.connection.execute(f"ANALYZE {self.name}")
        return drift


__all__ = ["PREFIX", "TABLE", "PgFtsIndex", "for_postgres"]
