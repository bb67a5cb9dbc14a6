"""The PostgreSQL backend (psycopg 3, imported lazily; extra ``triggerfish-admin[postgres]``).

One table in a schema of its own (``triggerfish`` unless configured)::

    CREATE TABLE kv (key text COLLATE "C" PRIMARY KEY, value text NOT NULL)

``COLLATE "C"`` makes the primary-key index byte-ordered, so key order is
binary order (as on SQLite and S3) and a prefix is one index range scan,
``key >= :p AND key < :p_next`` (the same bounds as SQLite).

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

import builtins
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import TYPE_CHECKING, Any

from triggerfish_cli.errors import (
    BackendUnavailableError,
    BusyError,
    InvalidDataError,
    MissingStoreError,
    RefusedError,
    TriggerfishError,
    UsageError,
)
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage import key_ranges
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.provider import (
    DEFAULT_BATCH,
    BatchCallback,
    PrefixStats,
    after_batch,
    batched,
    uncovered_ranges,
)
from triggerfish_cli.storage.remote_settings import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_SCHEMA,
    check_dsn,
    check_schema,
)

if TYPE_CHECKING:
    import psycopg

# psycopg logs what it cannot raise ("error ignored terminating <psycopg.Copy [BAD]
# at 0x...>: the connection is lost", when a COPY's connection breaks under it)
# through the logging module, whose last-resort handler prints warnings on
# stderr: a second line beside our one-line error. The error itself is raised.
logging.getLogger("psycopg").addHandler(logging.NullHandler())

#: Below this many rows a write is an executemany upsert; from it on, COPY.
COPY_THRESHOLD = 64


class NoStoreError(MissingStoreError):
    """The schema has no kv table (and the store was not to be created)."""


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


# -- the backend -----------------------------------------------------------------


def _reason(exc: BaseException) -> str:
    """A libpq/psycopg message on one line.

    A server error is its primary message with its DETAIL and HINT folded in
    (``...: duplicate key ... (detail: Key (key)=(a) already exists.)``);
    a client-side one (libpq's "server closed the connection unexpectedly /
    This probably means ...") is its first line. Tabs and newlines inside a
    field become spaces.
    """
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    if primary:
        text = _one_line(primary)
        extra = [
            f"{label}: {_one_line(value)}"
            for label, value in (
                ("detail", getattr(diag, "message_detail", None)),
                ("hint", getattr(diag, "message_hint", None)),
            )
            if value
        ]
        return text + (f" ({'; '.join(extra)})" if extra else "")
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0]
    # "connection failed: connection to server at "h", port 1 failed: Connection refused"
    text = re.sub(r"^connection failed: ", "", text)
    text = re.sub(r'^connection to server at "[^"]*"(?: \([^)]*\))?, port \d+ failed: ', "", text)
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _server_of(params: Mapping[str, Any]) -> str:
    host = str(params.get("host") or os.environ.get("PGHOST") or "")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    dbname = str(params.get("dbname") or os.environ.get("PGDATABASE") or "")
    where = f"{host}:{port}" if host and not host.startswith("/") else f"local socket {host}"
    if not host:
        where = f"the local socket (port {port})"
    return f"{where}" + (f", database {dbname}" if dbname else "")


class PostgresStorage(BaseStorage):
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
        self._conn: psycopg.Connection[Any] | None = None
        self._stage_ready: bool | None = None
        self._conn = self._connect(dsn, connect_timeout)
        self._server = self._describe_server()
        try:
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

    # -- plumbing -------------------------------------------------------------

    def _connect(self, dsn: str, connect_timeout: int | None) -> psycopg.Connection[Any]:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise UsageError(f"postgres: invalid connection string: {_reason(exc)}") from None
        defaults: dict[str, Any] = {
            "application_name": "triggerfish-admin",
            "keepalives": 1,
            "keepalives_idle": 15,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        if connect_timeout is not None:
            params["connect_timeout"] = connect_timeout
        elif "connect_timeout" not in params and not os.environ.get("PGCONNECT_TIMEOUT"):
            params["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT
        for key, value in defaults.items():
            params.setdefault(key, value)
        params["client_encoding"] = "UTF8"
        self._params = params
        try:
            return psycopg.connect(make_conninfo("", **params), autocommit=True)
        except psycopg.Error as exc:
            raise BackendUnavailableError(
                f"cannot connect to PostgreSQL at {_server_of(params)}: {_reason(exc)}",
                hint="check storage.dsn, that the server runs, and PGPASSWORD/~/.pgpass",
            ) from None

    def _describe_server(self) -> str:
        info = self.connection.info
        host = info.host if not info.host.startswith("/") else f"[{info.host}]"
        return f"{info.user}@{host}:{info.port}/{info.dbname}"

    @property
    def connection(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            raise BackendUnavailableError(f"{self.describe()}: the store is closed")
        return self._conn

    def describe(self) -> str:
        return f"postgres:{getattr(self, '_server', '?')}/{self.schema}"

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            # Closing a broken connection must not mask the real error.
            with suppress(Exception):
                conn.close()

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            raise self._translate(exc, what) from exc

    def _translate(self, exc: Exception, what: str) -> TriggerfishError:
        import psycopg
        from psycopg import errors

        where = f"{self.describe()}: {what}"
        reason = _reason(exc)
        conn = self._conn
        if isinstance(exc, psycopg.OperationalError) and (
            conn is None or conn.closed or conn.broken or isinstance(exc, errors.AdminShutdown)
        ):
            return BackendUnavailableError(
                f"{where}: connection to PostgreSQL lost: {reason}",
                hint="work committed before the failure is kept; rerun to finish",
            )
        if isinstance(exc, errors.InsufficientPrivilege):
            return BackendUnavailableError(f"{where}: permission denied: {reason}")
        if isinstance(
            exc,
            (
                errors.LockNotAvailable,
                errors.DeadlockDetected,
                errors.SerializationFailure,
                errors.QueryCanceled,
            ),
        ):
            return BusyError(f"{where}: {reason}", hint="retry when the other writer is done")
        if isinstance(exc, errors.ReadOnlySqlTransaction):
            return RefusedError(f"{where}: the store was opened read-only")
        if isinstance(exc, psycopg.DataError):
            return InvalidDataError(f"{where}: {reason}")
        if isinstance(exc, psycopg.OperationalError):
            return BackendUnavailableError(f"{where}: {reason}")
        return TriggerfishError(f"{where}: {reason}")

    def _check_encoding(self) -> None:
        encoding = self.connection.info.parameter_status("server_encoding")
        if encoding is not None and encoding.upper() not in ("UTF8", "UTF-8"):
            raise InvalidDataError(
                f"{self.describe()}: the database encoding is {encoding}, not UTF8: "
                "it cannot hold every key",
                hint="create the database with ENCODING 'UTF8'",
            )

    def _prepare_table(self, create: bool) -> None:
        conn = self.connection
        row = conn.execute("SELECT to_regclass(%s)::oid", (self.table,)).fetchone()
        oid = row[0] if row else None
        if oid is None:
            if not create:
                raise NoStoreError(
                    f"no Triggerfish store in schema {self.schema!r} of {self._server} "
                    "(it has no kv table)",
                    hint="check storage.schema; `migrate --to` makes a store there",
                )
            from psycopg import sql

            schema = sql.Identifier(self.schema).as_string(conn).replace("%", "%%")
            exists = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
            ).fetchone()
            with conn.transaction():
                if exists is None:
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {self.kv} "
                    '(key text COLLATE "C" PRIMARY KEY, value text NOT NULL)'
                )
            return
        columns = {
            name: (kind, collation, binary)
            for name, kind, collation, binary in conn.execute(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod), c.collname, "
                "c.collprovider = 'c' AND c.collcollate IN ('C', 'POSIX') "
                "FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation "
                "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
                (oid,),
            ).fetchall()
        }
        if columns.get("key", ("",))[0] != "text" or columns.get("value", ("",))[0] != "text":
            raise InvalidDataError(
                f"{self.describe()}: table kv is not (key text, value text): "
                "not a Triggerfish store"
            )
        if not columns["key"][2]:  # "C", "POSIX" or "ucs_basic": byte order
            raise InvalidDataError(
                f'{self.describe()}: kv.key has collation {columns["key"][1]!r}, not "C": '
                "prefixes and key order would be wrong",
                hint=f'ALTER TABLE {self.table} ALTER COLUMN key TYPE text COLLATE "C"',
            )

    # -- identity (storage/identity.py) ------------------------------------------

    def _id_table(self) -> tuple[str, str]:
        from psycopg import sql

        from triggerfish_cli.storage.identity import ID_TABLE

        name = sql.Identifier(self.schema, ID_TABLE).as_string(self.connection)
        return name, name.replace("%", "%%")

    def store_id(self) -> str | None:
        """This store's id, from ``<schema>.tfadmin_store``; None when never recorded."""
        name, quoted = self._id_table()
        with self.errors("read the store's id"):
            row = self.connection.execute("SELECT to_regclass(%s)::oid", (name,)).fetchone()
            if row is None or row[0] is None:
                return None
            found = self.connection.execute(
                f"SELECT value FROM {quoted} WHERE name = 'id'"
            ).fetchone()
        return None if found is None else str(found[0])

    def record_store_id(self, candidate: str) -> None:
        """Record ``candidate`` as the id, unless one is there already (first one wins)."""
        from triggerfish_cli.serialization import now_iso

        _, quoted = self._id_table()
        with self.errors("record the store's id"), self.connection.transaction():
            self.connection.execute(
                f"CREATE TABLE IF NOT EXISTS {quoted} (name text PRIMARY KEY, value text NOT NULL)"
            )
            self.connection.execute(
                f"INSERT INTO {quoted} (name, value) VALUES ('id', %s), ('created', %s) "
                "ON CONFLICT (name) DO NOTHING",
                (candidate, now_iso()),
            )

    def _ensure_stage(self) -> bool:
        """The session's staging table for bulk upserts; False without TEMP privilege."""
        if self._stage_ready is None:
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

    @contextmanager
    def _pipeline(self) -> Iterator[None]:
        """libpq pipeline mode (one round trip for many statements) where libpq has it."""
        import psycopg

        if psycopg.Pipeline.is_supported():
            with self.connection.pipeline():
                yield
        else:
            yield

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
        _check_text(key, value)
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
        where, params = _range(prefix)
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
            where, params = _range(prefix, last)
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

    def set_many(self, items: Iterable[tuple[str, str]]) -> int:
        """All items in one transaction (the last value of a repeated key wins)."""
        staged = dict(items)
        for key, value in staged.items():
            _check_text(key, value)
        if not staged:
            return 0
        conn = self.connection
        if len(staged) < COPY_THRESHOLD:
            self._upsert(staged)
            return len(staged)
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
                _check_text(key, new)
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
                        where, params = _range(prefix, after)
                        cursors.append(
                            conn.execute(
                                f"SELECT EXISTS (SELECT 1 FROM {self.kv} WHERE {where})", params
                            )
                        )
                for cursor in cursors:
                    row = None if cursor is None else cursor.fetchone()
                    answers.append(bool(row and row[0]))
        return answers

    def lock(self, name: str, wait: float = 0.0) -> AbstractContextManager[None]:
        """A server-side advisory lock (see :mod:`~triggerfish_cli.storage.postgres.lock`)."""
        from triggerfish_cli.storage.postgres.lock import advisory_lock

        def connect() -> psycopg.Connection[Any]:
            return self._connect(self._dsn, self._connect_timeout)

        what = f"{name} on {self.describe()}"
        return advisory_lock(connect, self.schema, name, wait, what, errors=self.errors)

    def count(self, prefix: str | None = None) -> int:
        if prefix and "\x00" in prefix:
            return 0
        where, params = _range(prefix)
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
                    where, params = _range(prefix)
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
                where, params = _between(low, high)
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

    # -- for migrate and tests ------------------------------------------------------

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
                    where, params = _between(low, high)
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


def _check_text(key: str, value: str) -> None:
    from triggerfish_cli import cells

    cells.refuse(key, value, "postgres")
    if "\x00" in key or "\x00" in value:
        where = "key" if "\x00" in key else "value"
        raise InvalidDataError(
            f"{key!r}: PostgreSQL text cannot hold the NUL character in the {where}"
        )


def _range(prefix: str | None, start_after: str | None = None) -> tuple[str, list[str]]:
    """SQL condition and parameters: keys under ``prefix`` after ``start_after``."""
    return key_ranges.under(prefix, start_after, mark="%s", true="TRUE")


def _between(low: str | None, high: str | None) -> tuple[str, list[str]]:
    """SQL condition and parameters: ``low <= key < high`` (None: unbounded)."""
    return key_ranges.between(low, high, mark="%s", true="TRUE")
