"""Where stores are, for options that name them (``migrate --from/--to``, ``--db``).

Store addresses (``postgresql://``, ``s3://``) are parsed by
:func:`~triggerfish_cli.storage.remote_settings.parse_address`, the one
parser shared with ``--db``/``TRIGGERFISH_DB`` (storage/factory.py).

``migrate`` takes one documented form for each kind of store:

- SQLite: a file path with a ``/`` in it or a ``.db``/``.sqlite``/``.sqlite3``
  name (``./memory.db``, ``~/.triggerfish/data/triggerfish.db``);
- PostgreSQL: a ``postgresql://`` URL (``?schema=`` is ours);
- S3: an ``s3://bucket/prefix`` URL;
- a YAML file (``.yaml``/``.yml``) whose ``storage:`` section describes the store.

Anything else is refused (exit 2), in particular a bare word such as
``memory`` or ``postgres``: it is not taken as a file name. Sources are
opened read-only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from triggerfish_cli.errors import InvalidDataError, MissingStoreError, UsageError
from triggerfish_cli.paths import default_db_path
from triggerfish_cli.settings import StorageConfig, load_settings
from triggerfish_cli.storage.backends import describe_config as backend_describe
from triggerfish_cli.storage.backends import in_local_files, parse_storage_section, transient
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.remote_settings import parse_address

#: File names that are SQLite stores without a directory in front of them.
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def parse_location(spec: str, role: str, *, endpoint_url: str | None = None) -> StorageConfig:
    """``--from``/``--to``: a SQLite path, a postgresql:// DSN, s3://bucket/prefix, or a YAML."""
    if not spec.strip():
        raise UsageError(f"--{role}: empty")
    address = parse_address(spec, f"--{role}", endpoint_url=endpoint_url)
    if address is not None:
        return address
    path = Path(spec).expanduser()
    if path.suffix.lower() in (".yaml", ".yml"):
        return _from_yaml(path, role)
    if "/" not in spec and path.suffix.lower() not in SQLITE_SUFFIXES:
        raise UsageError(
            f"--{role} {spec}: not a store location (a bare word is not taken as a file name)",
            hint=f"give a SQLite path (./{spec}.db, /path/to/{spec}), postgresql://..., "
            "s3://bucket/prefix or a YAML file with a storage: section",
        )
    return StorageConfig("sqlite", path=path, source=f"--{role}", chosen_by=f"from --{role}")


def _from_yaml(path: Path, role: str) -> StorageConfig:
    settings = load_settings(path, explicit=True)
    section = settings.storage_section()
    if section is None:
        raise InvalidDataError(f"{path}: no storage: section to {role} migrate")
    backend, options = parse_storage_section(section, path)
    if transient(backend):
        raise UsageError(f"{path}: a memory store lives for one command; nothing to migrate")
    store_path = options.pop("path", None)
    if in_local_files(backend) and store_path is None:
        store_path = default_db_path()
    return StorageConfig(
        backend,
        path=store_path,
        options=options,
        source=f"--{role}",
        chosen_by=f"from the storage: section of {path} (--{role})",
    )


def open_source(config: StorageConfig) -> StorageProvider:
    """The source, read-only (every backend's ``read_only`` open)."""
    # lazy: storage.factory (+1 module) is not loaded by `migrate` refusing a location
    from triggerfish_cli.storage.factory import open_provider

    return open_provider(replace(config, options={**config.options, "read_only": True}))


def open_target(config: StorageConfig, *, create: bool) -> StorageProvider | None:
    """The target; created when ``create``, else None when it does not exist yet."""
    # lazy: storage.factory (+1 module) is not loaded by `migrate` refusing a location
    from triggerfish_cli.storage.factory import open_provider

    if not create:
        try:
            return open_provider(config, create=False)
        except MissingStoreError:
            return None
    return open_provider(config, create=create)


def same_store(source: StorageProvider, target: StorageProvider) -> bool:
    """The obvious cases; :func:`copy` also catches one store reached by two names."""
    return source is target or source.is_same_store(target)


def describe_config(config: StorageConfig) -> str:
    """Where a store that is not open (yet) is, in the form of ``describe()``."""
    return backend_describe(config)
