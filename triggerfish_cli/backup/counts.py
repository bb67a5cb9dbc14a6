"""What a backup counts: keys per namespace (unknown ones by first segment) and memory
records per level, recorded in the manifest and checked by a verify.

A logical backup counts its keys one at a time (:class:`KeyCounter`); a physical
one gets them from its backend, read from the very snapshot it streams
(:class:`SnapshotSource`, reached through storage/backends.py: SQLite's is
storage/sqlite/backup_source.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from triggerfish_cli import cells, namespaces
from triggerfish_cli.memory.keys import LEVELS_BY_NAME
from triggerfish_cli.memory.keys import PREFIX as MEMORY_PREFIX

T = TypeVar("T")


@dataclass
class Counts:
    keys: int
    namespaces: dict[str, int]
    memories: dict[str, int]


def memory_level(key: str) -> str | None:
    """The level of ``memory:<agent>:<LEVEL>:<key>`` (as ``memory.split_key`` reads it).

    None too when the agent is not UTF-8 text (cells.py), as :func:`memory_levels` counts.
    """
    parts = key.split(":", 3)
    if len(parts) == 4 and parts[0] == "memory" and parts[1] and parts[2] in LEVELS_BY_NAME:
        return parts[2] if parts[1].isascii() or cells.is_plain(parts[1]) else None
    return None


class KeyCounter:
    """The same counts as :func:`count_rows`, one key at a time (logical backups)."""

    def __init__(self) -> None:
        self.groups: Counter[str] = Counter()
        self.levels: Counter[str] = Counter()
        self.keys = 0

    def add(self, key: str) -> None:
        self.keys += 1
        self.groups[namespaces.group_of(key)] += 1
        if key.startswith(MEMORY_PREFIX):
            level = memory_level(key)
            if level is not None:
                self.levels[level] += 1

    def counts(self) -> Counts:
        return Counts(self.keys, dict(self.groups), dict(self.levels))



@dataclass
class PhysicalSnapshot:
    """What a physical snapshot was: its pages and the counts read from it."""

    page_size: int
    page_count: int
    counts: Counts


class SnapshotSource(Protocol):
    """A backend's physical snapshots of one live store (backup create)."""

    #: The SQLite library version the snapshot's pages are for (None: not SQLite).
    sqlite_version: str | None

    def size(self) -> int | None:
        """About how many bytes a snapshot reads (None: unknown)."""
        ...

    def stream(
        self,
        scratch: Path,
        consume: Callable[[Iterator[bytes | memoryview]], T],
        *,
        chunk: int,
    ) -> tuple[T, PhysicalSnapshot]:
        """Stream a consistent snapshot through ``consume`` in chunks of ``chunk`` bytes,
        counting its keys meanwhile; ``consume`` may be called a second time (a fallback
        copy, which may go to the new file ``scratch``) and must then start afresh."""
        ...
