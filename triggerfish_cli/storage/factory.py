"""Settings -> a StorageProvider.

Precedence, first match wins:

1. ``--db`` (or ``TRIGGERFISH_DB``): a store address (``postgresql://...``,
   ``s3://bucket/prefix``, parsed as ``migrate --to`` parses them), else
   SQLite at that path. Other settings of that backend (timeouts, endpoint,
   region, ...) come from the ``storage:`` section when it names the same
   backend.
2. ``--backend NAME`` (or ``TRIGGERFISH_BACKEND``): that backend, with the
   settings of the ``storage:`` section when it names the same backend.
3. The ``storage:`` section of ``triggerfish.yaml``.
4. SQLite at ``<base>/data/triggerfish.db``, ``<base>`` found as the gateway
   finds it (``paths.py``: ``TRIGGERFISH_DATA_DIR``, Docker's ``/data``,
   ``$HOME/.triggerfish``).

A store is never created here unless the caller asks (``create=True``:
``demo create``, ``kv import --create``, ``migrate`` into its target, a
restore into an empty target). A store that does not exist is a :class:`MissingStoreError`
(exit 7) naming the place and how it was chosen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from triggerfish_cli.errors import BackendUnavailableError, MissingStoreError, UsageError
from triggerfish_cli.paths import DATA_DIR_ENV, db_path_in, resolve_base
from triggerfish_cli.settings import Settings, StorageConfig
from triggerfish_cli.storage.backends import BACKENDS, known_backends, parse_storage_section
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.remote_settings import ADDRESS_HINT, parse_address

#: Python modules of the optional extras: module -> (what it supports, extra).
EXTRAS: dict[str, tuple[str, str]] = {
    "psycopg": ("PostgreSQL", "postgres"),
    "psycopg_binary": ("PostgreSQL", "postgres"),
    "boto3": ("S3", "s3"),
    "botocore": ("S3", "s3"),
    "s3transfer": ("S3", "s3"),
}


def missing_extra(exc: ModuleNotFoundError) -> BackendUnavailableError | None:
    """The exit-7 error for a client library of an extra that is not installed."""
    top = (exc.name or "").partition(".")[0]
    if top not in EXTRAS:
        return None
    what, extra = EXTRAS[top]
    return BackendUnavailableError(
        f"{what} support is not installed: pip install 'triggerfish-admin[{extra}]'"
    )


def resolve_storage(
    settings: Settings,
    *,
    db: str | Path | None = None,
    backend: str | None = None,
    env: Mapping[str, str] | None = None,
    db_from: str = "--db",
    backend_from: str = "--backend",
) -> StorageConfig:
    """Decide which store a command works on (see the module docstring).

    ``db_from``/``backend_from`` name where ``db``/``backend`` came from (the
    option or its environment variable), for messages.
    """
    if backend is not None and backend not in known_backends():
        raise UsageError(f"unknown backend {backend!r} (known: {', '.join(known_backends())})")
    if db is not None:
        return _named_store(settings, db, db_from, backend, backend_from)
    section = settings.storage_section()
    if section is not None:
        configured, options = parse_storage_section(section, settings.path)
        if backend is None or backend == configured:
            path = options.pop("path", None)
            where = f"the storage: section of {settings.path}"
            if backend is not None:
                where = f"{backend_from} {backend} and {where}"
            if configured == "sqlite" and path is None:
                base = resolve_base(env)
                return StorageConfig(
                    "sqlite",
                    path=db_path_in(base.path),
                    options=options,
                    source="config",
                    chosen_by=f"from {where}, at the gateway's path: base {base.describe()}",
                )
            if configured == "sqlite":
                where = f"storage.path in {settings.path}"
            return StorageConfig(
                configured, path=path, options=options, source="config", chosen_by=f"from {where}"
            )
    if backend is None or backend == "sqlite":
        base = resolve_base(env)
        how = base.describe()
        if backend is not None:
            how = f"{backend_from} sqlite; base {how}"
        return StorageConfig("sqlite", path=db_path_in(base.path), source="default", chosen_by=how)
    return StorageConfig(backend, source="--backend", chosen_by=f"from {backend_from} {backend}")


def _named_store(
    settings: Settings, db: str | Path, db_from: str, backend: str | None, backend_from: str
) -> StorageConfig:
    """The store ``--db`` names: an address (see locations.py), else a SQLite path."""
    address = None
    if isinstance(db, str):
        if not db.strip():
            raise UsageError(f"{db_from}: empty", hint=ADDRESS_HINT)
        address = parse_address(db, db_from)
    named = address or StorageConfig("sqlite", path=Path(db), source="--db")
    if backend not in (None, named.backend):
        raise UsageError(
            f"{db_from} names a {named.backend} store; it cannot be used with "
            f"{backend_from} {backend}"
        )
    options = {**_section_defaults(settings, named.backend), **named.options}
    return replace(named, options=options, source="--db", chosen_by=f"from {db_from}")


#: Settings that say where a store is: --db names them itself.
_PLACE = ("path", "dsn", "schema", "bucket", "prefix")


def _section_defaults(settings: Settings, backend: str) -> dict[str, Any]:
    """The storage: section's other settings when it names ``backend``."""
    section = settings.storage_section()
    if section is None or section.get("backend", "sqlite") != backend:
        return {}
    _, options = parse_storage_section(section, settings.path)
    return {name: value for name, value in options.items() if name not in _PLACE}


def open_provider(config: StorageConfig, *, create: bool = False) -> StorageProvider:
    """Open the store ``config`` describes; ``create`` makes it when it does not exist.

    A missing store is a :class:`MissingStoreError` naming how it was
    chosen; a missing client library (an extra not installed) is exit 7
    with the ``pip install`` that fixes it.
    """
    try:
        return BACKENDS[config.backend].open(config, create)
    except ModuleNotFoundError as exc:
        error = missing_extra(exc)
        if error is None:
            raise
        raise error from None
    except MissingStoreError as exc:
        if not config.chosen_by:
            raise
        above = _store_one_level_up(config)
        if above is not None:
            raise MissingStoreError(
                f"{exc.message} ({config.chosen_by})", hint=_one_level_up_hint(above, config)
            ) from None
        raise MissingStoreError(_missing_message(exc.message, config), hint=exc.hint) from None


def _missing_message(message: str, config: StorageConfig) -> str:
    text = f"{message} ({config.chosen_by})"
    if config.backend == "sqlite" and config.source in ("default", "config"):
        text += "; the gateway creates it on first start"
    return text


def _store_one_level_up(config: StorageConfig) -> Path | None:
    """``<base>/triggerfish.db`` when the base directory named is the ``data`` directory
    itself (``TRIGGERFISH_DATA_DIR=<base>/data`` by mistake) and a store is there."""
    if config.backend != "sqlite" or config.source != "default" or config.path is None:
        return None
    above = config.path.parent.parent / config.path.name
    return above if above.is_file() else None


def _one_level_up_hint(above: Path, config: StorageConfig) -> str:
    base = above.parent.parent
    if DATA_DIR_ENV in config.chosen_by:
        fix = f"set TRIGGERFISH_DATA_DIR={base}"
    else:
        fix = f"the base directory is {base}, the one that holds data/"
    return f"a store is one level up, at {above}: {fix}"
