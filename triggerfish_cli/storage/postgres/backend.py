"""The PostgreSQL backend (psycopg 3, imported lazily; extra ``triggerfish-admin[postgres]``).

One table in a schema of its own (``triggerfish`` unless configured)::

    CREATE TABLE kv (key text COLLATE "C" PRIMARY KEY, value text NOT NULL)

``COLLATE "C"`` makes the primary-key index byte-ordered, so key order is
binary order (as on SQLite and S3) and a prefix is one index range scan,
``key >= :p AND key < :p_next`` (the same bounds as SQLite).

The backend's parts: :mod:`.connection` (DSN, errors, the base class),
:mod:`.schema` (the kv table checked on open, the store's id), :mod:`.writes`
(COPY, batched deletes), :mod:`.stats` (counts, probes, checksums); this
module holds the class itself, the five and the scans.

Design notes:

- One connection, autocommit, no pool: a command runs one thing at a time,
  and a pool would only add a thread and start-up time.
- Scans are keyset-paged (``key > :last ORDER BY key LIMIT n``), not a
  server-side cursor: each page is its own short statement, so a long scan
  of a live store holds no transaction or snapshot open (no vacuum held
  back, nothing to lose when the connection drops), and it resumes from any
  key, like SQLite's.
- Bulk writes are ``COPY``: straight into ``kv`` when the batch's key range
  is empty there (a migration), else into a temporary staging table and
  upserted from it in the same transaction. Every batch is one transaction.
- Deletes go in batches of one statement each (``= ANY(array)``);
  compare-and-delete is one ``DELETE ... USING unnest(keys, values)``.
- Connecting times out (``connect_timeout``, default 5 s) and TCP
  keepalives detect a vanished server; both are errors with exit 7 naming
  the server and the reason, never a hang or a traceback.
- PostgreSQL text cannot hold NUL characters: a key or value containing one
  is refused (exit 8) before anything of its batch is written.

Passwords never come from triggerfish.yaml: libpq reads ``PGPASSWORD``,
``~/.pgpass`` or a service file (``PGSERVICE``) itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage.postgres.connection import under
from triggerfish_cli.storage.postgres.lock import advisory_lock
from triggerfish_cli.storage.postgres.schema import NoStoreError, PostgresSchema
from triggerfish_cli.storage.postgres.stats import PostgresStats
from triggerfish_cli.storage.postgres.writes import COPY_THRESHOLD, PostgresWrites, check_text
from triggerfish_cli.storage.provider import DEFAULT_BATCH, batched
from triggerfish_cli.storage.remote_settings import DEFAULT_SCHEMA, check_dsn, check_schema

if TYPE_CHECKING:
    import psycopg

__all__ = ["COPY_THRESHOLD", "NoStoreError", "PostgresStorage", "open_config"]


def open_config(config: StorageConfig, create: bool) -> PostgresStorage:
    """The factory's opener for ``backend: postgres``."""
    options = dict(config.options)
    return PostgresStorage(
        options.get("dsn", ""),
        schema=options.get("schema", DEFAULT_SCHEMA),
        create=create or bool(options.get("create", False)),
        read_only=bool(options.get("read_only", False)),
        connect_timeout=options.get("connect_timeout"),
    )


