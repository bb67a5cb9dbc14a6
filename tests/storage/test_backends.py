"""storage/backends.py: the one table of backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from triggerfish_cli.errors import InvalidDataError
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage.backends import (
    BACKENDS,
    describe_config,
    file_backend,
    files_of,
    gateway_index,
    has_sse_settings,
    known_backends,
    location_of,
    memory_index_for,
    parse_storage_section,
    physical,
    transient,
)
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.sqlite.backend import SqliteStorage


def test_every_backend_has_its_name_as_key() -> None:
    assert known_backends() == ("sqlite", "memory", "postgres", "s3")
    assert all(name == backend.name for name, backend in BACKENDS.items())


@pytest.mark.parametrize("name", ["nosql", 3, ["sqlite"], None])
def test_an_unknown_backend_is_invalid_data(name: object) -> None:
    with pytest.raises(InvalidDataError, match="unknown backend"):
        parse_storage_section({"backend": name}, Path("/etc/triggerfish.yaml"))


def test_each_backend_checks_its_own_settings(tmp_path: Path) -> None:
    config = tmp_path / "triggerfish.yaml"
    assert parse_storage_section({"path": "x.db"}, config) == (
        "sqlite",
        {"path": tmp_path / "x.db"},
    )
    with pytest.raises(InvalidDataError, match=r"storage\.dsn: unknown setting"):
        parse_storage_section({"backend": "memory", "dsn": "x"}, config)


def test_the_sqlite_opener_opens_read_only(tmp_path: Path) -> None:
    with SqliteStorage(tmp_path / "s.db", create=True) as store:
        store.set("a", "1")
    config = StorageConfig("sqlite", path=tmp_path / "s.db", options={"read_only": True})
    store = BACKENDS["sqlite"].open(config, False)
    try:
        assert store.get("a") == "1" and getattr(store, "read_only", False)
    finally:
        store.close()


def test_memory_index_by_backend(tmp_path: Path) -> None:
    assert memory_index_for(MemoryStorage()).kind == "scan"
    with SqliteStorage(tmp_path / "s.db", create=True) as store:
        assert memory_index_for(store).kind in ("sqlite-fts5", "scan")


def test_physical_backups_are_sqlite_ones() -> None:
    assert physical("sqlite").copy_rows is not None
    for name in ("postgres", "s3", "nosql"):
        with pytest.raises(InvalidDataError):
            physical(name)


@pytest.mark.parametrize(
    ("config", "described", "located"),
    [
        (StorageConfig("sqlite", path=Path("/d/t.db")), "sqlite:/d/t.db", "/d/t.db"),
        (StorageConfig("memory"), "memory", "memory"),
        (
            StorageConfig("postgres", options={"dsn": "host=db", "schema": "s"}),
            "postgres:host=db schema s",
            "host=db schema s",
        ),
        (
            StorageConfig("postgres"),
            "postgres:(libpq environment) schema triggerfish",
            "(the libpq environment) schema triggerfish",
        ),
        (
            StorageConfig(
                "s3", options={"bucket": "b", "prefix": "p/", "endpoint_url": "http://m"}
            ),
            "s3://b/p/",
            "s3://b/p/ at http://m",
        ),
        (StorageConfig("nosql"), "nosql", "nosql"),
    ],
)
def test_each_backend_names_a_store_that_is_not_open(
    config: StorageConfig, described: str, located: str
) -> None:
    assert describe_config(config) == described  # the form of describe()
    assert location_of(config) == located  # status's


def test_only_a_memory_store_lives_for_one_command() -> None:
    assert [name for name in known_backends() if transient(name)] == ["memory"]


def test_the_gateway_searches_only_sqlite_s_index_itself() -> None:
    assert [name for name in known_backends() if gateway_index(name)] == ["sqlite"]
    assert not gateway_index("nosql")


@pytest.mark.parametrize(
    ("section", "has"),
    [
        ({"backend": "s3", "bucket": "b"}, True),
        ({"backend": "sqlite"}, False),
        ({}, False),  # sqlite
        (None, False),
        ({"backend": ["s3"]}, False),
    ],
)
def test_only_s3_settings_hold_server_side_encryption(section: object, has: bool) -> None:
    assert has_sse_settings(section) is has  # type: ignore[arg-type]


def test_the_files_of_a_store_kept_in_a_local_file_come_from_the_table() -> None:
    assert files_of("sqlite") is BACKENDS["sqlite"].files is not None
    assert file_backend() == "sqlite"
    for name in ("postgres", "s3", "memory", "nosql"):
        with pytest.raises(InvalidDataError, match="not a local file"):
            files_of(name)
