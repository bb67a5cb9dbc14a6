"""Opening a SQLite file as a gateway store: refusing anything else untouched,
making a new one, the connection's settings."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

from triggerfish_cli.errors import (
    FILES_HINT,
    TOO_MANY,
    BackendUnavailableError,
    InvalidDataError,
    MissingStoreError,
    RefusedError,
    ResourceError,
    out_of_files,
    write_error,
)
from triggerfish_cli.fileio import make_directory, trusted_link
from triggerfish_cli.storage import kept_files
from triggerfish_cli.storage.sqlite.sql import (
    CACHE_SIZE_KIB,
    KV_SCHEMA,
    MMAP_SIZE,
    SQLITE_HEADER,
    translate_error,
)


class _Opened(NamedTuple):
    conn: sqlite3.Connection
    #: The file can only be read here (a read-only file, directory or file system).
    read_only: bool
    #: The store is to be made: a new file, or an empty one, with ``create``.
    fresh: bool


def open_file(
    path: Path, *, create: bool, busy_timeout_ms: int, read_only: bool = False
) -> _Opened:
    """Open a gateway store; refuse anything else without touching it.

    Opening never writes: no table is created, the journal mode is never
    changed (a rollback-journal copy stays one), and a file that cannot be
    written here (a read-only file or file system) is opened read-only, as
    an immutable file when SQLite cannot make its shared-memory file and no
    WAL content is there to miss. Only with ``create`` is a missing (or
    empty) store made, in WAL mode as the gateway makes it; the caller
    writes its table (through the write gate).
    """
    if path.is_dir():
        raise BackendUnavailableError(f"{path}: is a directory, not a SQLite store")
    try:
        size: int | None = path.stat().st_size
    except FileNotFoundError:
        size = None
    except NotADirectoryError as exc:  # under a file: no store there, none can be made
        if create and not read_only:
            raise write_error(path, exc) from exc
        raise MissingStoreError(f"no Triggerfish store at {path}", hint=_MISSING_HINT) from exc
    except OSError as exc:
        raise BackendUnavailableError(f"{path}: cannot read: {exc.strerror}") from exc
    timeout = busy_timeout_ms / 1000
    if create and not read_only and not size and os.path.islink(path) and not trusted_link(path):
        raise RefusedError(
            f"{path}: is a symbolic link someone else could have planted: a new store is "
            "never made through it",
            hint="name the file itself, or remove the link",
        )
    if size is None:
        if not create or read_only:
            raise MissingStoreError(f"no Triggerfish store at {path}", hint=_MISSING_HINT)
        make_directory(path.parent)
        _create_private(path)  # 0600, like its backups
        conn = _connect(path, "rw", timeout)
        _tune(conn, journal_wal=True)
        return _Opened(conn, False, True)
    if size:
        try:
            # Through a kept descriptor, never one closed here: closing any descriptor
            # of the file drops every POSIX lock this process holds on it, and a
            # connection of ours already open on the store would lose its SHARED
            # lock; another process closing its own connection would then take itself
            # for the last one and delete the WAL we are still writing (kept_files.py).
            header = os.pread(kept_files.kept(str(path)), len(SQLITE_HEADER), 0)
        except OSError as exc:
            raise BackendUnavailableError(f"{path}: cannot read: {exc.strerror}") from exc
        if header != SQLITE_HEADER:
            raise InvalidDataError(f"{path}: not a SQLite database")
    elif not create or read_only:
        raise MissingStoreError(
            f"no Triggerfish store at {path}: an empty file", hint=_MISSING_HINT
        )
    conn, objects, writable = _connect_existing(path, timeout, read_only=read_only)
    try:
        fresh = _check_schema(conn, objects, path, create=create and not read_only)
        if fresh and not writable:
            raise BackendUnavailableError(f"{path}: read-only here: cannot make a store in it")
        _tune(conn, journal_wal=fresh)
    except BaseException:
        conn.close()
        raise
    return _Opened(conn, not writable, fresh)


def _create_private(path: Path) -> None:
    """A new store file, owner only (0600) whatever the umask, like its backups.

    SQLite gives its -wal and -shm files the mode of the database file, so
    they are private too. An existing file is never touched.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return
    except OSError as exc:
        raise write_error(path, exc) from exc


_MISSING_HINT = "check the path, or make a demo store with `triggerfish-admin demo create`"


