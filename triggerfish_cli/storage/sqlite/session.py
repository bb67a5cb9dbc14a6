"""The plumbing of a SQLite store: its connection, the write gate, transactions,
reads that survive cells which are not UTF-8, locks and checkpoints.

The store itself (:class:`~triggerfish_cli.storage.sqlite.backend.SqliteStorage`)
builds its key-value methods on this."""

from __future__ import annotations

import builtins
import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.errors import BackendUnavailableError
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage import kept_files
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.batching import BatchSizer
from triggerfish_cli.storage.provider import batched
from triggerfish_cli.storage.sqlite.files import create_store, open_file
from triggerfish_cli.storage.sqlite.gate_ledger import gate_locked, recover, recover_locked
from triggerfish_cli.storage.sqlite.gate_modes import mode_for
from triggerfish_cli.storage.sqlite.live_writers import LiveWriter, live_writers, process_table
from triggerfish_cli.storage.sqlite.sql import (
    DEFAULT_BUSY_TIMEOUT_MS,
    MMAP_SIZE,
    UNDECODABLE,
    T,
    execute_rows,
    odd_rows,
    range_clause,
    translate_error,
)
from triggerfish_cli.storage.sqlite.write_gate import WriteGate, retried

#: How long ``live_writers`` waits for the write gate's lock to see a stopped writer
#: with no freeze of ours going (a freeze lasts at most its watchdog's 0.3 s).
STOPPED_WAIT = 2.0


