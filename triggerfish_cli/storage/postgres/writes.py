"""The PostgreSQL backend's bulk writes and batched deletes.

- Bulk writes are ``COPY``: straight into ``kv`` when the batch's key range
  is empty there (a migration), else into a temporary staging table and
  upserted from it in the same transaction. Every batch is one transaction.
- Deletes go in batches of one statement each (``= ANY(array)``);
  compare-and-delete is one ``DELETE ... USING unnest(keys, values)``.
- PostgreSQL text cannot hold NUL characters: a key or value containing one
  is refused (exit 8) before anything of its batch is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.errors import InvalidDataError
from triggerfish_cli.storage.postgres.connection import PostgresConnection
from triggerfish_cli.storage.provider import DEFAULT_BATCH, BatchCallback, after_batch, batched

#: Below this many rows a write is an executemany upsert; from it on, COPY.
COPY_THRESHOLD = 64


class PostgresWrites(PostgresConnection):
    """``set_many`` by COPY, deletes and compare-and-swap in one statement a batch."""

    _stage_ready: bool | None

    def _ensure_stage(self) -> bool:
        """The session's staging table for bulk upserts; False without TEMP privilege."""
        if self._stage_ready is None:
            # lazy: psycopg, loaded only when a Postgres store is used
            from psycopg import errors

            try:
                self.connection.execute(
                    "CREATE TEMP TABLE IF NOT EXISTS tfadmin_stage "
                    '(key text COLLATE "C" NOT NULL, value text NOT NULL) ON COMMIT DELETE ROWS'
                )
                self._stage_ready = True
            except errors.InsufficientPrivilege:
                self._stage_ready = False  # upsert row by row (pipelined) instead
        return self._stage_ready

    def set_many(self, items: Iterable[tuple[str, str]]) -> int:
        """All items in one transaction (the last value of a repeated key wins)."""
        staged = dict(items)
        for key, value in staged.items():
            check_text(key, value)
        if not staged:
            return 0
        conn = self.connection
        if len(staged) < COPY_THRESHOLD:
            self._upsert(staged)
            return len(staged)
        # lazy: psycopg, loaded only when a Postgres store is used
        from psycopg import errors

        with self.errors("write"):
            low, high = min(staged), max(staged)
            taken = conn.execute(
                f"SELECT 1 FROM {self.kv} WHERE key >= %s AND key <= %s LIMIT 1", (low, high)
            ).fetchone()
            if taken is None:
                try:
                    with conn.transaction():
                        self._copy(f"{self.kv} (key, value)", staged)
                    return len(staged)
                except errors.UniqueViolation:
                    pass  # written by someone else meanwhile: upsert instead
            if not self._ensure_stage():
                self._upsert(staged)
                return len(staged)
            with conn.transaction():
                self._copy("pg_temp.tfadmin_stage (key, value)", staged)
                conn.execute(
                    f"INSERT INTO {self.kv} (key, value) "
                    "SELECT key, value FROM pg_temp.tfadmin_stage "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                )
        return len(staged)

    def _upsert(self, staged: Mapping[str, str]) -> None:
        conn = self.connection
        with self.errors("write"), conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self.kv} (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                list(staged.items()),
            )

    def _copy(self, table: str, rows: Mapping[str, str]) -> None:
        with (
            self.connection.cursor() as cur,
            cur.copy(f"COPY {table} FROM STDIN") as copy,
        ):
            for row in rows.items():
                copy.write_row(row)

    def _batched(
        self,
        statement: str,
        batches: Iterable[Sequence[Any]],
        pause: float,
        on_batch: BatchCallback | None,
    ) -> int:

        done = 0
        for params in batches:
            with self.errors("delete"):
                cursor = self.connection.execute(statement, params)
            changed = max(cursor.rowcount, 0)
            done += changed
            after_batch(changed, pause, on_batch)
        return done

    def delete_many(
        self,
        keys: Iterable[str],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        batches = (([k for k in batch if "\x00" not in k],) for batch in batched(keys, batch_size))
        return self._batched(f"DELETE FROM {self.kv} WHERE key = ANY(%s)", batches, pause, on_batch)

    def delete_if_unchanged(
        self,
        items: Iterable[tuple[str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        def columns(batch: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
            kept = [(k, v) for k, v in batch if "\x00" not in k and "\x00" not in v]
            return [k for k, _ in kept], [v for _, v in kept]

        batches = (columns(batch) for batch in batched(items, batch_size))
        return self._batched(
            f"DELETE FROM {self.kv} AS kv USING unnest(%s::text[], %s::text[]) AS d(key, value) "
            "WHERE kv.key = d.key AND kv.value = d.value",
            batches,
            pause,
            on_batch,
        )

    def replace_if_unchanged(
        self,
        items: Iterable[tuple[str, str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        """Compare-and-swap, one ``UPDATE ... FROM unnest(...)`` per batch.

        The comparison and the write are one statement: a row the gateway
        rewrites meanwhile is either rewritten before our UPDATE locks it
        (then its value no longer matches: kept) or after (its write wins).
        """

        def columns(batch: list[tuple[str, str, str]]) -> tuple[list[str], ...]:
            for key, _old, new in batch:
                check_text(key, new)
            kept = dict(((k, o), n) for k, o, n in batch if "\x00" not in o)
            return [k for k, _ in kept], [o for _, o in kept], list(kept.values())

        batches = (columns(batch) for batch in batched(items, batch_size))
        return self._batched(
            f"UPDATE {self.kv} AS kv SET value = d.new "
            "FROM unnest(%s::text[], %s::text[], %s::text[]) AS d(key, old, new) "
            "WHERE kv.key = d.key AND kv.value = d.old",
            batches,
            pause,
            on_batch,
        )


def check_text(key: str, value: str) -> None:
    """Refuse what PostgreSQL text cannot hold (NUL) and what no backend takes."""
    cells.refuse(key, value, "postgres")
    if "\x00" in key or "\x00" in value:
        where = "key" if "\x00" in key else "value"
        raise InvalidDataError(
            f"{key!r}: PostgreSQL text cannot hold the NUL character in the {where}"
        )