class PostgresStorage(PostgresSchema, PostgresWrites, PostgresStats):
    backend = "postgres"

    def __init__(
        self,
        dsn: str = "",
        *,
        schema: str = DEFAULT_SCHEMA,
        create: bool = False,
        read_only: bool = False,
        connect_timeout: int | None = None,
    ) -> None:
        check_dsn(dsn, "postgres")
        self.schema = check_schema(schema, "schema")
        self._dsn, self._connect_timeout = dsn, connect_timeout
        self.read_only = read_only
        self._conn = None
        self._stage_ready = None
        self._conn = self._connect(dsn, connect_timeout)
        self._server = self._describe_server()
        try:
            # lazy: psycopg (~60 ms) is imported once a Postgres store is opened (module doc)
            from psycopg import sql

            self.table = sql.Identifier(self.schema, "kv").as_string(self._conn)
            #: The table's name for statement text (``%`` doubled for psycopg).
            self.kv = self.table.replace("%", "%%")
            with self.errors("open"):
                self._check_encoding()
                self._prepare_table(create)
                if read_only:
                    self._conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        except BaseException:
            self.close()
            raise

    # -- the five -------------------------------------------------------------------

    def get(self, key: str) -> str | None:
        if "\x00" in key:
            return None
        with self.errors("get"):
            row = self.connection.execute(
                f"SELECT value FROM {self.kv} WHERE key = %s", (key,)
            ).fetchone()
        return None if row is None else str(row[0])

    def set(self, key: str, value: str) -> None:
        check_text(key, value)
        with self.errors("set"):
            self.connection.execute(
                f"INSERT INTO {self.kv} (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (key, value),
            )

    def delete(self, key: str) -> None:
        if "\x00" in key:
            return
        with self.errors("delete"):
            self.connection.execute(f"DELETE FROM {self.kv} WHERE key = %s", (key,))

    def list(self, prefix: str | None = None) -> list[str]:
        if prefix and "\x00" in prefix:
            return []
        where, params = under(prefix)
        with self.errors("list"):
            rows = self.connection.execute(
                f"SELECT key FROM {self.kv} WHERE {where} ORDER BY key", params
            ).fetchall()
        return [row[0] for row in rows]

    def clear(self) -> None:
        """Delete every key: one ``TRUNCATE``, waiting at most 10 s for other writers."""
        conn = self.connection
        with self.errors("clear"), conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '10s'")
            conn.execute(f"TRUNCATE {self.kv}")

    # -- native admin operations ----------------------------------------------------

    def _paged(
        self, columns: str, prefix: str | None, start_after: str | None, batch_size: int
    ) -> Iterator[tuple[Any, ...]]:
        if prefix and "\x00" in prefix:
            return
        if start_after is not None and "\x00" in start_after:
            # No key holds NUL, so no key lies between the part before it and itself.
            start_after = start_after[: start_after.index("\x00")]
        last = start_after
        while True:
            where, params = under(prefix, last)
            with self.errors("scan"):
                rows = self.connection.execute(
                    f"SELECT {columns} FROM {self.kv} WHERE {where} ORDER BY key LIMIT %s",
                    [*params, batch_size],
                ).fetchall()
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
        yield from self._paged("key, value", prefix, start_after, batch_size)

    def snapshot_scan(self, *, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[str, str]]:
        """One REPEATABLE READ, READ ONLY transaction (a snapshot), streamed by a server cursor."""
        conn = self.connection
        with self.errors("scan"), conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            with conn.cursor(name="tfadmin_snapshot") as cursor:
                cursor.itersize = batch_size
                cursor.execute(
                    f"SELECT key, value FROM {self.kv} WHERE key >= %s ORDER BY key", ("",)
                )
                yield from cursor

    def scan_keys(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> Iterator[str]:
        for row in self._paged("key", prefix, start_after, max(batch_size, 5000)):
            yield row[0]

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for batch in batched((k for k in keys if "\x00" not in k), 1000):
            with self.errors("get"):
                rows = self.connection.execute(
                    f"SELECT key, value FROM {self.kv} WHERE key = ANY(%s)", (batch,)
                ).fetchall()
            found.update(rows)
        return found

    def atomic_loads(self) -> bool:
        return True

    def load_at_once(
        self,
        rows: Iterable[tuple[str, str]],
        *,
        replace: bool,
        only: Sequence[str] | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """Always one transaction: the provider's own transactions (deletes, each batch's
        COPY or upsert) nest in it as savepoints."""
        written = deleted = 0
        with self.connection.transaction():
            if replace and only:
                doomed = [key for prefix in only for key in self.scan_keys(prefix, batch_size=5000)]
                deleted = self.delete_many(doomed, batch_size=1000) if doomed else 0
            elif replace:
                deleted = self.count()
                self.clear()
            for batch in batched(rows, 5000):
                self.set_batched(batch)
                written += len(batch)
                if on_batch is not None:
                    on_batch(len(batch))
        return written, deleted

    def lock(self, name: str, wait: float = 0.0) -> AbstractContextManager[None]:
        """A server-side advisory lock (see :mod:`~triggerfish_cli.storage.postgres.lock`)."""
        def connect() -> psycopg.Connection[Any]:
            return self._connect(self._dsn, self._connect_timeout)

        what = f"{name} on {self.describe()}"
        return advisory_lock(connect, self.schema, name, wait, what, errors=self.errors)

    def reopen(self, *, read_only: bool = True) -> PostgresStorage:
        """Another connection to the same store (for work on a second thread)."""
        return PostgresStorage(
            self._dsn,
            schema=self.schema,
            read_only=read_only,
            connect_timeout=self._connect_timeout,
        )

    def backend_pid(self) -> int:
        """The server process of this connection (fault tests terminate it)."""
        return int(self.connection.info.backend_pid)
