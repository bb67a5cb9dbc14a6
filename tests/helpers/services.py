"""Real servers for the enterprise tests: PostgreSQL on 127.0.0.1:5432, S3 from moto.

Locally a test that needs a server skips with the reason when none is found;
under CI (``CI=true``) it fails instead, so a missing server never hides a
missing capability.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

PG_DSN = os.environ.get("TRIGGERFISH_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip locally, fail under CI."""
    if in_ci():
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class Postgres:
    dsn: str
    #: A schema of its own for this test session, dropped at the end.
    schema: str

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.dsn, connect_timeout=3, autocommit=True)

    def new_schema(self) -> str:
        """A fresh schema name for one test (the store creates it; the session drops it)."""
        return f"{self.schema}_{uuid.uuid4().hex[:8]}"

    def drop_schema(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[test]')")
        raise  # unreachable: unavailable() skips or fails
    try:
        conn = psycopg.connect(PG_DSN, connect_timeout=3, autocommit=True)
    except psycopg.Error as exc:
        unavailable(f"no PostgreSQL at {PG_DSN}: {str(exc).strip().splitlines()[0]}")
        raise
    schema = f"tftest_{uuid.uuid4().hex[:10]}"
    conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield Postgres(PG_DSN, schema)
    finally:
        # The session's schema and every per-test schema made from its name.
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (schema,)
        ).fetchall()
        for (name,) in rows:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        conn.close()


@dataclass(frozen=True)
class S3:
    endpoint_url: str
    region: str = "us-east-1"

    def client(self) -> object:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=self.region)

    def new_bucket(self) -> str:
        name = f"tftest-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)  # type: ignore[attr-defined]
        return name


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3]:
    """A moto S3 server on a free loopback port, for the whole test session."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        unavailable("moto[server] is not installed (pip install -e '.[test]')")
        raise
    server = _s3_only_server(ThreadedMotoServer)
    server.start()
    port = server._server.server_port  # type: ignore[attr-defined]
    try:
        yield S3(f"http://127.0.0.1:{port}")
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server: S3, monkeypatch: pytest.MonkeyPatch) -> S3:
    """The moto server, with fake credentials in the standard AWS chain."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3_server.region)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    return s3_server


def _s3_only_server(base: type[Any]) -> Any:
    """A moto server that serves only S3.

    moto finds the service of each request by listing its own package
    directory (~3.5 ms a request here); this server skips that, and keeps
    werkzeug's per-request log lines out of the test logs.
    """
    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    class S3Only(DomainDispatcherApplication):  # type: ignore[misc]
        def get_backend_for_host(self, host: str | None) -> Any:
            return "s3"

    class Server(base):  # type: ignore[misc, valid-type]
        def _server_entry(self) -> None:
            try:
                from moto.moto_server.threaded_moto_server import (  # type: ignore[attr-defined]
                    MotoRequestHandler as handler,
                )
            except ImportError:  # moto 5.2 has none: werkzeug's own serves it
                handler = None
            try:
                self._server = make_server(
                    self._ip_address,
                    self._port,
                    S3Only(create_backend_app),
                    True,
                    request_handler=handler,
                )
            finally:
                self._server_ready_event.set()  # a server that failed must not hang start()
            self._server.serve_forever()

    return Server(ip_address="127.0.0.1", port=0, verbose=False)
