"""The backends, one typed table: what each is called, the ``storage:`` settings it
takes, how a store of it is opened and named, and which memory search index serves it.

Everything that differs by backend and is not a method of the provider is
here; nothing outside ``storage/`` names a backend's module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triggerfish_cli.errors import InvalidDataError, RefusedError
from triggerfish_cli.settings import StorageConfig, check_keys, positive_int
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.remote_settings import (
    describe_postgres,
    describe_s3,
    postgres_location,
    postgres_section,
    s3_location,
    s3_section,
)
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.gate_modes import MODES, choose_mode
from triggerfish_cli.storage.sqlite.local_files import LOCAL_FILES, LocalFiles
from triggerfish_cli.storage.sqlite.sql import DEFAULT_BUSY_TIMEOUT_MS

if TYPE_CHECKING:
    from triggerfish_cli.backup.counts import Counts, SnapshotSource
    from triggerfish_cli.backup.dest import Destination
    from triggerfish_cli.memory.index import MemoryIndex

Options = Callable[[Mapping[str, Any], Path], dict[str, Any]]


@dataclass(frozen=True)
class Backend:
    name: str
    #: Validates the ``storage:`` section (``backend`` included) naming this backend,
    #: given the config file's directory: the options :attr:`open` reads.
    options: Options
    #: Opens the store a config describes (``create``: makes it when missing).
    open: Callable[[StorageConfig, bool], StorageProvider]
    #: The memory search index serving a store of this backend.
    memory_index: Callable[[StorageProvider], MemoryIndex]
    #: Where a store a config names is while it is not open, in the form of its
    #: ``describe()`` (migrate's messages, a missing store's place, metrics).
    describe: Callable[[StorageConfig], str]
    #: Where it is for ``status``: a path, a DSN and schema, a bucket and endpoint.
    location: Callable[[StorageConfig], str]
    #: Checks a physical copy of a store (a backup's snapshot), where the backend
    #: makes them: ``(path, page count, count(conn), workers, checks, failures)``
    #: -> ``count``'s result, or None when the copy is not sound.
    check_copy: Callable[..., Any] | None = None
    #: Every ``(key, value)`` of such a copy, in key order, while the block runs.
    copy_rows: Callable[[Path], AbstractContextManager[Iterator[tuple[Any, Any]]]] | None = None
    #: The counts of such a copy, on the connection ``check_copy`` passes (its ``count``).
    count_copy: Callable[[Any], Counts] | None = None
    #: The physical snapshots of a live store of this backend (backup create), where
    #: it makes them.
    snapshot_source: Callable[[StorageProvider], SnapshotSource] | None = None
    #: The work on the local file a store of this backend lives in (a physical
    #: restore swaps it); None: its stores are not local files.
    files: LocalFiles | None = None
    #: A store of it lives for one command (memory): nothing to migrate to or from.
    transient: bool = False
    #: The gateway searches this backend's memory index itself (SQLite's FTS5 tables):
    #: memories copied in behind its back (a migration) must be indexed there. Elsewhere
    #: the index is ours and catches up with kv when searched.
    gateway_index: bool = False
    #: Its settings may hold server-side encryption (``sse``, ``sse_kms_key_id``: S3's),
    #: which a backup destination takes when no other is given.
    sse_settings: bool = False


# -- the memory indexes ----------------------------------------------------------------
# Imported when a command searches or repairs memories: the index modules (memory
# records, their JSON) cost about 25 ms to import (python -X importtime), which every
# other command (kv get) would pay.


def scan_index(provider: StorageProvider) -> MemoryIndex:
    """No stored index: a search indexes the visible memories in RAM (FTS5 in :memory:)."""
    # lazy: sqlite.fts adds 4 modules to `kv get --raw`
    from triggerfish_cli.storage.sqlite.fts import ScanIndex

    return ScanIndex(provider)


def _fts5_index(provider: StorageProvider) -> MemoryIndex:
    """The gateway's own FTS5 tables (memory_fts, memory_meta)."""
    # lazy: sqlite.fts adds 4 modules to `kv get --raw`
    from triggerfish_cli.storage.sqlite.fts import for_sqlite

    return for_sqlite(provider)


