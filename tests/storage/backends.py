"""Every backend the contract suite runs on: name -> factory(tmp_path, request) -> provider.

A factory may be called several times per test; each call returns a
provider on the same store. Postgres and S3 get a fresh schema or bucket
per test from the real servers (tests/helpers/services.py): locally they
skip when no server is found, under CI they fail.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.services import S3, Postgres
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

Provider = BaseStorage


class MinimalStorage(BaseStorage):
    """Only the five seed operations: runs the generic fallbacks as a backend would."""

    backend = "minimal"

    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    def describe(self) -> str:
        return "minimal:"

    def get(self, key: str) -> str | None:
        return self.data.get(key)

    def set(self, key: str, value: str) -> None:
        self.data[key] = value

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def list(self, prefix: str | None = None) -> list[str]:
        return sorted(k for k in self.data if not prefix or k.startswith(prefix))

    def clear(self) -> None:
        self.data.clear()


Factory = Callable[[Path, pytest.FixtureRequest], Provider]


def _memory() -> Factory:
    shared: dict[Path, MemoryStorage] = {}

    def factory(tmp_path: Path, request: pytest.FixtureRequest) -> Provider:
        return shared.setdefault(tmp_path, MemoryStorage())

    return factory


def _minimal() -> Factory:
    shared: dict[Path, dict[str, str]] = {}

    def factory(tmp_path: Path, request: pytest.FixtureRequest) -> Provider:
        return MinimalStorage(shared.setdefault(tmp_path, {}))

    return factory


def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> Provider:
    return SqliteStorage(tmp_path / "contract.db", create=True)


def _postgres() -> Factory:
    schemas: dict[Path, str] = {}

    def factory(tmp_path: Path, request: pytest.FixtureRequest) -> Provider:
        from triggerfish_cli.storage.postgres.backend import PostgresStorage

        server: Postgres = request.getfixturevalue("postgres")
        if tmp_path not in schemas:
            schemas[tmp_path] = server.new_schema()
            request.addfinalizer(lambda: server.drop_schema(schemas.pop(tmp_path)))
        return PostgresStorage(server.dsn, schema=schemas[tmp_path], create=True)

    return factory


def _s3() -> Factory:
    buckets: dict[Path, str] = {}

    def factory(tmp_path: Path, request: pytest.FixtureRequest) -> Provider:
        from triggerfish_cli.storage.s3.backend import S3Storage

        server: S3 = request.getfixturevalue("s3")
        if tmp_path not in buckets:
            buckets[tmp_path] = server.new_bucket()
        return S3Storage(
            buckets[tmp_path],
            "store",
            endpoint_url=server.endpoint_url,
            region=server.region,
            create=True,
        )

    return factory


BACKENDS: dict[str, Factory] = {
    "memory": _memory(),
    "minimal": _minimal(),
    "sqlite": _sqlite,
    "postgres": _postgres(),
    "s3": _s3(),
}
