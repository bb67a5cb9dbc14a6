"""``backup restore --include PREFIX...``: restore only some namespaces or key prefixes.

Only the backup's keys under the prefixes are loaded, and only the target's
keys under them can change; everything else in the target is left exactly
as it was. The rules are those of a whole logical restore, applied to the
included part:

- a target that holds no key under the prefixes takes them with no flag;
- otherwise ``--merge`` (the backup's keys written over the target's) or
  ``--replace``: the target's keys under the prefixes are deleted and the
  backup's put in their place, in one transaction where the backend has them
  (SQLite, Postgres), so the included part becomes exactly the backup's;
- memory rows loaded this way are brought into the memory search index (the
  levels the prefixes cover).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from triggerfish_cli import namespaces
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import UsageError
from triggerfish_cli.memory.keys import LEVELS_BY_NAME, PREFIX
from triggerfish_cli.storage.provider import StorageProvider


def normalize(prefixes: Iterable[str]) -> tuple[str, ...]:
    """The prefixes in key order, without those another one covers; a namespace name
    (``cron``) is taken as its prefix (``cron:``). Refuses an empty prefix."""
    found: list[str] = []
    for text in prefixes:
        if not text:
            raise UsageError("--include needs a namespace or key prefix (an empty one is all)")
        known = namespaces.get(text) if ":" not in text else None
        found.append(known.prefix if known is not None else text)
    kept: list[str] = []
    for prefix in sorted(set(found)):
        if not any(prefix.startswith(shorter) for shorter in kept):
            kept.append(prefix)
    return tuple(kept)


def included(key: str, prefixes: Sequence[str]) -> bool:
    return key.startswith(tuple(prefixes))


def only(rows: Iterable[tuple[str, str]], prefixes: Sequence[str]) -> Iterator[tuple[str, str]]:
    starts = tuple(prefixes)
    return ((key, value) for key, value in rows if key.startswith(starts))


def memory_levels(prefixes: Sequence[str]) -> tuple[Level, ...]:
    """The memory levels whose rows the prefixes can hold (none: no memory rows)."""
    levels: set[Level] = set()
    for prefix in prefixes:
        if PREFIX.startswith(prefix):
            return tuple(Level)
        if not prefix.startswith(PREFIX):
            continue
        parts = prefix.split(":", 3)
        if len(parts) < 4:  # memory:<agent> or memory:<agent>:<LEV...
            partial = parts[2] if len(parts) == 3 else ""
            levels.update(
                level for name, level in LEVELS_BY_NAME.items() if name.startswith(partial)
            )
        elif parts[2] in LEVELS_BY_NAME:
            levels.add(LEVELS_BY_NAME[parts[2]])
    return tuple(sorted(levels))


def target_keys(provider: StorageProvider, prefixes: Sequence[str]) -> Iterator[str]:
    for prefix in prefixes:
        yield from provider.scan_keys(prefix, batch_size=5000)


def holds_any(provider: StorageProvider, prefixes: Sequence[str]) -> bool:
    return any(next(iter(provider.scan_keys(p, batch_size=1)), None) is not None for p in prefixes)


@dataclass
class IncludePlan:
    """What a restore with --include would do, per namespace."""

    include: tuple[str, ...]
    mode: str
    #: The backup's keys under the prefixes, per namespace: what is written.
    write: Counter[str] = field(default_factory=Counter)
    #: The target's keys under the prefixes, per namespace: deleted first with --replace.
    target: Counter[str] = field(default_factory=Counter)
    checks: list[str] = field(default_factory=list)

    @property
    def keys(self) -> int:
        return sum(self.write.values())

    @property
    def deletes(self) -> int:
        return sum(self.target.values()) if self.mode == "replace" else 0

    def as_dict(self) -> dict[str, Any]:
        names = sorted(set(self.write) | set(self.target))
        return {
            "include": list(self.include),
            "keys": self.keys,
            "written": self.keys,
            "deleted": self.deletes,
            "namespaces": {
                name: {
                    "write": self.write.get(name, 0),
                    "in_target": self.target.get(name, 0),
                    "delete": self.target.get(name, 0) if self.mode == "replace" else 0,
                }
                for name in names
            },
        }


def plan(
    rows: Iterable[tuple[str, str]],
    provider: StorageProvider | None,
    prefixes: Sequence[str],
    mode: str,
) -> IncludePlan:
    """Count what the backup's ``rows`` and the target (None: it does not exist) hold."""
    found = IncludePlan(tuple(prefixes), mode)
    for key, _value in only(rows, prefixes):
        found.write[namespaces.group_of(key)] += 1
    if provider is not None:
        for key in target_keys(provider, prefixes):
            found.target[namespaces.group_of(key)] += 1
    return found
