"""Marks of the memories whose index rows were in step with kv, so that a search
finds the drifted ones without reading every value.

The gateway writes kv with ``INSERT OR REPLACE`` (UPSTREAM.md), which gives the
row a new rowid above every other; so do our writes of memory records. A mark
``(storage key, kv rowid)`` in our own table says: when kv held this key at
this rowid, its memory_meta row held the same value (or the record was
soft-deleted, so no search shows it). A search then reads only
the keys and rowids of kv (its key index) and the marks, in one ordered merge,
and compares values only for the memories whose rowid is not marked: those
written since the last ``memory reindex`` (which writes the marks) by anything
but our index-keeping writes (which keep their own mark in step). A rowid comes
back only when the row with the highest rowid is deleted and another row is
written before anything else: our deletes of a memory record drop its mark. A
store without the table is searched by comparing every value.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from triggerfish_cli.memory.keys import PREFIX
from triggerfish_cli.storage.sqlite.sql import range_clause

MARKS = "tfadmin_memory_marks"
MARKS_SQL = (
    f"CREATE TABLE IF NOT EXISTS {MARKS} "
    "(key TEXT PRIMARY KEY, kv_rowid INTEGER NOT NULL) WITHOUT ROWID"
)
DROP_MARK = f"DELETE FROM {MARKS} WHERE key = ?"
SET_MARK = f"INSERT OR REPLACE INTO {MARKS} (key, kv_rowid) SELECT key, rowid FROM kv WHERE key = ?"

#: Keys read at a time to cut the marking into batches (bounded memory).
WINDOW = 20_000
#: Keys marked in one write transaction at most.
MARK_BATCH = 2_000

#: Memories of kv between two keys (inclusive) whose memory_meta row holds kv's value,
#: or that are soft-deleted (``"expired":true``: searched nowhere, whatever the index holds).
_MARK_RANGE = f"""
WITH a AS (SELECT key, rowid AS rid, value, substr(key, 8) AS rest FROM kv
           WHERE key >= ? AND key <= ?),
b AS (SELECT key, rid, value, substr(rest, 1, instr(rest, ':') - 1) AS agent,
      substr(rest, instr(rest, ':') + 1) AS rest FROM a),
c AS (SELECT key, rid, value, agent, substr(rest, 1, instr(rest, ':') - 1) AS level,
      substr(rest, instr(rest, ':') + 1) AS mkey FROM b)
INSERT INTO {MARKS} (key, kv_rowid) SELECT key, rid FROM c WHERE EXISTS (
  SELECT 1 FROM memory_meta m WHERE m.agent_id = c.agent AND m.classification = c.level
  AND m.key = c.mkey AND m.record_json = c.value)
  OR CASE WHEN json_valid(value) THEN json_type(value, '$.expired') END = 'true'
"""


def has_marks(conn: sqlite3.Connection) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (MARKS,)).fetchone()
    return found is not None


def unmarked(where: str) -> str:
    """The rowids of kv rows in ``where`` (a key condition; its parameters are given
    twice) that carry no mark of their current rowid: one ordered merge of kv's key
    index and the marks, no value read."""
    return (
        f"SELECT rid FROM (SELECT key, rowid AS rid FROM kv WHERE {where} "
        f"EXCEPT SELECT key, kv_rowid FROM {MARKS} WHERE {where} ORDER BY 1, 2)"
    )


def windows(conn: sqlite3.Connection) -> Iterator[list[str]]:
    """The memory keys of kv in key order, :data:`WINDOW` at a time."""
    where, params = range_clause(PREFIX)
    after: list[str] = []
    while True:
        more = " AND key > ?" if after else ""
        rows = conn.execute(
            f"SELECT key FROM kv WHERE {where}{more} AND typeof(key) = 'text' "
            f"ORDER BY key LIMIT {WINDOW}",
            [*params, *after],
        ).fetchall()
        if not rows:
            return
        yield [row[0] for row in rows]
        after = [rows[-1][0]]


def mark_range(conn: sqlite3.Connection, first: str, last: str) -> None:
    """In a write transaction: the marks of the memories between ``first`` and ``last``."""
    conn.execute(f"DELETE FROM {MARKS} WHERE key >= ? AND key <= ?", (first, last))
    conn.execute(_MARK_RANGE, (first, last))
