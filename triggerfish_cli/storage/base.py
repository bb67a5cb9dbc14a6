"""BaseStorage: every extension of the protocol (provider.py) built on the five seed
operations, so that a new backend works once it has the five; backends override
them with native versions where they can be faster."""

from __future__ import annotations

import builtins
import contextlib
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from triggerfish_cli import cells

if TYPE_CHECKING:
    from pathlib import Path

    from triggerfish_cli.settings import StorageConfig
    from triggerfish_cli.storage.sqlite.write_gate import WriteGate

from triggerfish_cli.storage.provider import (
    DEFAULT_BATCH,
    BatchCallback,
    PrefixStats,
    StorageProvider,
    after_batch,
    batched,
    first_segment,
    value_size,
)


class BaseStorage(ABC):
    """Generic implementations of the admin operations on top of the five.

    Subclasses implement ``get``, ``set``, ``delete``, ``list``, ``clear``
    and ``describe``, and override the rest where they have something
    faster or more atomic.
    """

    backend: str = "base"

    @abstractmethod
    def describe(self) -> str: ...

    @abstractmethod
    def get(self, key: str) -> str | None: ...

    @abstractmethod
    def set(self, key: str, value: str) -> None: ...

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def list(self, prefix: str | None = None) -> list[str]: ...

    @abstractmethod
    def clear(self) -> None: ...

    def close(self) -> None:
        return None

    def __enter__(self) -> BaseStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- generic fallbacks ------------------------------------------------

    def scan_keys(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> Iterator[str]:
        for key in self.list(prefix):
            if start_after is None or key > start_after:
                yield key

    def head(self, prefix: str, limit: int) -> builtins.list[tuple[str, str]]:
        rows = self.scan(prefix, batch_size=max(1, min(limit, 2000)))
        try:
            return list(itertools.islice(rows, limit))
        finally:
            rows.close()  # type: ignore[attr-defined]

    def scan(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> Iterator[tuple[str, str]]:
        for key in self.scan_keys(prefix, start_after=start_after, batch_size=batch_size):
            value = self.get(key)
            if value is not None:  # deleted since it was listed
                yield key, value

    def snapshot_scan(self, *, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[str, str]]:
        """Fallback: :meth:`scan` of everything (batch after batch, not one snapshot)."""
        yield from self.scan(batch_size=batch_size)

    def scan_many(
        self,
        prefixes: Sequence[str],
        *,
        batch_size: int = DEFAULT_BATCH,
        excluding: Sequence[str] = (),
    ) -> Iterator[tuple[str, str]]:
        """Fallback: one prefix after the other, in key order (not one snapshot)."""
        skip = tuple(excluding)
        for prefix in prefixes:
            for row in self.scan(prefix, batch_size=batch_size):
                if not (skip and row[0].startswith(skip)):
                    yield row

    def scan_stored(self, *, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[str, bytes]]:
        for key, value in self.scan(batch_size=batch_size):
            yield key, cells.raw_bytes(value)

    def unmapped(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def fill(
        self,
        rows: Iterable[tuple[str, str]],
        memory_fts: Sequence[tuple[str, str, str, str, str]] = (),
        memory_meta: Sequence[tuple[str, str, str, str]] = (),
    ) -> int:
        """Fallback: :meth:`set_many`; no memory search tables to fill."""
        self.set_many(rows)
        return 0

    def is_same_store(self, other: StorageProvider) -> bool:
        return other is self or self.describe() == other.describe()

    def record_checksums(
        self, ranges: Sequence[tuple[str | None, str | None, str | None]]
    ) -> dict[str, tuple[int, int]] | None:
        return None

    def file_status(self) -> dict[str, Any] | None:
        return None

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for key in keys:
            value = self.get(key)
            if value is not None:
                found[key] = value
        return found

    def any_keys(self, probes: Sequence[tuple[str, str | None]]) -> builtins.list[bool]:
        return [
            next(iter(self.scan_keys(prefix, start_after=after, batch_size=1)), None) is not None
            for prefix, after in probes
        ]

    def set_many(self, items: Iterable[tuple[str, str]]) -> int:
        written = 0
        for key, value in items:
            self.set(key, value)
            written += 1
        return written

    def set_batched(self, items: Sequence[tuple[str, str]]) -> int:
        return self.set_many(items)

    def live_writers(self) -> builtins.list[Any]:
        return []

    def gate_stats(self) -> dict[str, Any] | None:
        """What the write gate did so far (SQLite); None where there is none."""
        return None

    def notices(self) -> builtins.list[str]:
        return []

    @property
    def write_gate(self) -> WriteGate | None:
        return None

    def bulk_writes(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def checkpoint(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        return (0, 0, 0)

    def atomic_loads(self) -> bool:
        return False

    def database_file(self) -> Path | None:
        return None

    def data_version(self) -> int | None:
        return None

    def reader_config(self) -> StorageConfig | None:
        return None

    def load_at_once(
        self,
        rows: Iterable[tuple[str, str]],
        *,
        replace: bool,
        only: Sequence[str] | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> tuple[int, int] | None:
        return None

    def delete_many(
        self,
        keys: Iterable[str],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        deleted = 0
        for batch in batched(keys, batch_size):
            done = 0
            for key in batch:
                if self.get(key) is not None:
                    self.delete(key)
                    done += 1
            deleted += done
            after_batch(done, pause, on_batch)
        return deleted

    def delete_if_unchanged(
        self,
        items: Iterable[tuple[str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        deleted = 0
        for batch in batched(items, batch_size):
            done = 0
            for key, expected in batch:
                if self.get(key) == expected:
                    self.delete(key)
                    done += 1
            deleted += done
            after_batch(done, pause, on_batch)
        return deleted

    def replace_if_unchanged(
        self,
        items: Iterable[tuple[str, str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        replaced = 0
        for batch in batched(items, batch_size):
            done = 0
            for key, expected, new in batch:
                if self.get(key) == expected:
                    self.set(key, new)
                    done += 1
            replaced += done
            after_batch(done, pause, on_batch)
        return replaced

    def lock(self, name: str, wait: float = 0.0) -> AbstractContextManager[None]:
        """Fallback: a host-local OS file lock named after the store.

        It serialises admin jobs run on this host (the usual case: cron on the
        gateway's machine), not across hosts. Backends with a server-side
        lock (Postgres advisory locks) override it.
        """
        # lazy: storage.locks (+4 modules, hashlib) is not loaded by `kv get --raw`
        from triggerfish_cli.storage.locks import file_lock, host_lock_path

        return file_lock(host_lock_path(self.describe(), name), wait, what=name)

    def count(self, prefix: str | None = None) -> int:
        return sum(1 for _ in self.scan_keys(prefix))

    def prefix_stats(self, prefixes: Sequence[str]) -> dict[str, PrefixStats]:
        stats: dict[str, PrefixStats] = {}
        for prefix in prefixes:
            count = size = 0
            for _key, value in self.scan(prefix):
                count += 1
                size += value_size(value)
            stats[prefix] = PrefixStats(count, size)
        return stats

    def other_stats(self, known: Sequence[str], sep: str = ":") -> dict[str, PrefixStats]:
        groups: dict[str, PrefixStats] = {}
        known_tuple = tuple(known)
        for key, value in self.scan():
            if key.startswith(known_tuple):
                continue
            group = first_segment(key, sep)
            groups[group] = groups.get(group, PrefixStats()) + PrefixStats(1, value_size(value))
        return groups
