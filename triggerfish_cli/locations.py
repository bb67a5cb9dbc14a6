"""Where stores are, for options that name them (``migrate --from/--to``, ``--db``).

Store addresses (:func:`parse_address`, shared by ``--db``/``TRIGGERFISH_DB``
and ``migrate``): ``postgresql://`` (or ``postgres://``) and ``s3://`` URLs.
Passwords and credentials never go in one (exit 4: they come from the
environment); an unknown ``scheme://`` or a malformed address is exit 2.

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

import re
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from triggerfish_cli.errors import (
    InvalidDataError,
    MissingStoreError,
    RefusedError,
    UsageError,
)
from triggerfish_cli.paths import default_db_path
from triggerfish_cli.settings import StorageConfig, load_settings
from triggerfish_cli.storage.backends import describe_config as backend_describe
from triggerfish_cli.storage.backends import in_local_files, parse_storage_section, transient
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.remote_settings import (
    CREDENTIALS_HINT,
    check_dsn,
    check_endpoint,
    check_schema,
    parse_s3_url,
    split_postgres_url,
)

#: File names that are SQLite stores without a directory in front of them.
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
#: The schemes of store addresses, and the backend each names.
SCHEMES = {"postgresql": "postgres", "postgres": "postgres", "s3": "s3"}
ADDRESS_HINT = "give a SQLite path, postgresql://HOST/DB?schema=NAME or s3://BUCKET/PREFIX"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def parse_address(
    spec: str, where: str, *, endpoint_url: str | None = None
) -> StorageConfig | None:
    """A ``postgresql://`` or ``s3://`` address -> its store; None when ``spec`` is none.

    ``where`` names the option (``--to``, ``--db``, ``TRIGGERFISH_DB``) in
    messages and ``chosen_by``. A path with a colon (``./a:b.db``, ``a:b``)
    is no address; ``name://...`` with an unknown name, and a known scheme
    without its ``//`` (``s3:bucket``), are exit 2. The address itself is
    never repeated in a message: it could hold a secret.
    """
    match = _SCHEME.match(spec)
    if match is None:
        return None
    scheme, rest = match.group(1).lower(), spec[match.end() :]
    if scheme not in SCHEMES:
        if rest.startswith("//"):
            raise UsageError(f"{where}: unknown kind of store {scheme}://", hint=ADDRESS_HINT)
        return None
    if not rest.startswith("//"):
        raise UsageError(
            f"{where}: {scheme}: must be followed by // ({scheme}://...)",
            hint=f"{ADDRESS_HINT}; a SQLite file of that name: ./{scheme}:...",
        )
    backend = SCHEMES[scheme]
    try:
        if backend == "postgres":
            options = _postgres_address(spec, where)
        else:
            options = _s3_address(spec, where, endpoint_url)
    except InvalidDataError as exc:
        raise UsageError(f"{where}: {exc.message}", hint=exc.hint or ADDRESS_HINT) from None
    return StorageConfig(backend, options=options, source=where, chosen_by=f"from {where}")


def _postgres_address(spec: str, where: str) -> dict[str, Any]:
    check_dsn(spec, where)  # first: nothing below may echo a password
    parts = urlsplit(spec)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise InvalidDataError(f"not a port number in {parts.netloc!r}") from None
    dsn, schema = split_postgres_url(spec)
    options: dict[str, Any] = {"dsn": dsn}
    if schema is not None:
        options["schema"] = check_schema(schema, "schema")
    return options


def _s3_address(spec: str, where: str, endpoint_url: str | None) -> dict[str, Any]:
    parts = urlsplit(spec)
    if "@" in parts.netloc:
        raise RefusedError(f"{where}: credentials never go in the address", hint=CREDENTIALS_HINT)
    if parts.query or parts.fragment:
        raise InvalidDataError("an s3:// address takes no ?query or #fragment")
    options = parse_s3_url(spec)
    if endpoint_url is not None:
        options["endpoint_url"] = check_endpoint(endpoint_url, "--endpoint-url")
    return options


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
