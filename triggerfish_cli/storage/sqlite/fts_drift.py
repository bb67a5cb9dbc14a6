"""The memories the SQLite index lacks or holds stale, searched from kv.

The gateway never indexes what cron and trigger runs save, and an edit of kv
alone leaves its memory_meta row (and memory_fts row) stale. A search must
still find those memories, by their current text, with the scores a freshly
reindexed store would give, and without writing to the store.

One SQL statement finds them: every memory in the searched key range (one
agent's, or all) at a visible level whose memory_meta row is absent or holds
another value than kv (the comparison runs in SQLite; only those rows reach
Python). The live records among them go, a batch at a time, into a private
database of the same shape (``memory_fts`` with the same tokenizer,
``memory_meta``): SQLite's anonymous temporary database, kept in RAM up to
:data:`CACHE_KIB` and spilled to a temporary file beyond, never the store.
The same search then runs on it, its hits checked against the store's kv.

memory_meta stands for what memory_fts holds: the gateway and our writes
always change both for a record. A record whose meta row equals kv is
searched in the index, where every row whose meta differs from kv is
skipped, so each record is searched in exactly one place.
"""

from __future__ import annotations

import sqlite3

from triggerfish_cli.memory.index import SearchRequest
from triggerfish_cli.memory.keys import agent_prefix, visible_levels
from triggerfish_cli.memory.record import MemoryRecord, parse_record
from triggerfish_cli.serialization import fast_loads
from triggerfish_cli.storage.sqlite.fts_marks import unmarked
from triggerfish_cli.storage.sqlite.fts_tables import fts_row
from triggerfish_cli.storage.sqlite.sql import (
    INSERT_FTS,
    MEMORY_FTS_SQL,
    MEMORY_META_SQL,
    UPSERT_META,
    lenient,
    odd_rows,
    private_transaction,
    range_clause,
)

#: Rows fetched and inserted at a time.
BATCH = 500
#: The private database's page cache (KiB): beyond it, SQLite spills to a temporary file.
CACHE_KIB = 65_536

#: Memories in a key range (``{where}``) at the levels ``{levels}`` whose memory_meta
#: row is absent or differs from kv; a storage key splits on its first three colons.
_DRIFTED = """
WITH a AS (SELECT key, value, substr(key, 8) AS rest FROM kv WHERE {where}{unmarked}),
b AS (SELECT key, value, substr(rest, 1, instr(rest, ':') - 1) AS agent,
      substr(rest, instr(rest, ':') + 1) AS rest FROM a),
c AS (SELECT key, value, agent, substr(rest, 1, instr(rest, ':') - 1) AS level,
      substr(rest, instr(rest, ':') + 1) AS mkey FROM b)
SELECT key, value FROM c WHERE level IN ({levels}) AND NOT EXISTS (
  SELECT 1 FROM memory_meta m WHERE m.agent_id = c.agent AND m.classification = c.level
  AND m.key = c.mkey AND m.record_json = c.value)
"""


def drifted_sql(request: SearchRequest, marked: bool = False) -> tuple[str, list[str]]:
    """The statement that lists the drifted memories a search covers, and its parameters.

    One agent: the key range of each visible level (the hidden ones are never
    read); every agent: the whole memory range, levels filtered by name. With
    ``marked`` (fts_marks.py), only the values of unmarked rows are read.
    """
    names = [level.name for level in visible_levels(request.taint)]
    prefixes = [agent_prefix(request.agent)]
    if request.agent is not None:
        prefixes = [f"{prefixes[0]}{name}:" for name in names]
    clauses = [range_clause(prefix) for prefix in prefixes]
    where = " OR ".join(f"({clause})" for clause, _ in clauses)
    params = [param for _, clause_params in clauses for param in clause_params]
    levels = ",".join("?" * len(names))
    if not marked:
        return _DRIFTED.format(where=where, unmarked="", levels=levels), [*params, *names]
    rows = f" AND rowid IN ({unmarked(where)})"
    return _DRIFTED.format(where=where, unmarked=rows, levels=levels), [*params * 3, *names]


def _private() -> sqlite3.Connection:
    """SQLite's anonymous temporary database, with the index's two tables."""
    conn = sqlite3.connect("", isolation_level=None)
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    conn.execute(MEMORY_FTS_SQL)
    conn.execute(MEMORY_META_SQL)
    return conn


def _fill(
    store: sqlite3.Connection, request: SearchRequest, marked: bool
) -> tuple[sqlite3.Connection, int]:
    """A private database holding every live drifted memory of ``request``'s scope."""
    sql, params = drifted_sql(request, marked)
    private = _private()
    loads = fast_loads()
    count = 0
    try:
        with private_transaction(private):
            cursor = store.execute(sql, params)
            while batch := cursor.fetchmany(BATCH):
                rows = []
                for skey, value in odd_rows(batch):
                    record = parse_record(skey, value, loads)
                    if isinstance(record, MemoryRecord) and record.live:
                        rows.append((fts_row(record), value))
                private.executemany(INSERT_FTS, [row for row, _ in rows])
                private.executemany(UPSERT_META, [(*row[:3], value) for row, value in rows])
                count += len(rows)
    except BaseException:
        private.close()
        raise
    return private, count


def drifted_copy(
    store: sqlite3.Connection, request: SearchRequest, marked: bool = False
) -> tuple[sqlite3.Connection, int]:
    """A private index of the memories ``request`` covers that the store's index lacks
    or holds stale (see the module docstring), and their count; the caller closes it."""
    return lenient(store, lambda conn: _fill(conn, request, marked))
