"""Settings -> a StorageProvider.

Precedence, first match wins:

1. ``--db PATH``: SQLite at that path (it must exist).
2. ``--backend NAME``: that backend, with the settings of the ``storage:``
   section when it names the same backend.
3. The ``storage:`` section of ``triggerfish.yaml``.
4. SQLite at ``<base>/data/triggerfish.db``, created with the gateway's schema
   when it is missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from triggerfish_cli.errors import UsageError
from triggerfish_cli.paths import default_db_path
from triggerfish_cli.settings import (
    Settings,
    StorageConfig,
    known_backends,
    parse_storage_section,
)
from triggerfish_cli.storage.provider import StorageProvider

#: backend name -> "module:function" opening it; modules are imported lazily so
#: that an SQLite command never pays for a Postgres or S3 client library.
_OPENERS: dict[str, str] = {
    "sqlite": "triggerfish_cli.storage.factory:_open_sqlite",
    "memory": "triggerfish_cli.storage.factory:_open_memory",
    "postgres": "triggerfish_cli.storage.postgres:open_config",
    "s3": "triggerfish_cli.storage.s3:open_config",
}


def register_opener(backend: str, target: str) -> None:
    _OPENERS[backend] = target


def resolve_storage(
    settings: Settings,
    *,
    db: Path | None = None,
    backend: str | None = None,
    env: Mapping[str, str] | None = None,
) -> StorageConfig:
    """Decide which store a command works on (see the module docstring)."""
    if backend is not None and backend not in known_backends():
        raise UsageError(f"unknown backend {backend!r} (known: {', '.join(known_backends())})")
    if db is not None:
        if backend not in (None, "sqlite"):
            raise UsageError(
                f"--db names a SQLite file; it cannot be used with --backend {backend}"
            )
        return StorageConfig("sqlite", path=db, options=_sqlite_defaults(settings), source="--db")
    section = settings.storage_section()
    if section is not None:
        configured, options = parse_storage_section(section, settings.path)
        if backend is None or backend == configured:
            path = options.pop("path", None)
            if configured == "sqlite" and path is None:
                return StorageConfig(
                    "sqlite",
                    path=default_db_path(env),
                    options=options,
                    source="config",
                    create_if_missing=True,
                )
            return StorageConfig(configured, path=path, options=options, source="config")
    if backend is None or backend == "sqlite":
        return StorageConfig(
            "sqlite", path=default_db_path(env), source="default", create_if_missing=True
        )
    return StorageConfig(backend, source="--backend")


def _sqlite_defaults(settings: Settings) -> dict[str, Any]:
    section = settings.storage_section()
    if section is None or section.get("backend", "sqlite") != "sqlite":
        return {}
    _, options = parse_storage_section(section, settings.path)
    options.pop("path", None)
    return options


def open_provider(config: StorageConfig, *, create: bool = False) -> StorageProvider:
    """Open the store ``config`` describes. ``create`` makes a missing SQLite file."""
    module_name, _, function = _OPENERS[config.backend].partition(":")
    opener: Callable[[StorageConfig, bool], StorageProvider] = getattr(
        importlib.import_module(module_name), function
    )
    return opener(config, create)


def _open_sqlite(config: StorageConfig, create: bool) -> StorageProvider:
    from triggerfish_cli.storage.sqlite import DEFAULT_BUSY_TIMEOUT_MS, SqliteStorage

    assert config.path is not None
    return SqliteStorage(
        config.path,
        create=create or config.create_if_missing,
        busy_timeout_ms=int(config.options.get("busy_timeout_ms", DEFAULT_BUSY_TIMEOUT_MS)),
        live_writers=config.options.get("live_writers"),
    )


def _open_memory(config: StorageConfig, create: bool) -> StorageProvider:
    from triggerfish_cli.storage.in_memory import MemoryStorage

    return MemoryStorage()