class SqliteSession(BaseStorage):
    """A SQLite store's connection and its plumbing (the key-value methods: backend.py)."""

    backend = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = False,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        live_writers: str | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.busy_timeout_ms = busy_timeout_ms
        #: freeze | refuse | ignore (write_gate.py); None: the operator's choice.
        self.gate_mode = mode_for(live_writers)
        self._gate: WriteGate | None = None
        self._sizers: dict[str, BatchSizer] = {}
        self._conn: sqlite3.Connection | None = None
        opened = open_file(
            self.path, create=create, busy_timeout_ms=busy_timeout_ms, read_only=read_only
        )
        self._conn = opened.conn
        #: Only readable here: a read-only file or file system (or ``read_only``).
        self.read_only = opened.read_only
        #: Processes a run of ours that died had left stopped, resumed (gate_ledger.py).
        self._notices: builtins.list[str] = [] if opened.fresh else recover(self.path)
        if opened.fresh:  # asked to make the store: its table, through the write gate
            try:
                self.write(create_store, "create the store")
            except BaseException:
                self.close()
                raise

    # -- plumbing ---------------------------------------------------------

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection, for SQLite-specific modules (memory index, backup)."""
        if self._conn is None:
            raise BackendUnavailableError(f"{self.describe()}: the store is closed")
        return self._conn

    def describe(self) -> str:
        return f"sqlite:{self.path}"

    @property
    def gate(self) -> WriteGate:
        """The write gate every write transaction on this store passes (write_gate.py)."""
        if self._gate is None:
            self._gate = WriteGate(self.path, self.gate_mode, busy_timeout_ms=self.busy_timeout_ms)
        return self._gate

    @property
    def write_gate(self) -> WriteGate:
        return self.gate

    def live_writers(self) -> builtins.list[LiveWriter]:
        """The other processes that have the store open (the gateway's daemon and CLI).

        A writer seen stopped is looked at again holding the write gate's lock,
        when no run of ours is pausing it for a write: stopped then, someone
        else stopped it (Ctrl-Z, a debugger), or a run of ours that died did
        (resumed here, and noted).
        """
        found = live_writers(self.path)
        if not any(writer.stopped for writer in found):
            return found
        with gate_locked(self.path, wait=STOPPED_WAIT) as fd:
            table = process_table()
            if fd is not None and table is not None:
                self._notices += recover_locked(fd, table)
            return live_writers(self.path, table)

    def notices(self) -> builtins.list[str]:
        """What this store's opening and writes did beside their work that the operator
        should hear of: processes a run of ours that died had left stopped, resumed."""
        gate = [] if self._gate is None else self._gate.freezer.notices
        return [*self._notices, *gate]

    def atomic_loads(self) -> bool:
        """One transaction for a whole load, unless live writers must be paused for it
        (the gate keeps each transaction short: the load goes in batches then)."""
        return not self.gate.will_freeze()

    def gate_stats(self) -> dict[str, Any] | None:
        """What the write gate did so far (None: nothing was written)."""
        return None if self._gate is None else self._gate.stats.as_dict()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._gate is not None:
            self._notices += self._gate.freezer.notices
            self._gate.close()
            self._gate = None
        kept_files.release()  # descriptors read beside SQLite, now that its locks are gone

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Turn sqlite3 errors raised inside into TriggerfishErrors."""
        try:
            yield
        except sqlite3.Error as exc:
            raise translate_error(exc, f"{self.path}: {what}") from exc

    @contextmanager
    def transaction(self, what: str = "write") -> Iterator[sqlite3.Connection]:
        """A short write transaction (``BEGIN IMMEDIATE``): all or nothing.

        The only way this tool writes to a SQLite store: it passes the write
        gate, which keeps the live writers (the gateway) from writing while
        we hold the lock (storage/sqlite/write_gate.py). Interrupted (Ctrl-C) or
        failing, it rolls back and leaves the store as it was. Keep what runs
        inside short: the gateway is stopped meanwhile, and a transaction that
        would keep it stopped longer than the gate allows is rolled back
        (:class:`FreezeTooLong`, exit 6).
        """
        conn = self.connection
        with self.errors(what), self.gate.transaction(conn) as held:
            yield held

    def write(self, work: Callable[[sqlite3.Connection], T], what: str = "write") -> T:
        """``work(conn)`` in one transaction, tried again when a hiccup cut its freeze short."""

        def once() -> T:
            with self.transaction(what) as conn:
                return work(conn)

        return retried(once)

    @contextmanager
    def read_snapshot(
        self, what: str = "read", *, checkpoint: bool = True
    ) -> Iterator[sqlite3.Connection]:
        """One read transaction: every read inside sees the snapshot its first read took.

        In WAL mode a reader never blocks the gateway's writes; it only keeps
        a checkpoint from finishing past the snapshot until it ends, so a
        PASSIVE checkpoint runs as soon as it ends (the gateway's next commit
        does not inherit the backlog). ``checkpoint=False``: none, for a short
        read that must leave the store's files as they were (a search).
        """
        conn = self.connection
        with self.errors(what):
            conn.execute("BEGIN")
        try:
            yield conn
        finally:
            # Ending a read cannot lose anything; on a damaged (or, for a scan left
            # unfinished, already closed) connection it may fail too, and must not
            # hide the error that brought us here.
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    try:
                        conn.execute("COMMIT")
                    except sqlite3.Error:
                        conn.execute("ROLLBACK")
                    if checkpoint:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()

    def _lenient(self, exc: sqlite3.Error) -> bool:
        """Met TEXT that is not UTF-8: from now on decode it as an odd cell (cells.py).

        True when the read is worth trying again. The strict default decoder
        is SQLite's own (fast); the lenient one runs in Python, so it is only
        switched on for a store that needs it.
        """
        conn = self.connection
        if UNDECODABLE not in str(exc).lower() or conn.text_factory is cells.decode_text:
            return False
        conn.text_factory = cells.decode_text
        return True

    def _read(self, what: str, run: Callable[[sqlite3.Connection], T]) -> T:
        """``run(conn)``, tried again with the lenient decoder when a cell is not UTF-8."""
        try:  # not self.errors(): a generator context costs more than a short read
            try:
                return run(self.connection)
            except sqlite3.OperationalError as exc:
                if not self._lenient(exc):
                    raise
                return run(self.connection)
        except sqlite3.Error as exc:
            raise translate_error(exc, f"{self.path}: {what}") from exc

    def _rows(self, what: str, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        """All rows of a query on kv cells, each cell a str (cells.py)."""
        return odd_rows(self._read(what, lambda conn: conn.execute(sql, params).fetchall()))

    def _fetch(
        self, conn: sqlite3.Connection, sql: str, params: Sequence[Any], batch_size: int
    ) -> Iterator[tuple[Any, ...]]:
        """The rows of one query, ``batch_size`` at a time, each cell a str (cells.py).

        A cell that is not UTF-8 switches the decoder and the query runs
        again (same snapshot, same order), past the rows already given.
        """
        given = 0
        while True:
            with self.errors("scan"):
                cursor = conn.execute(sql, params)
            skip = given
            try:
                while True:
                    with self.errors("scan"):
                        try:
                            rows = cursor.fetchmany(batch_size)
                        except sqlite3.OperationalError as exc:
                            if not self._lenient(exc):
                                raise
                            raise _Again from None
                    if not rows:
                        return
                    if skip:
                        dropped = min(skip, len(rows))
                        rows, skip = rows[dropped:], skip - dropped
                    given += len(rows)
                    yield from odd_rows(rows)
            except _Again:
                continue

    def file_status(self) -> dict[str, Any] | None:
        wal = Path(f"{self.path}-wal")
        with self.errors("journal mode"):
            mode = self.connection.execute("PRAGMA journal_mode").fetchone()[0]
        return {
            "path": os.path.realpath(self.path),
            "size": self.path.stat().st_size,
            "wal_size": wal.stat().st_size if wal.exists() else 0,
            "journal_mode": str(mode).lower(),
        }

    def lock_path(self, name: str) -> Path:
        """The lock file of ``name``, beside the database: ``<db>-tfadmin-<name>.lock``."""
        # lazy: storage.locks (+4 modules, hashlib) is not loaded by `kv get --raw`
        from triggerfish_cli.storage.locks import lock_file_name

        target = self.path.resolve()
        return target.with_name(f"{target.name}-tfadmin-{lock_file_name(name)}.lock")

    def lock(self, name: str, wait: float = 0.0) -> AbstractContextManager[None]:
        """An OS file lock (flock) beside the database file.

        Every process of this tool on this host that opens the same file
        (through any path: it is resolved) takes the same lock. The gateway
        never takes it; it only keeps our own jobs apart.
        """
        # lazy: storage.locks (+4 modules, hashlib) is not loaded by `kv get --raw`
        from triggerfish_cli.storage.locks import file_lock

        return file_lock(self.lock_path(name), wait, what=f"{name} on {self.describe()}")

    @contextmanager
    def unmapped(self) -> Iterator[None]:
        """Reads through SQLite's page cache instead of the memory map, for the block.

        A listing of every value in key order touches nearly every page of
        the file; read through the map, each page touched stays in our
        resident set (a 700 MiB store: ~650 MB of RSS, though it is page
        cache the kernel can take back). Through the small page cache the
        resident set stays flat (about 80 MB), at about twice the time.
        """
        conn = self.connection
        with self.errors("read"):
            conn.execute("PRAGMA mmap_size=0")
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """No fsync after each commit during a long idempotent batched job (a sweep).

        Commits never fsync inside a freeze anyway (the write gate runs our
        connection with ``synchronous=NORMAL`` in WAL mode and syncs the WAL
        after each commit, with everyone running again); here even that sync
        is skipped: the file stays consistent whatever happens, only the last
        commits may be lost on an OS crash or power cut, which an idempotent
        job simply redoes. The gateway's own connections are not affected.
        """
        gate = self.gate
        durable, gate.durable = gate.durable, False
        try:
            yield
        finally:
            gate.durable = durable

    def checkpoint(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint(mode)``: ``(busy, wal frames, frames checkpointed)``.

        PASSIVE never waits for and never blocks the gateway: it copies what
        it can of the WAL into the database. Run between the batches of a
        long job, it keeps the WAL small, so that the gateway's next commit
        does not pay for a large automatic checkpoint.
        """
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        with self.errors("checkpoint"):
            row = self.connection.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)

    def database_file(self) -> Path | None:
        return self.path

    def data_version(self) -> int | None:
        with self.errors("data_version"):
            row = self.connection.execute("PRAGMA data_version").fetchone()
        return int(row[0])

    def reader_config(self) -> StorageConfig:
        """The same file, read-only (``mode=ro``: it never writes, so no gate)."""
        options = {"busy_timeout_ms": self.busy_timeout_ms, "read_only": True}
        return StorageConfig(self.backend, path=self.path.absolute(), options=options)

    def load_at_once(
        self,
        rows: Iterable[tuple[str, str]],
        *,
        replace: bool,
        only: Sequence[str] | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> tuple[int, int] | None:
        """One transaction, unless live writers must be paused for it (atomic_loads)."""
        if not self.atomic_loads():
            return None
        written = deleted = 0
        with self.transaction("restore") as conn:  # all or nothing
            if replace and only:
                for prefix in only:
                    where, params = range_clause(prefix)
                    deleted += conn.execute(f"DELETE FROM kv WHERE {where}", params).rowcount
            elif replace:
                deleted = conn.execute("DELETE FROM kv").rowcount
            for batch in batched(rows, 5000):
                execute_rows(conn, "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", batch)
                written += len(batch)
                if on_batch is not None:
                    on_batch(len(batch))
        return written, deleted


class _Again(Exception):
    """A query to run again (with the lenient decoder)."""
