"""Where stores are, for commands that name them (``migrate --from/--to``).

A location is a SQLite path, a ``postgresql://`` DSN (``?schema=`` is
ours), an ``s3://bucket/prefix`` URL, or a YAML file whose ``storage:``
section describes the store. Sources are opened read-only.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from triggerfish_cli.errors import BackendUnavailableError, InvalidDataError, UsageError
from triggerfish_cli.settings import StorageConfig, load_settings, parse_storage_section
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.remote_settings import (
    DEFAULT_SCHEMA,
    check_dsn,
    check_endpoint,
    check_schema,
    parse_s3_url,
    split_postgres_url,
)
from triggerfish_cli.storage.sqlite import SqliteStorage

MMAP_BYTES = 1 << 30


def parse_location(spec: str, role: str, *, endpoint_url: str | None = None) -> StorageConfig:
    """``--from``/``--to``: a SQLite path, a postgresql:// DSN, s3://bucket/prefix, or a YAML."""
    if not spec.strip():
        raise UsageError(f"--{role}: empty")
    lowered = spec.lower()
    if lowered.startswith(("postgresql://", "postgres://")):
        check_dsn(spec, f"--{role}")
        dsn, schema = split_postgres_url(spec)
        options: dict[str, Any] = {"dsn": dsn}
        if schema is not None:
            options["schema"] = check_schema(schema, f"--{role} schema")
        return StorageConfig("postgres", options=options, source=f"--{role}")
    if lowered.startswith("s3://"):
        options = parse_s3_url(spec)
        if endpoint_url is not None:
            options["endpoint_url"] = check_endpoint(endpoint_url, "--endpoint-url")
        return StorageConfig("s3", options=options, source=f"--{role}")
    if "://" in spec:
        raise UsageError(
            f"--{role}: unknown kind of store {spec.split('://')[0]!r}://",
            hint="give a SQLite path, postgresql://..., s3://bucket/prefix or a YAML file",
        )
    path = Path(spec).expanduser()
    if path.suffix.lower() in (".yaml", ".yml"):
        return _from_yaml(path, role)
    return StorageConfig("sqlite", path=path, source=f"--{role}")


def _from_yaml(path: Path, role: str) -> StorageConfig:
    settings = load_settings(path, explicit=True)
    section = settings.storage_section()
    if section is None:
        raise InvalidDataError(f"{path}: no storage: section to {role} migrate")
    backend, options = parse_storage_section(section, path)
    if backend == "memory":
        raise UsageError(f"{path}: a memory store lives for one command; nothing to migrate")
    store_path = options.pop("path", None)
    if backend == "sqlite" and store_path is None:
        from triggerfish_cli.paths import default_db_path

        store_path = default_db_path()
    return StorageConfig(backend, path=store_path, options=options, source=f"--{role}")


class _ReadOnlySqlite(SqliteStorage):
    """A SQLite store opened with ``mode=ro``: nothing in the file can change."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        # Absolute, so that a resumed run from another directory is the same source.
        path = path.expanduser().absolute()
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.gate_mode = "refuse"  # read-only: it never writes
        self._gate = None
        self._sizers = {}
        self._conn = None
        if not path.is_file():
            raise BackendUnavailableError(f"{path}: no store there")
        uri = f"file:{quote(str(path.absolute()))}?mode=ro"
        try:
            # One thread at a time reads it, but not always the one that opened it.
            self._conn = sqlite3.connect(
                uri,
                uri=True,
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise BackendUnavailableError(f"{path}: cannot open: {exc}") from exc
        if "kv" not in self.tables():
            self.close()
            raise InvalidDataError(f"{path}: no kv table: not a Triggerfish store")
        # Reading every value in key order jumps around the file: memory-mapped
        # pages (read-only, so safe) save a system call and a copy per page.
        with self.errors("open"):
            self.connection.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")


def open_source(config: StorageConfig) -> StorageProvider:
    """The source, read-only."""
    if config.backend == "sqlite":
        assert config.path is not None
        return _ReadOnlySqlite(config.path, int(config.options.get("busy_timeout_ms", 5000)))
    from triggerfish_cli.storage.factory import open_provider

    return open_provider(replace(config, options={**config.options, "read_only": True}))


def open_target(config: StorageConfig, *, create: bool) -> StorageProvider | None:
    """The target; created when ``create``, else None when it does not exist yet."""
    from triggerfish_cli.storage.factory import open_provider

    if not create:
        if config.backend == "sqlite" and config.path is not None and not config.path.exists():
            return None
        if config.backend == "postgres":
            from triggerfish_cli.storage.postgres import NoStoreError

            try:
                return open_provider(config, create=False)
            except NoStoreError:
                return None
    return open_provider(config, create=create)


def same_store(source: StorageProvider, target: StorageProvider) -> bool:
    """The obvious cases; :func:`copy` also catches one store reached by two names."""
    if source is target:
        return True
    if source.backend == "memory":  # every memory store describes itself as memory:
        return False
    if isinstance(source, SqliteStorage) and isinstance(target, SqliteStorage):
        try:
            return source.path.resolve().samefile(target.path.resolve())
        except OSError:
            return False
    return source.describe() == target.describe()


def describe_config(config: StorageConfig) -> str:
    """Where a store that is not open (yet) is, in the form of ``describe()``."""
    options = config.options
    if config.backend == "sqlite":
        return f"sqlite:{config.path}"
    if config.backend == "s3":
        return f"s3://{options.get('bucket')}/{options.get('prefix', '')}"
    if config.backend == "postgres":
        return f"postgres:{options.get('dsn') or '(libpq environment)'} schema " + str(
            options.get("schema", DEFAULT_SCHEMA)
        )
    return config.backend
