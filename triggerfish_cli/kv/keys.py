"""The kv commands' core: the namespaces report, single keys, the raw view of memory
rows, prefix deletes."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from triggerfish_cli import audit, cells, namespaces
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import InvalidDataError, NotFoundError, RefusedError
from triggerfish_cli.memory.keys import PREFIX as MEMORY_PREFIX
from triggerfish_cli.memory.keys import may_name, split_key
from triggerfish_cli.serialization import fast_loads, to_iso, utc_now
from triggerfish_cli.storage.provider import PrefixStats, StorageProvider, value_size

# -- shell completion -----------------------------------------------------------

#: Shell completion offers at most this many keys ...
COMPLETION_KEYS = 100
#: ... from the first this many under the prefix (one bounded range read).
COMPLETION_SCANNED = 1000


def completion_keys(
    provider: StorageProvider, prefix: str, limit: int = COMPLETION_KEYS
) -> list[str]:
    """The first ``limit`` keys starting with ``prefix``, in key order, for shell
    completion: one range read of at most :data:`COMPLETION_SCANNED` keys, never a
    full scan. Left out: memory keys above PUBLIC (naming them needs an audit
    record, and completion never writes) and keys a shell cannot take as one word
    (line breaks, other control characters, odd cells)."""
    keys = provider.scan_keys(prefix or None, batch_size=limit + 1)
    try:
        shown = (
            key
            for key in itertools.islice(keys, COMPLETION_SCANNED)
            if cells.is_plain(key)
            and key.isprintable()
            and (not key.startswith(MEMORY_PREFIX) or may_name(key, Level.PUBLIC))
        )
        return list(itertools.islice(shown, limit))
    finally:
        close = getattr(keys, "close", None)
        if close is not None:
            close()


def namespaces_present(
    provider: StorageProvider, candidates: Sequence[namespaces.Namespace]
) -> list[namespaces.Namespace]:
    """Those of ``candidates`` that hold at least one key: one index probe each."""
    there = provider.any_keys([(namespace.prefix, None) for namespace in candidates])
    return [namespace for namespace, found in zip(candidates, there, strict=True) if found]


# -- kv namespaces ------------------------------------------------------------


@dataclass
class NamespaceRow:
    namespace: str
    known: bool
    description: str
    keys: int
    bytes: int
    oldest: datetime | None = None
    newest: datetime | None = None
    unknown_age: int | None = None
    #: Records whose deadline is still ahead (a pairing code before its expiresAt).
    pending: int | None = None

    def as_dict(self, ages: bool) -> dict[str, Any]:
        row: dict[str, Any] = {
            "namespace": self.namespace,
            "known": self.known,
            "description": self.description,
            "keys": self.keys,
            "bytes": self.bytes,
        }
        if ages:
            row["oldest"] = to_iso(self.oldest) if self.oldest else None
            row["newest"] = to_iso(self.newest) if self.newest else None
            row["unknown_age"] = self.unknown_age
            row["pending"] = self.pending
        return row


def namespace_report(
    provider: StorageProvider,
    *,
    ages: bool = False,
    now: datetime | None = None,
    taint: Level | None = None,
) -> list[NamespaceRow]:
    """Every namespace present, with key count and value bytes, sorted by prefix.

    Keys of no known namespace are grouped by their first segment (``x:``);
    keys without any ``:`` form the group ``""``, NULL keys and BLOB keys
    (cells.py) a group each. With ``ages`` every value
    is read to find the oldest and newest record time, the records of
    unknown age, and the pending ones: a time that is a deadline still ahead
    of ``now`` (default: the clock) is not an age, and is left out of
    oldest and newest.

    ``taint`` (the raw view's, when set): memory rows above it are neither
    counted, sized nor aged (:func:`_visible_memories`); unset, every row is
    counted (counts name nothing: no audit record, as ``backup diff``).
    """
    known = provider.prefix_stats(namespaces.PREFIXES)
    hiding = _hiding(taint)
    if hiding is not None and known.get(MEMORY_PREFIX, PrefixStats()).count:
        known[MEMORY_PREFIX] = _visible_memories(provider, hiding)
    rows: list[NamespaceRow] = []
    for prefix, stats in known.items():
        if stats.count:
            ns = namespaces.get(prefix)
            assert ns is not None
            rows.append(NamespaceRow(prefix, True, ns.description, stats.count, stats.bytes))
    for group, stats in provider.other_stats(namespaces.PREFIXES).items():
        label = _GROUP_LABELS.get(group, "unknown namespace")
        rows.append(NamespaceRow(group, False, label, stats.count, stats.bytes))
    rows.sort(key=lambda row: row.namespace)
    if ages:
        moment = now or utc_now()
        for row in rows:
            _fill_ages(provider, row, moment, taint)
    return rows


def _hiding(taint: Level | None) -> Level | None:
    """``taint`` when it hides some memory rows (RESTRICTED sees them all), else None."""
    return taint if taint is not None and taint < Level.RESTRICTED else None


def _visible_memories(provider: StorageProvider, taint: Level) -> PrefixStats:
    """Count and size of the memory rows a reader at ``taint`` may name (reads them)."""
    count = size = 0
    for key, value in provider.scan(MEMORY_PREFIX, batch_size=5000):
        if may_name(key, taint):
            count += 1
            size += value_size(value)
    return PrefixStats(count, size)


#: Groups of their own: keys without ':', and NULL and BLOB keys (cells.py).
_GROUP_LABELS = {
    "": "keys without a ':' namespace",
    cells.NULL_CELL: "NULL keys (not text)",
    cells.BLOB_MARK: "BLOB keys (not text)",
}


def _fill_ages(
    provider: StorageProvider, row: NamespaceRow, now: datetime, taint: Level | None
) -> None:
    ns = namespaces.get(row.namespace) if row.known else None
    row.pending = 0
    if ns is None or not ns.has_age:
        row.unknown_age = row.keys
        return
    loads = fast_loads()
    oldest = newest = None
    unknown = pending = 0
    hiding = _hiding(taint) if ns.prefix == MEMORY_PREFIX else None
    for key, value in provider.scan(ns.prefix, batch_size=5000):
        if hiding is not None and not may_name(key, hiding):
            continue
        moment = namespaces.record_time(ns, key, value, loads)
        if moment is None:
            unknown += 1
            continue
        if ns.deadline is not None and namespaces.pending(ns, value, now, loads):
            pending += 1
            continue
        if oldest is None or moment < oldest:
            oldest = moment
        if newest is None or moment > newest:
            newest = moment
    row.oldest, row.newest, row.unknown_age, row.pending = oldest, newest, unknown, pending


def totals(rows: Iterable[NamespaceRow]) -> PrefixStats:
    total = PrefixStats()
    for row in rows:
        total += PrefixStats(row.keys, row.bytes)
    return total


# -- single keys ----------------------------------------------------------------


def get_value(provider: StorageProvider, key: str, *, taint: Level | None = None) -> str:
    """One raw value; a memory row is refused above a set taint, audited above PUBLIC."""
    reads = RawReads(taint)
    if not reads.admit(key):
        raise RefusedError(
            f"{key}: a memory row above the taint {reads.taint_name} "
            f"(level {_level_name(key)}); the raw view honours --taint / TRIGGERFISH_TAINT",
            hint="unset the taint for the raw view (it is audited), or use `memory get`",
        )
    value = provider.get(key)
    if value is None:
        raise NotFoundError(f"key not found: {key}")
    reads.audit(provider, "kv get", key)
    return value


# -- the raw view of memory rows --------------------------------------------------


def _level_name(key: str) -> str:
    parts = split_key(key)
    return parts[1].name if parts is not None else "unknown"


#: Keys named in a raw read's audit record (the count is always complete).
AUDIT_KEYS = 200


class RawReads:
    """Memory rows the raw view (``kv get/list/export``) is about to show.

    The raw view is the operator's ``sqlite3``: it shows every row. But a
    taint set with ``--taint`` or ``TRIGGERFISH_TAINT`` is honoured, never
    silently ignored: memory rows above it are left out (``get`` refuses
    them). And memory rows above PUBLIC that it does show leave an audit
    record, like memory reads at a taint above PUBLIC: the keys and counts
    per level, never content.
    """

    def __init__(self, taint: Level | None) -> None:
        self.taint = taint
        self.keys: list[str] = []
        self.levels: dict[str, int] = {}
        self.count = 0

    @property
    def taint_name(self) -> str:
        return self.taint.name if self.taint is not None else "(none)"

    def admit(self, key: str) -> bool:
        """Whether ``key`` may be shown; note it when it is a memory row above PUBLIC."""
        if not key.startswith(MEMORY_PREFIX):
            return True
        if self.taint is not None and not may_name(key, self.taint):
            return False
        parts = split_key(key)
        if parts is None or parts[1] > Level.PUBLIC:
            name = parts[1].name if parts is not None else "unknown"
            self.levels[name] = self.levels.get(name, 0) + 1
            self.count += 1
            if len(self.keys) < AUDIT_KEYS:
                self.keys.append(key)
        return True

    def audit(self, provider: StorageProvider, command: str, target: str) -> None:
        """The audit record of the rows shown above PUBLIC (none: nothing to record)."""
        if not self.count:
            return
        details: dict[str, Any] = {"command": command, "keys": self.keys}
        if self.taint is not None:
            details["taint"] = self.taint.name
        if self.count > len(self.keys):
            details["more_keys"] = self.count - len(self.keys)
        audit.record(
            provider,
            "kv_raw_read",
            target=target,
            counts={"memory_rows": self.count, **dict(sorted(self.levels.items()))},
            details=details,
        )


def raw_rows(rows: Iterable[tuple[str, str]], reads: RawReads) -> Iterator[tuple[str, str]]:
    """``rows`` less the memory rows above a set taint, noting the others in ``reads``."""
    for key, value in rows:
        if reads.admit(key):
            yield key, value


def raw_keys(keys: Iterable[str], reads: RawReads) -> Iterator[str]:
    for key in keys:
        if reads.admit(key):
            yield key


def check_json(value: str, origin: str) -> None:
    """Refuse text that is not JSON (values are JSON unless written with --raw)."""
    try:
        json.loads(value)
    except ValueError as exc:
        raise InvalidDataError(
            f"{origin} is not valid JSON ({exc})", hint="pass --raw to store a bare string"
        ) from None


def refuse_memory_key(key: str, where: str = "") -> None:
    """No write-down through the raw view: ``memory:`` records are written by ``memory save``.

    A raw write could store a copy of a RESTRICTED memory under a PUBLIC key;
    ``memory save`` always writes at the taint.
    """
    if key.startswith(MEMORY_PREFIX):
        raise RefusedError(
            f"{where}{key}: memory records are not written through kv (it could copy a "
            "memory to a lower level)",
            hint="use `triggerfish-admin memory save --taint LEVEL`",
        )


def set_value(provider: StorageProvider, key: str, value: str, *, raw: bool) -> dict[str, Any]:
    if not key:
        raise InvalidDataError("the key is empty")
    refuse_memory_key(key)
    if not raw:
        check_json(value, "the value")
    previous = provider.get(key)
    provider.set(key, value)
    audit.record(
        provider,
        "kv_set",
        target=key,
        counts={"set": 1},
        details={"bytes": value_size(value), "replaced": previous is not None},
    )
    return {"key": key, "bytes": value_size(value), "replaced": previous is not None}


def delete_key(provider: StorageProvider, key: str, *, dry_run: bool) -> dict[str, Any]:
    value = provider.get(key)
    if value is None:
        raise NotFoundError(f"key not found: {key}")
    result = {
        "key": key,
        "bytes": value_size(value),
        "deleted": 0 if dry_run else 1,
        "dry_run": dry_run,
    }
    if not dry_run:
        if key.startswith(MEMORY_PREFIX):  # with its search index rows, in one transaction
            deleted = _memory_index(provider).hard_delete([(key, value)])
        else:
            deleted = provider.delete_if_unchanged([(key, value)])
        if deleted == 0:
            # Rewritten between our read and the delete: whoever wrote it wins.
            raise RefusedError(f"{key} changed while deleting it; nothing deleted", hint="retry")
        audit.record(provider, "kv_delete", target=key, counts={"deleted": 1})
    return result


# -- prefixes ------------------------------------------------------------------


@dataclass
class PrefixPlan:
    prefix: str
    keys: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.keys)

    def sample(self, size: int = 5) -> list[str]:
        return self.keys[:size]


def plan_prefix_delete(provider: StorageProvider, prefix: str) -> PrefixPlan:
    """The exact keys a prefix delete would remove (and only those are deleted)."""
    if not prefix:
        raise RefusedError(
            "refusing to delete with an empty prefix",
            hint="use `kv clear` to delete everything",
        )
    return PrefixPlan(prefix, list(provider.scan_keys(prefix)))


#: Rest between two delete transactions of a prefix delete (seconds) where no write
#: gate rests itself (not SQLite). On SQLite the gate rests after each freeze, 2.5
#: times as long as it paused the gateway, which sets no busy timeout: a rest of ours
#: on top only made the job slower (30 ms a transaction: 24 s of a 43 s delete of
#: the 1M-key bench store's messages), as for the sweep.
LIVE_PAUSE = 0.03


def _memory_index(provider: StorageProvider) -> Any:
    # lazy: memory.indexes adds 3 modules to `kv get --raw`
    from triggerfish_cli.memory.indexes import index_for

    return index_for(provider)


def delete_prefix(
    provider: StorageProvider,
    plan: PrefixPlan,
    *,
    on_batch: Any = None,
    pause: float | None = None,
) -> int:
    """Delete the keys of ``plan`` in short transactions, resting ``pause`` between them
    (None: the write gate's rest, or :data:`LIVE_PAUSE` where there is no gate)."""
    if pause is None:
        pause = 0.0 if provider.write_gate is not None else LIVE_PAUSE
    deleted = 0
    memories = [key for key in plan.keys if key.startswith(MEMORY_PREFIX)]
    others = [key for key in plan.keys if not key.startswith(MEMORY_PREFIX)] if memories else None
    try:
        deleted = provider.delete_many(
            plan.keys if others is None else others, pause=pause, on_batch=on_batch
        )
        if memories:  # memory records go with their search index rows (the gateway's too)
            values = provider.get_many(memories)
            deleted += _memory_index(provider).hard_delete(
                [(key, values[key]) for key in memories if key in values], on_batch=on_batch
            )
    finally:
        if deleted:
            audit.record(
                provider,
                "kv_delete_prefix",
                target=plan.prefix,
                counts={"planned": plan.count, "deleted": deleted},
            )
    return deleted


def clear_store(provider: StorageProvider) -> int:
    count = provider.count()
    provider.clear()
    audit.record(provider, "kv_clear", target=provider.describe(), counts={"deleted": count})
    return count