def _tsvector_index(provider: StorageProvider) -> MemoryIndex:
    """A tsvector table of ours beside kv."""
    # lazy: a backend loads only when chosen (postgres.index: +11 modules)
    from triggerfish_cli.storage.postgres.index import for_postgres

    return for_postgres(provider)


def _check_sqlite_copy(*args: Any) -> Any:
    """integrity.check_copy, imported for a verify only: it imports concurrent.futures
    (~6 ms, python -X importtime), which no other command needs."""
    # lazy: sqlite.integrity adds 9 modules to `kv get --raw`
    from triggerfish_cli.storage.sqlite.integrity import check_copy

    return check_copy(*args)


def _sqlite_copy_rows(path: Path) -> AbstractContextManager[Iterator[tuple[Any, Any]]]:
    """snapshot.copy_rows, imported for a diff only, as the rest of the snapshot module."""
    # lazy: sqlite.snapshot adds 14 modules to `kv get --raw`
    from triggerfish_cli.storage.sqlite.snapshot import copy_rows

    return copy_rows(path)


def _count_sqlite_copy(conn: Any) -> Counts:
    """counts.count_rows, imported for a verify only, as the integrity check."""
    # lazy: it imports backup.counts and memory.keys, which kv get does not need
    from triggerfish_cli.storage.sqlite.counts import count_rows

    return count_rows(conn)


def _sqlite_snapshots(provider: StorageProvider) -> SnapshotSource:
    """backup_source.SqliteSnapshots, imported for a backup only, as the rest of the
    snapshot module."""
    # lazy: the snapshot module is for backups alone (as _sqlite_copy_rows)
    from triggerfish_cli.storage.sqlite.backup_source import SqliteSnapshots

    return SqliteSnapshots(provider)


def snapshot_source(provider: StorageProvider) -> SnapshotSource | None:
    """The physical snapshots of the live store ``provider`` (backup create); None where
    its backend makes none."""
    backend = BACKENDS.get(provider.backend)
    if backend is None or backend.snapshot_source is None:
        return None
    return backend.snapshot_source(provider)


def physical(name: str) -> Backend:
    """The backend of a physical backup's manifest: one that makes physical copies."""
    backend = BACKENDS.get(name)
    if (
        backend is None
        or backend.check_copy is None
        or backend.copy_rows is None
        or backend.count_copy is None
    ):
        raise InvalidDataError(f"a physical backup of a {name!r} store: there are none")
    return backend


# -- opening ---------------------------------------------------------------------------


def _open_sqlite(config: StorageConfig, create: bool) -> StorageProvider:
    assert config.path is not None
    busy_timeout_ms = int(config.options.get("busy_timeout_ms", DEFAULT_BUSY_TIMEOUT_MS))
    if config.options.get("read_only"):  # opened with mode=ro: nothing in the file can change
        return SqliteStorage(
            # Absolute, so that a resumed run from another directory is the same source.
            config.path.expanduser().absolute(),
            busy_timeout_ms=busy_timeout_ms,
            live_writers="refuse",  # read-only: it never writes
            read_only=True,
        )
    return SqliteStorage(
        config.path,
        create=create,
        busy_timeout_ms=busy_timeout_ms,
        live_writers=config.options.get("live_writers"),
    )


def _open_memory(config: StorageConfig, create: bool) -> StorageProvider:
    return MemoryStorage()


# The Postgres and S3 modules import their client libraries (psycopg, boto3: an
# optional extra each, and slow to import): only for a store of theirs.


def _open_postgres(config: StorageConfig, create: bool) -> StorageProvider:
    # lazy: a backend loads only when chosen (postgres.backend: +6 modules)
    from triggerfish_cli.storage.postgres.backend import open_config

    return open_config(config, create)