def _connect(
    path: Path, mode: str, timeout: float, *, immutable: bool = False
) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.absolute()))}?mode={mode}" + ("&immutable=1" if immutable else "")
    try:
        # One thread at a time uses it, but not always the one that opened it.
        return sqlite3.connect(
            uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        if out_of_files():
            raise ResourceError(f"{path}: cannot open: {TOO_MANY}", hint=FILES_HINT) from exc
        raise BackendUnavailableError(f"{path}: cannot open: {exc}") from exc


def _connect_existing(
    path: Path, timeout: float, *, read_only: bool
) -> tuple[sqlite3.Connection, list[tuple[str, str, str | None]], bool]:
    """A connection to an existing file, its schema, and whether it can be written.

    Read-write where the file and its directory can be written; else
    ``mode=ro``; else (a WAL store on a read-only file system with no
    ``-shm`` beside it, which SQLite cannot create) ``immutable``, which is
    exact only when no WAL content is waiting: with some, it is refused.
    """
    writable = not read_only and os.access(path, os.W_OK)
    modes = ["rw", "ro"] if writable else ["ro"]
    failure: sqlite3.Error | None = None
    for mode in modes:
        conn = _connect(path, mode, timeout)
        try:
            return conn, _schema(conn), writable and mode == "rw"
        except sqlite3.Error as exc:
            short = out_of_files()  # asked before close: the connection holds its files
            conn.close()
            if short:  # not a read-only file: opening it read-only would hide that
                raise ResourceError(f"{path}: cannot open: {TOO_MANY}", hint=FILES_HINT) from exc
            if not _cannot_open(exc):
                raise translate_error(exc, f"{path}: read schema") from exc
            failure = exc
    wal = Path(f"{path}-wal")
    try:
        waiting = wal.stat().st_size > 0
    except OSError:
        waiting = False
    if waiting:
        raise BackendUnavailableError(
            f"{path}: cannot read it here: SQLite cannot open its shared-memory file "
            f"({failure}), and its WAL holds changes not yet in the file",
            hint="copy the store with its -wal and -shm files, or read it where it can be written",
        )
    conn = _connect(path, "ro", timeout, immutable=True)
    try:
        return conn, _schema(conn), False
    except sqlite3.Error as exc:
        conn.close()
        raise translate_error(exc, f"{path}: read schema") from exc


def _cannot_open(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "unable to open" in text or "readonly" in text or "read-only" in text


def _schema(conn: sqlite3.Connection) -> list[tuple[str, str, str | None]]:
    return [
        (str(kind), str(name), sql)
        for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master")
    ]


def _check_schema(
    conn: sqlite3.Connection,
    objects: Sequence[tuple[str, str, str | None]],
    path: Path,
    *,
    create: bool,
) -> bool:
    """Is this the gateway's store? True: an empty database, to be made one (``create``)."""
    tables = {name: sql for kind, name, sql in objects if kind == "table"}
    if "kv" in tables:
        try:
            problems = kv_shape_problems(conn, tables["kv"])
        except sqlite3.Error as exc:
            raise translate_error(exc, f"{path}: read schema") from exc
        if problems:
            raise InvalidDataError(
                f"{path}: table kv is not the gateway's "
                f"(key TEXT PRIMARY KEY, value TEXT NOT NULL): {'; '.join(problems)}",
                hint="not a Triggerfish store as the gateway makes it; nothing was changed",
            )
        return False
    if objects:
        raise InvalidDataError(
            f"{path}: SQLite database without a kv table: not a Triggerfish store"
        )
    if not create:
        raise MissingStoreError(
            f"no Triggerfish store at {path}: an empty SQLite database", hint=_MISSING_HINT
        )
    return True


def kv_shape_problems(conn: sqlite3.Connection, sql: str | None) -> list[str]:
    """How table ``kv`` differs from the gateway's (key TEXT PRIMARY KEY, value TEXT NOT NULL)."""
    columns = conn.execute("PRAGMA table_info(kv)").fetchall()  # cid, name, type, notnull, dflt, pk
    named = {str(row[1]): row for row in columns}
    if "key" not in named or "value" not in named:
        listed = ", ".join(str(row[1]) for row in columns)
        return [f"its columns are ({listed}), not (key, value)"]
    problems = [f"an extra column {name!r}" for name in named if name not in ("key", "value")]
    key, value = named["key"], named["value"]
    for column in (key, value):
        declared = str(column[2] or "")
        if declared.upper() != "TEXT":
            problems.append(f"{column[1]} is declared {declared or 'without a type'}, not TEXT")
    primary = [str(row[1]) for row in sorted(columns, key=lambda row: row[5]) if row[5]]
    if primary != ["key"]:
        problems.append(
            "key is not its primary key (so INSERT OR REPLACE adds a row instead of replacing one)"
            if not primary
            else f"its primary key is ({', '.join(primary)}), not (key)"
        )
    if not value[3]:
        problems.append("value is not NOT NULL")
    if sql is not None and "without rowid" in " ".join(sql.lower().split()):
        problems.append("it is a WITHOUT ROWID table")
    return problems


def _tune(conn: sqlite3.Connection, *, journal_wal: bool) -> None:
    """Connection settings; ``journal_wal`` only for a store being made (the gateway's mode)."""
    if journal_wal:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as exc:
            raise translate_error(exc, "set WAL mode") from exc
    try:
        # Reads through a memory map: no read() system call per page, which
        # halves the cost of index-driven scans over a large store. Only the
        # main file is mapped (the WAL is read as usual); writes are unchanged.
        conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
        conn.execute(f"PRAGMA cache_size={CACHE_SIZE_KIB}")
    except sqlite3.Error:
        pass


def create_store(conn: sqlite3.Connection) -> None:
    """The gateway's table, in a store being made (run inside a write transaction)."""
    conn.execute(KV_SCHEMA)
