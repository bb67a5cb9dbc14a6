"""The PostgreSQL backend's counts, probes and checksums, computed by the server.

Many small statements (one per prefix or probe) go together in one libpq
pipeline, one round trip.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from triggerfish_cli.storage.postgres.connection import PostgresConnection, between, under
from triggerfish_cli.storage.provider import PrefixStats, batched, uncovered_ranges

if TYPE_CHECKING:
    import psycopg


class PostgresStats(PostgresConnection):
    """Counts and sizes per prefix, key probes, per-namespace checksums."""

    def any_keys(self, probes: Sequence[tuple[str, str | None]]) -> builtins.list[bool]:
        """One index probe per ``(prefix, after)``, all sent in one pipeline."""
        answers: builtins.list[bool] = []
        conn = self.connection
        for chunk in batched(probes, 500):
            with self.errors("probe"):
                cursors: builtins.list[psycopg.Cursor[Any] | None] = []
                with self._pipeline():
                    for prefix, after in chunk:
                        if "\x00" in prefix:
                            cursors.append(None)
                            continue
                        if after is not None and "\x00" in after:
                            after = after[: after.index("\x00")]
                        where, params = under(prefix, after)
                        cursors.append(
                            conn.execute(
                                f"SELECT EXISTS (SELECT 1 FROM {self.kv} WHERE {where})", params
                            )
                        )
                for cursor in cursors:
                    row = None if cursor is None else cursor.fetchone()
                    answers.append(bool(row and row[0]))
        return answers

    def count(self, prefix: str | None = None) -> int:
        if prefix and "\x00" in prefix:
            return 0
        where, params = under(prefix)
        with self.errors("count"):
            row = self.connection.execute(
                f"SELECT count(*) FROM {self.kv} WHERE {where}", params
            ).fetchone()
        return int(row[0]) if row else 0

    def prefix_stats(self, prefixes: Sequence[str]) -> dict[str, PrefixStats]:
        """One range count per prefix, sent together in a pipeline (one round trip)."""
        conn = self.connection
        stats: dict[str, PrefixStats] = {}
        with self.errors("stats"):
            cursors = []
            with self._pipeline():
                for prefix in prefixes:
                    where, params = under(prefix)
                    cursors.append(
                        conn.execute(
                            "SELECT count(*), coalesce(sum(octet_length(value)), 0) "
                            f"FROM {self.kv} WHERE {where}",
                            params,
                        )
                    )
            for prefix, cursor in zip(prefixes, cursors, strict=True):
                row = cursor.fetchone()
                stats[prefix] = PrefixStats(int(row[0]), int(row[1])) if row else PrefixStats()
        return stats

    def other_stats(self, known: Sequence[str], sep: str = ":") -> dict[str, PrefixStats]:
        """Group the keys in the gaps between the known prefix ranges by first segment."""
        groups: dict[str, PrefixStats] = {}
        with self.errors("stats"):
            for low, high in uncovered_ranges(known):
                where, params = between(low, high)
                rows = self.connection.execute(
                    "SELECT CASE WHEN strpos(key, %s) > 0 "
                    "THEN left(key, strpos(key, %s) + length(%s) - 1) ELSE '' END AS grp, "
                    "count(*), coalesce(sum(octet_length(value)), 0) "
                    f"FROM {self.kv} WHERE {where} GROUP BY grp",
                    [sep, sep, sep, *params],
                ).fetchall()
                for group, count, size in rows:
                    groups[group] = groups.get(group, PrefixStats()) + PrefixStats(
                        int(count), int(size)
                    )
        return groups

    def record_checksums(
        self, ranges: Sequence[tuple[str | None, str | None, str | None]]
    ) -> dict[str, tuple[int, int]]:
        """``(count, checksum)`` per namespace over key ranges, computed by the server.

        Each range is ``(low, high, group)``: the keys ``low <= key < high``
        (None: unbounded), all counted under ``group``, or with ``group``
        None grouped by first segment (as :meth:`other_stats` does). The
        algorithm is that of :mod:`triggerfish_cli.checksums`: per record the
        first 64 bits of ``md5(octet_length(key) || ':' || key || value)``,
        summed as numeric (the caller reduces it modulo 2**64).
        """
        part = "('x' || left(md5(octet_length(key)::text || ':' || key || value), 16))"
        sums = f"count(*), coalesce(sum({part}::bit(64)::bigint), 0)"
        segment = "CASE WHEN strpos(key, ':') > 0 THEN left(key, strpos(key, ':')) ELSE '' END"
        conn = self.connection
        found: dict[str, tuple[int, int]] = {}
        with self.errors("checksum"):
            cursors = []
            with self._pipeline():
                for low, high, group in ranges:
                    where, params = between(low, high)
                    if group is not None:
                        statement = f"SELECT %s, {sums} FROM {self.kv} WHERE {where}"
                        params = [group, *params]
                    else:
                        statement = (
                            f"SELECT {segment} AS grp, {sums} FROM {self.kv} "
                            f"WHERE {where} GROUP BY grp"
                        )
                    cursors.append(conn.execute(statement, params))
            for cursor in cursors:
                for group, count, checksum in cursor.fetchall():
                    if count:
                        before = found.get(group, (0, 0))
                        found[group] = (before[0] + int(count), before[1] + int(checksum))
        return found
