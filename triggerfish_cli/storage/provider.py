"""The StorageProvider protocol, and the helpers its implementations share.

The seed defines five operations: ``get``, ``set``, ``delete``,
``list(prefix)`` and ``clear``. Admin work needs more: streaming scans of
``(key, value)`` pairs, batched deletes in short transactions, counts and
byte sizes per prefix. ``BaseStorage`` (base.py) implements all of them on
top of the five, so a new backend works once it has the five; backends
override the extensions with native versions where they can be faster.

Prefix semantics on every backend: a prefix is literal and case-sensitive
(``%``, ``_``, ``*``, ``:`` and unicode are ordinary characters), and keys
come back in binary order: the order of their UTF-8 bytes, which is the
order of their code points and of Python's ``str`` comparison.

Nothing here is SQL: the protocol must fit SQLite, Postgres, S3 and a dict.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from triggerfish_cli import cells

if TYPE_CHECKING:
    from pathlib import Path

    from triggerfish_cli.settings import StorageConfig
    from triggerfish_cli.storage.sqlite.write_gate import WriteGate

_T = TypeVar("_T")

#: Called after each committed batch with the number of rows it affected.
BatchCallback = Callable[[int], None]

DEFAULT_BATCH = 1000


@dataclass(frozen=True)
class PrefixStats:
    """Key count and total value size (UTF-8 bytes) under a prefix."""

    count: int = 0
    bytes: int = 0

    def __add__(self, other: PrefixStats) -> PrefixStats:
        return PrefixStats(self.count + other.count, self.bytes + other.bytes)


def value_size(value: str) -> int:
    """Size of a stored value in bytes, as the SQLite file holds it (UTF-8)."""
    if value.isascii():
        return len(value)

    if not cells.is_plain(value):  # not UTF-8 text (cells.py): its stored bytes
        return len(cells.raw_bytes(value))
    return len(value.encode("utf-8"))


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix``.

    ``None`` when there is none (empty prefix, or only U+10FFFF characters).
    Keys under ``prefix`` are exactly those with ``prefix <= key < bound``.
    """
    chars = list(prefix)
    while chars:
        code = ord(chars[-1])
        if code < 0x10FFFF:
            code += 1
            if 0xD800 <= code <= 0xDFFF:  # surrogates never occur in UTF-8 keys
                code = 0xE000
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def first_segment(key: str, sep: str = ":") -> str:
    """``'todos:main'`` -> ``'todos:'``; a key without ``sep`` -> ``''``."""
    index = key.find(sep)
    return key[: index + len(sep)] if index >= 0 else ""