def _open_s3(config: StorageConfig, create: bool) -> StorageProvider:
    # lazy: a backend loads only when chosen (s3.backend: +14 modules)
    from triggerfish_cli.storage.s3.backend import open_config

    return open_config(config, create)


def s3_destination(
    url: str,
    *,
    endpoint_url: str | None,
    sse: tuple[str | None, str | None],
    reading: bool = False,
) -> Destination:
    """The backup destination at ``s3://bucket/prefix`` (its module imports boto3);
    ``reading``: a missing bucket is not found (exit 3), not unavailable (exit 7)."""
    # lazy: a backend loads only when chosen (s3.destination: +18 modules)
    from triggerfish_cli.storage.s3.destination import S3Destination

    return S3Destination.from_url(url, endpoint_url=endpoint_url, sse=sse, reading=reading)


# -- settings --------------------------------------------------------------------------


def _sqlite_options(section: Mapping[str, Any], base: Path) -> dict[str, Any]:
    check_keys(section, {"backend", "path", "busy_timeout_ms", "live_writers"}, "storage")
    options: dict[str, Any] = {}
    if "path" in section:
        raw = section["path"]
        if not isinstance(raw, str) or not raw.strip():
            raise InvalidDataError(f"storage.path: must be a file path, not {raw!r}")
        path = Path(raw).expanduser()
        options["path"] = path if path.is_absolute() else base / path
    if "busy_timeout_ms" in section:
        options["busy_timeout_ms"] = positive_int(
            section["busy_timeout_ms"], "storage.busy_timeout_ms"
        )
    if "live_writers" in section:
        mode = section["live_writers"]
        if mode not in MODES:
            raise InvalidDataError(
                f"storage.live_writers: must be one of {', '.join(MODES)}, not {mode!r}"
            )
        options["live_writers"] = mode
    return options


def _memory_options(section: Mapping[str, Any], base: Path) -> dict[str, Any]:
    check_keys(section, {"backend"}, "storage")
    return {}


# -- where a store is ------------------------------------------------------------------


def _describe_sqlite(config: StorageConfig) -> str:
    return f"sqlite:{config.path}"


def _sqlite_location(config: StorageConfig) -> str:
    return config.backend if config.path is None else str(config.path)


def _by_name(config: StorageConfig) -> str:
    """A store with no place but its backend (memory: it lives for one command)."""
    return config.backend


BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (
        Backend(
            "sqlite",
            _sqlite_options,
            _open_sqlite,
            _fts5_index,
            describe=_describe_sqlite,
            location=_sqlite_location,
            check_copy=_check_sqlite_copy,
            copy_rows=_sqlite_copy_rows,
            count_copy=_count_sqlite_copy,
            snapshot_source=_sqlite_snapshots,
            files=LOCAL_FILES,
            gateway_index=True,
        ),
        Backend(
            "memory",
            _memory_options,
            _open_memory,
            scan_index,
            describe=_by_name,
            location=_by_name,
            transient=True,
        ),
        Backend(
            "postgres",
            postgres_section,
            _open_postgres,
            _tsvector_index,
            describe=describe_postgres,
            location=postgres_location,
        ),
        Backend(
            "s3",
            s3_section,
            _open_s3,
            scan_index,
            describe=describe_s3,
            location=s3_location,
            sse_settings=True,
        ),
    )
}


#: ``--live-writers``: what a SQLite store's writes do about the gateway's processes.
LIVE_WRITER_MODES = MODES


def choose_live_writers(mode: str | None) -> None:
    """``--live-writers``: the operator's choice for every SQLite store this process
    opens, over each store's ``storage.live_writers`` (None: forget it)."""
    choose_mode(mode)


def known_backends() -> tuple[str, ...]:
    return tuple(BACKENDS)


def memory_index_for(provider: StorageProvider) -> MemoryIndex:
    """The memory index serving ``provider`` (one of no backend here: the RAM scan)."""
    backend = BACKENDS.get(provider.backend)
    return scan_index(provider) if backend is None else backend.memory_index(provider)


