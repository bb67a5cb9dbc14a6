"""The PostgreSQL backend's connection: DSN handling, errors, pipelining, key ranges.

:class:`PostgresConnection` is the base of the backend's parts (schema,
writes, stats and :class:`~triggerfish_cli.storage.postgres.backend.PostgresStorage`
itself): one connection, autocommit, no pool. Connecting times out
(``connect_timeout``, default 5 s) and TCP keepalives detect a vanished
server; both are errors with exit 7 naming the server and the reason, never
a hang or a traceback.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from triggerfish_cli.errors import (
    BackendUnavailableError,
    BusyError,
    InvalidDataError,
    RefusedError,
    TriggerfishError,
    UsageError,
)
from triggerfish_cli.storage import key_ranges
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.remote_settings import DEFAULT_CONNECT_TIMEOUT

if TYPE_CHECKING:
    import psycopg

# psycopg logs what it cannot raise ("error ignored terminating <psycopg.Copy [BAD]
# at 0x...>: the connection is lost", when a COPY's connection breaks under it)
# through the logging module, whose last-resort handler prints warnings on
# stderr: a second line beside our one-line error. The error itself is raised.
logging.getLogger("psycopg").addHandler(logging.NullHandler())


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


class PostgresConnection(BaseStorage):
    """The connection and its plumbing, shared by every part of the backend."""

    schema: str
    #: ``schema.kv`` quoted; :attr:`kv` is the same for statement text (``%`` doubled).
    table: str
    kv: str
    read_only: bool
    _dsn: str
    _connect_timeout: int | None
    _conn: psycopg.Connection[Any] | None
    _params: dict[str, Any]
    _server: str

    def _connect(self, dsn: str, connect_timeout: int | None) -> psycopg.Connection[Any]:
        # lazy: psycopg, loaded only when a Postgres store is used
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
                hint="check the DSN (--db or storage.dsn), that the server runs, "
                "and PGPASSWORD/~/.pgpass",
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
        # lazy: psycopg, loaded only when a Postgres store is used
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            raise self._translate(exc, what) from exc

    def _translate(self, exc: Exception, what: str) -> TriggerfishError:
        # lazy: psycopg, loaded only when a Postgres store is used
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

    @contextmanager
    def _pipeline(self) -> Iterator[None]:
        """libpq pipeline mode (one round trip for many statements) where libpq has it."""
        # lazy: psycopg, loaded only when a Postgres store is used
        import psycopg

        if psycopg.Pipeline.is_supported():
            with self.connection.pipeline():
                yield
        else:
            yield


def under(prefix: str | None, start_after: str | None = None) -> tuple[str, list[str]]:
    """SQL condition and parameters: keys under ``prefix`` after ``start_after``."""
    return key_ranges.under(prefix, start_after, mark="%s", true="TRUE")


def between(low: str | None, high: str | None) -> tuple[str, list[str]]:
    """SQL condition and parameters: ``low <= key < high`` (None: unbounded)."""
    return key_ranges.between(low, high, mark="%s", true="TRUE")