@runtime_checkable
class StorageProvider(Protocol):
    """What every backend offers. See the module docstring for the semantics."""

    #: Backend name: ``memory``, ``sqlite``, ``postgres``, ``s3``.
    backend: str

    def describe(self) -> str:
        """Where the store is, for messages and manifests (never a secret)."""
        ...

    # The five operations of the seed.
    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str) -> None: ...

    def delete(self, key: str) -> None: ...

    def list(self, prefix: str | None = None) -> list[str]: ...

    def clear(self) -> None: ...

    # What admin work needs.
    def scan(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> Iterator[tuple[str, str]]:
        """Stream ``(key, value)`` under ``prefix`` in key order, in batches.

        Keys ``<= start_after`` are skipped (resuming). The scan is not one
        snapshot: it reads batch after batch so it never holds a long read
        transaction on a live store. Keys deleted meanwhile may be missing.
        """
        ...

    def head(self, prefix: str, limit: int) -> builtins.list[tuple[str, str]]:
        """The first ``limit`` rows of :meth:`scan` under ``prefix`` (a page, for listings)."""
        ...

    def scan_keys(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> Iterator[str]: ...

    def snapshot_scan(self, *, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[str, str]]:
        """Every ``(key, value)`` in key order, from one consistent snapshot where the
        backend has one (SQLite: one read transaction, never blocking a WAL writer;
        Postgres: one REPEATABLE READ transaction). For backups. Close the
        iterator (or exhaust it) to end the snapshot.
        """
        ...

    def scan_many(
        self,
        prefixes: Sequence[str],
        *,
        batch_size: int = DEFAULT_BATCH,
        excluding: Sequence[str] = (),
    ) -> Iterator[tuple[str, str]]:
        """Every ``(key, value)`` under any of ``prefixes`` and none of ``excluding``, in
        no particular order.

        For jobs that read most of the store (a retention plan): each key
        comes once, from one consistent snapshot where the backend has one
        (SQLite: one read transaction, which in WAL mode never blocks a
        writer), in whatever order is cheapest to read. Prefixes must be
        disjoint. Close the iterator (or exhaust it) to end the snapshot.
        """
        ...

    def scan_stored(self, *, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[str, bytes]]:
        """Every key with its value's bytes exactly as stored, in key order (SQLite: not
        decoded at all; elsewhere the value's UTF-8, or its raw bytes: cells.py)."""
        ...

    def unmapped(self) -> AbstractContextManager[None]:
        """Around a listing of every value: a resident set that stays flat (SQLite: reads
        through the page cache instead of the memory map); a no-op elsewhere."""
        ...

    def fill(
        self,
        rows: Iterable[tuple[str, str]],
        memory_fts: Sequence[tuple[str, str, str, str, str]] = (),
        memory_meta: Sequence[tuple[str, str, str, str]] = (),
    ) -> int:
        """Load ``rows`` into an empty store at once (demo create). Where the backend
        keeps the gateway's memory search tables (SQLite), their rows ``memory_fts``
        and ``memory_meta`` go in too, tables made first; elsewhere they are left
        out. The number of memories indexed (0: none)."""
        ...

    def is_same_store(self, other: StorageProvider) -> bool:
        """Whether ``other`` is this very store (SQLite: the same file, through any
        path; elsewhere the same ``describe()``)."""
        ...

    def record_checksums(
        self, ranges: Sequence[tuple[str | None, str | None, str | None]]
    ) -> dict[str, tuple[int, int]] | None:
        """``(count, checksum)`` per namespace over key ranges, computed by the backend
        itself (Postgres: in the server; see checksums.py); None where it cannot."""
        ...

    def file_status(self) -> dict[str, Any] | None:
        """The store's own files (SQLite: ``path``, ``size``, ``wal_size``,
        ``journal_mode``); None for a store that has none."""
        ...

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        """Values of those keys that exist."""
        ...

    def any_keys(self, probes: Sequence[tuple[str, str | None]]) -> builtins.list[bool]:
        """For each ``(prefix, after)``: is there a key under ``prefix`` greater than
        ``after`` (``None``: any key under it)? One answer per probe, in order."""
        ...

    def set_many(self, items: Iterable[tuple[str, str]]) -> int:
        """Write all items; atomically where the backend can (one transaction)."""
        ...

    def live_writers(self) -> builtins.list[Any]:
        """Other processes writing this store that our writes must pause (SQLite: the
        gateway's, see storage/sqlite/live_writers.py); empty where the backend has real
        concurrency control."""
        ...

    def gate_stats(self) -> dict[str, Any] | None:
        """What the write gate did so far (SQLite); None where there is none."""
        ...

    def notices(self) -> builtins.list[str]:
        """Every line so far the operator should read on stderr about what opening and
        writing the store did beside the work (SQLite: a process that a run of ours that
        died had left stopped, resumed); empty for most stores."""
        ...

    @property
    def write_gate(self) -> WriteGate | None:
        """The write gate every write transaction passes (SQLite: it pauses the live
        writers meanwhile, storage/sqlite/write_gate.py); None where the backend has real
        concurrency control."""
        ...

    def bulk_writes(self) -> AbstractContextManager[None]:
        """Around an idempotent bulk job (a sweep): commits may skip their own
        durability (SQLite: no WAL fsync per batch); a no-op elsewhere."""
        ...

    def checkpoint(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        """SQLite's ``wal_checkpoint(mode)``: ``(busy, WAL frames, frames checkpointed)``;
        ``(0, 0, 0)`` where there is no WAL."""
        ...

    def atomic_loads(self) -> bool:
        """Whether a bulk load (a restore) can be one transaction, all or nothing."""
        ...

    def set_batched(self, items: Sequence[tuple[str, str]]) -> int:
        """Write all items, in as many transactions as suit the backend (not atomic).

        For idempotent bulk copies (migrate, a merging restore): SQLite keeps
        each transaction short enough to pause the gateway for.
        """
        ...

    def delete_many(
        self,
        keys: Iterable[str],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        """Delete in short transactions of ``batch_size`` keys; the count deleted."""
        ...

    def delete_if_unchanged(
        self,
        items: Iterable[tuple[str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        """Delete each key only if its value still equals the given one.

        A record rewritten meanwhile (by the gateway) is kept. Returns the
        count deleted.
        """
        ...

    def replace_if_unchanged(
        self,
        items: Iterable[tuple[str, str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        """Compare-and-swap: for each ``(key, expected, new)``, write ``new`` only
        if the key still holds ``expected``.

        A record rewritten (or deleted) meanwhile is left as it is; a missing
        key is never created. Short transactions of ``batch_size`` items.
        Returns the count replaced.
        """
        ...

    def lock(self, name: str, wait: float = 0.0) -> AbstractContextManager[None]:
        """An exclusive advisory lock on this store, held for the ``with`` block.

        Only processes of this tool take it (the gateway never does): it keeps
        two admin jobs of the same ``name`` (a retention sweep) from running
        at once on the same store. Waits up to ``wait`` seconds, then raises
        :class:`~triggerfish_cli.errors.BusyError`. Released when the block
        ends, and by the operating system when the process dies (kill -9).
        """
        ...

    def count(self, prefix: str | None = None) -> int: ...

    def prefix_stats(self, prefixes: Sequence[str]) -> dict[str, PrefixStats]:
        """Count and value bytes under each prefix (prefixes are disjoint)."""
        ...

    def other_stats(self, known: Sequence[str], sep: str = ":") -> dict[str, PrefixStats]:
        """Keys under none of ``known``, grouped by their first segment.

        The group of ``'x:y:z'`` is ``'x:'``; keys without ``sep`` share the
        group ``''``.
        """
        ...

    def close(self) -> None: ...

    def database_file(self) -> Path | None:
        """The one file the store lives in, which a physical backup snapshots and a
        physical restore replaces (SQLite); None where there is no such file."""
        ...

    def data_version(self) -> int | None:
        """A number that changes whenever another connection commits (SQLite's
        ``data_version``); None where the backend has no such thing."""
        ...

    def reader_config(self) -> StorageConfig | None:
        """How another process of ours opens this store to read it beside us (read-only:
        a worker sharing a long read); None where none can (an in-memory store)."""
        ...

    def load_at_once(
        self,
        rows: Iterable[tuple[str, str]],
        *,
        replace: bool,
        only: Sequence[str] | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> tuple[int, int] | None:
        """A restore's load in one transaction, all or nothing: with ``replace`` every
        key (``only``: those under these prefixes) is deleted first, then ``rows``
        are written. ``(written, deleted)``; None, with ``rows`` untouched, where it
        cannot be done so (the caller loads in batches)."""
        ...


def uncovered_ranges(prefixes: Sequence[str]) -> list[tuple[str | None, str | None]]:
    """The key ranges ``[low, high)`` covered by none of the prefixes (``None``: unbounded)."""
    ranges = sorted((p, prefix_upper_bound(p)) for p in prefixes if p)
    merged: list[tuple[str, str | None]] = []
    for low, high in ranges:
        if merged:
            last_low, last_high = merged[-1]
            if last_high is None or low <= last_high:
                if last_high is not None and (high is None or high > last_high):
                    merged[-1] = (last_low, high)
                continue
        merged.append((low, high))
    gaps: list[tuple[str | None, str | None]] = []
    cursor: str | None = None
    for low, high in merged:
        if cursor is None or cursor < low:
            gaps.append((cursor, low))
        if high is None:
            return gaps
        cursor = high
    gaps.append((cursor, None))
    return gaps


def batched(items: Iterable[_T], size: int) -> Iterator[list[_T]]:
    """Successive lists of at most ``size`` items."""
    if size < 1:
        raise ValueError("batch size must be at least 1")
    batch: list[_T] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def after_batch(done: int, pause: float, on_batch: BatchCallback | None) -> None:
    """After a committed batch: report ``done`` rows, then rest ``pause`` seconds."""
    if on_batch is not None:
        on_batch(done)
    if pause > 0:
        time.sleep(pause)