def describe_config(config: StorageConfig) -> str:
    """Where the store ``config`` names is while it is not open, in the form of its
    ``describe()`` (a backend not here: its name)."""
    backend = BACKENDS.get(config.backend)
    return config.backend if backend is None else backend.describe(config)


def location_of(config: StorageConfig) -> str:
    """``status``'s location of the store ``config`` names: the path, DSN (no password:
    refused by the DSN check) or bucket/prefix (a backend not here: its name)."""
    backend = BACKENDS.get(config.backend)
    return config.backend if backend is None else backend.location(config)


def parse_storage_section(
    section: Mapping[str, Any], config_path: Path
) -> tuple[str, dict[str, Any]]:
    """Validate a ``storage:`` mapping: ``(backend, options)``."""
    name = section.get("backend", "sqlite")
    backend = BACKENDS.get(name) if isinstance(name, str) else None
    if backend is None:
        raise InvalidDataError(
            f"{config_path}: storage.backend: unknown backend {name!r} "
            f"(known: {', '.join(known_backends())})"
        )
    try:
        options = backend.options(section, config_path.parent)
    except (InvalidDataError, RefusedError) as exc:  # refused: a secret in the section
        raise type(exc)(f"{config_path}: {exc.message}", hint=exc.hint) from None
    return backend.name, options


def check_storage_section(section: Any, config_path: Path) -> None:
    """Validator of ``storage:`` for ``settings.OUR_SECTIONS``."""
    if not isinstance(section, Mapping):
        raise InvalidDataError(f"{config_path}: storage: must be a mapping")
    parse_storage_section(section, config_path)


# -- what else differs by backend ------------------------------------------------------


def transient(name: str) -> bool:
    """Whether a store of backend ``name`` lives for one command only (memory)."""
    backend = BACKENDS.get(name)
    return backend is not None and backend.transient


def gateway_index(name: str) -> bool:
    """Whether the gateway searches the memory index of a store of backend ``name``
    itself (SQLite's FTS5 tables), which a bulk copy must then bring in line."""
    backend = BACKENDS.get(name)
    return backend is not None and backend.gateway_index


def has_sse_settings(section: Mapping[str, Any] | None) -> bool:
    """Whether the ``storage:`` section names a backend whose settings may hold
    server-side encryption (S3), which a backup destination then takes by default."""
    name = None if section is None else section.get("backend")
    backend = BACKENDS.get(name) if isinstance(name, str) else None
    return backend is not None and backend.sse_settings


# -- stores kept in local files (a physical restore, status) ------------------------------


def files_of(name: str) -> LocalFiles:
    """The work on the local file a store of backend ``name`` lives in (a physical
    restore swaps it, and asks who has it open); refused (exit 8) for a backend whose
    stores are not local files."""
    backend = BACKENDS.get(name)
    if backend is None or backend.files is None:
        raise InvalidDataError(f"a {name!r} store is not a local file: there is none to swap")
    return backend.files


def file_backend() -> str:
    """The backend of a store known by its local file alone (``backup restore --to PATH``,
    ``--undo``): the one whose stores are local files (SQLite)."""
    (name,) = (backend.name for backend in BACKENDS.values() if backend.files is not None)
    return name


def openers(path: Path) -> list[int] | None:
    """The processes that have ``path`` open, any file (None: this system does not show
    them), from the process table SQLite's write gate reads (``status``: daemon.json)."""
    return LOCAL_FILES.openers(path)


def in_local_files(name: str) -> bool:
    """Whether a store of backend ``name`` lives in a local file (SQLite: with its WAL)."""
    backend = BACKENDS.get(name)
    return backend is not None and backend.files is not None


def local_file(config: StorageConfig) -> Path | None:
    """The one local file the store ``config`` names lives in (SQLite: its path); None
    for a store that is not a local file."""
    return config.path if in_local_files(config.backend) else None
