"""The counts of a SQLite store (live or a physical copy), read from its key index
on the caller's connection: :class:`backup.counts.Counts` as a backup records them,
the same as :class:`backup.counts.KeyCounter` counts them one key at a time."""

from __future__ import annotations

import sqlite3
from collections import Counter

from triggerfish_cli import namespaces
from triggerfish_cli.backup.counts import Counts
from triggerfish_cli.memory.keys import LEVELS_BY_NAME
from triggerfish_cli.memory.keys import PREFIX as MEMORY_PREFIX
from triggerfish_cli.storage.provider import uncovered_ranges
from triggerfish_cli.storage.sqlite.sql import gap_clause, range_clause


def count_rows(conn: sqlite3.Connection) -> Counts:
    """Keys per namespace (unknown ones by first segment) and memory records per level.

    Reads only the key index: range counts for the known namespaces, one
    grouped query per gap between them, the memory keys for their levels.
    """
    found: dict[str, int] = {}
    for prefix in namespaces.PREFIXES:
        where, params = range_clause(prefix)
        count = int(conn.execute(f"SELECT count(*) FROM kv WHERE {where}", params).fetchone()[0])
        if count:
            found[prefix] = count
    for low, high in uncovered_ranges(namespaces.PREFIXES):
        where, params = gap_clause(low, high)
        if low is None:  # NULL keys sort first: in the first gap
            where = f"({where}) OR key IS NULL"
        # As namespaces.group_of: a group that is not UTF-8 text (a NULL or BLOB key) is "".
        rows = conn.execute(
            "SELECT CASE WHEN typeof(key) != 'text' THEN x'' WHEN instr(key, ':') > 0 "
            "THEN CAST(substr(key, 1, instr(key, ':')) AS BLOB) "
            f"ELSE x'' END AS grp, count(*) FROM kv WHERE {where} GROUP BY grp",
            params,
        ).fetchall()
        for raw, count in rows:
            try:
                group = bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                group = ""
            found[group] = found.get(group, 0) + int(count)
    return Counts(sum(found.values()), found, memory_levels(conn))


def memory_levels(conn: sqlite3.Connection) -> dict[str, int]:
    """Memory records per level: ``memory:<agent>:<LEVEL>:<key>`` (``memory.split_key``).

    One pass over the memory keys in the key index, read as bytes (one may
    not be UTF-8, cells.py): cheap however many agents there are (every
    cron or webhook run is an agent of its own, so a store may hold as many
    agents as memories).
    """
    levels: Counter[str] = Counter()
    names = {level.encode(): level for level in LEVELS_BY_NAME}
    plain: dict[bytes, bool] = {}
    end = MEMORY_PREFIX[:-1] + chr(ord(MEMORY_PREFIX[-1]) + 1)
    skip = len(MEMORY_PREFIX)
    # TEXT keys only, as the range counts of count_rows (a BLOB sorts after every TEXT)
    rows = conn.execute(
        "SELECT CAST(key AS BLOB) FROM kv WHERE key >= ? AND key < ?", (MEMORY_PREFIX, end)
    )
    for (raw,) in rows:
        agent, colon, rest = bytes(raw)[skip:].partition(b":")
        level, tail, _ = rest.partition(b":")
        name = names.get(level)
        if name is None or not (agent and colon and tail):
            continue
        known = plain.get(agent)
        if known is None:  # an agent not UTF-8: no memory (memory_level)
            known = plain[agent] = _utf8(agent)
        if known:
            levels[name] += 1
    return {level: count for level, count in levels.items() if count}


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True

