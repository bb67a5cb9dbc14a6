"""The agent's persistent memory, read and written exactly as a session at a taint would.

Records live in kv under ``memory:<agentId>:<LEVEL>:<key>`` (the memory key
may hold ``:``, so a storage key splits on its first three colons only). kv
is the source of truth; the search index (``memory_index``) is derived from
it and may lag behind it.

The rules (SPEC.md, persistent memory), enforced here for every backend:

- A read at taint ``T`` sees levels ``L`` with ``can_flow_to(L, T)``; nothing
  above ``T`` is returned, counted or named, not even as a malformed record.
- Shadowing: for one agent and key, the visible version is the highest
  visible level holding a live record (well-formed, not soft-deleted).
- save writes at exactly ``T`` (keeps ``createdAt``, revives a soft-deleted
  key); delete soft-deletes at exactly ``T``. Nothing is ever copied or moved
  to another level.
- A record that is not a well-formed memory (see :func:`parse_record`) is
  reported by key and skipped: it is never returned and never shadows.

Every mutation, and every read at a taint above PUBLIC, writes an audit
record without memory content.
"""

from __future__ import annotations

import heapq
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

from triggerfish_cli import audit
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import InvalidDataError, NotFoundError, RefusedError, UsageError
from triggerfish_cli.memory.keys import (
    PREFIX,
    agent_prefix,
    may_name,
    split_key,
    storage_key,
    visible_levels,
)
from triggerfish_cli.memory.record import (
    Malformed,
    MemoryRecord,
    disagreement,
    parse_record,
)
from triggerfish_cli.serialization import dumps, fast_loads, parse_iso, to_iso, utc_now
from triggerfish_cli.storage.provider import StorageProvider

if TYPE_CHECKING:
    from triggerfish_cli.memory.index import MemoryIndex, SearchResult

#: ``sourceSessionId`` of records the admin tool saves: there is no session.
ADMIN_SOURCE = "triggerfish-admin"


def refuse_write_down(rows: Iterable[tuple[str, str]], target: StorageProvider, where: str) -> None:
    """Refuse (exit 4, naming the rows, never content) memory rows that would write down.

    For the paths that merge rows into a store that may hold memories
    (``migrate --merge``, ``backup restore --merge``): a row whose record
    disagrees with its key (:func:`disagreement`), or a copy of the content
    of a live version of the same agent and key at a higher level in the
    target (a higher memory re-saved lower).
    """
    bad: list[str] = []
    incoming: list[tuple[str, str, str, Level, str]] = []
    for skey, value in rows:
        if not skey.startswith(PREFIX):
            continue
        reason = disagreement(skey, value)
        if reason is not None:
            bad.append(f"{skey} ({reason})")
            continue
        record = parse_record(skey, value)
        if isinstance(record, MemoryRecord) and record.level < Level.RESTRICTED:
            incoming.append((skey, record.agent, record.key, record.level, record.content))
    for start in range(0, len(incoming), 500):
        chunk = incoming[start : start + 500]
        higher = {
            storage_key(agent, level, key): (skey, content)
            for skey, agent, key, low, content in chunk
            for level in Level
            if level > low
        }
        for hkey, value in target.get_many(higher).items():
            skey, content = higher[hkey]
            record = parse_record(hkey, value)
            if isinstance(record, MemoryRecord) and record.live and record.content == content:
                bad.append(f"{skey} (a copy of the {record.level.name} version in the target)")
    if bad:
        raise RefusedError(
            f"{where}: refusing memory rows that would write a memory down: "
            f"{', '.join(sorted(set(bad))[:5])}"
            + (f" and {len(set(bad)) - 5} more" if len(set(bad)) > 5 else "")
            + "; nothing was written",
            hint="memories are saved only by `memory save`, at the taint",
        )


def check_agent(agent: str) -> None:
    if not agent or ":" in agent:
        raise UsageError(f"invalid agent id {agent!r}: it must be non-empty and hold no ':'")


def audit_read(
    provider: StorageProvider, action: str, taint: Level, results: int, **details: Any
) -> None:
    """Reads above PUBLIC leave an audit record (never memory content)."""
    if taint > Level.PUBLIC:
        audit.record(
            provider,
            f"memory_{action}",
            counts={"results": results},
            details={"taint": taint.name, **{k: v for k, v in details.items() if v is not None}},
        )


# -- reading ---------------------------------------------------------------------------


@dataclass
class Lookup:
    """What ``get`` found for one agent and key at a taint."""

    record: MemoryRecord | None
    shadowed: list[MemoryRecord] = field(default_factory=list)
    deleted: list[MemoryRecord] = field(default_factory=list)
    malformed: list[Malformed] = field(default_factory=list)


def lookup(provider: StorageProvider, key: str, *, taint: Level, agent: str) -> Lookup:
    """Every visible version of one key, the one get returns first."""
    levels = visible_levels(taint)
    keys = [storage_key(agent, level, key) for level in reversed(levels)]
    values = provider.get_many(keys)
    found = Lookup(None)
    for skey in keys:
        value = values.get(skey)
        if value is None:
            continue
        parsed = parse_record(skey, value)
        if isinstance(parsed, Malformed):
            found.malformed.append(parsed)
        elif parsed.expired:
            found.deleted.append(parsed)
        elif found.record is None:
            found.record = parsed
        else:
            found.shadowed.append(parsed)
    return found


def get_memory(provider: StorageProvider, key: str, *, taint: Level, agent: str) -> Lookup:
    """The highest visible live version; NotFoundError (exit 3) when there is none."""
    check_agent(agent)
    found = lookup(provider, key, taint=taint, agent=agent)
    audit_read(provider, "get", taint, int(found.record is not None), agent=agent, key=key)
    if found.record is None:
        hint = "it was soft-deleted; see `memory history`" if found.deleted else None
        raise NotFoundError(
            f"no memory {key!r} for agent {agent} visible at {taint.name}", hint=hint
        )
    return found


@dataclass
class Listing:
    records: list[MemoryRecord] = field(default_factory=list)
    malformed: list[Malformed] = field(default_factory=list)


def scan_visible(
    provider: StorageProvider, *, taint: Level, agent: str | None
) -> Iterator[MemoryRecord | Malformed]:
    """Parsed rows at visible levels; rows above the taint are never parsed."""
    loads = fast_loads()
    for skey, value in provider.scan(agent_prefix(agent), batch_size=2000):
        if not may_name(skey, taint):
            continue
        yield parse_record(skey, value, loads)


def list_memories(
    provider: StorageProvider,
    *,
    taint: Level,
    agent: str | None,
    tag: str | None = None,
    limit: int = 0,
) -> Listing:
    """Visible memories with shadowing, by agent then key; ``tag`` filters the shown version."""
    if agent is not None:
        check_agent(agent)
    listing = _first_of_agent(provider, taint=taint, agent=agent, tag=tag, limit=limit)
    if listing is None:
        listing = _read_all(provider, taint=taint, agent=agent, tag=tag, limit=limit)
    audit_read(provider, "list", taint, len(listing.records), agent=agent or "*", tag=tag)
    return listing


def _first_of_agent(
    provider: StorageProvider, *, taint: Level, agent: str | None, tag: str | None, limit: int
) -> Listing | None:
    """The first ``limit`` memories of one agent, reading no further than needed.

    A merge, by key, of the agent's range at each visible level (each range
    is in key order), with the shadowing of :func:`_read_all`: for each key
    the highest visible live well-formed version. It stops at the first row
    past the key of the ``limit``-th memory, so the malformed records it
    names are those up to that key (sorted by storage key). None when there
    is no limit, no single agent, or when the ranges run out before the
    limit: then the caller reads everything (and names every malformed
    record, as without a limit).
    """
    if not limit or agent is None:
        return None
    loads = fast_loads()

    def level_range(level: Level) -> Generator[tuple[str, str, str], None, None]:
        prefix = storage_key(agent, level, "")
        cut = len(prefix)
        # limit + 1 rows: the row after the last memory shown ends the merge
        # without a second query.
        for skey, value in provider.scan(prefix, batch_size=min(limit + 1, 2000)):
            yield skey[cut:], skey, value

    levels = visible_levels(taint)
    listing = Listing()
    if len(levels) == 1:  # one range, one version per key: no merge, no shadowing
        prefix = storage_key(agent, levels[0], "")
        records, malformed = listing.records, listing.malformed
        # A first page of limit rows (all shown unless some are expired, malformed or
        # without the tag) in one query; then the rest of the range, if needed.

        def fill(rows: Iterable[tuple[str, str]]) -> bool:
            """Add the shown ones of ``rows``; whether the limit is reached."""
            for skey, value in rows:
                item = parse_record(skey, value, loads)
                if isinstance(item, Malformed):
                    malformed.append(item)
                elif not item.expired and (tag is None or tag in item.tags):
                    records.append(item)
                    if len(records) == limit:
                        return True
            return False

        page = provider.head(prefix, limit)
        if len(page) < limit:
            return None  # the range runs out before the limit
        if fill(page):
            return listing
        rest = provider.scan(prefix, start_after=page[-1][0], batch_size=min(limit, 2000))
        try:  # some of the page are not shown: read on
            return listing if fill(rest) else None
        finally:
            rest.close()  # type: ignore[attr-defined]
    ranges = [level_range(level) for level in levels]
    merged = heapq.merge(*ranges, key=itemgetter(0))
    current: str | None = None
    best: MemoryRecord | None = None
    try:
        for key, skey, value in merged:
            if key != current:
                if best is not None and (tag is None or tag in best.tags):
                    listing.records.append(best)
                    if len(listing.records) == limit:
                        listing.malformed.sort(key=attrgetter("storage_key"))
                        return listing
                current, best = key, None
            item = parse_record(skey, value, loads)
            if isinstance(item, Malformed):
                listing.malformed.append(item)
            elif not item.expired and (best is None or item.level > best.level):
                best = item
    finally:
        for level_rows in ranges:
            level_rows.close()
    return None  # the ranges ran out before the limit


def _read_all(
    provider: StorageProvider, *, taint: Level, agent: str | None, tag: str | None, limit: int
) -> Listing:
    best: dict[tuple[str, str], MemoryRecord] = {}
    listing = Listing()
    for item in scan_visible(provider, taint=taint, agent=agent):
        if isinstance(item, Malformed):
            listing.malformed.append(item)
            continue
        if item.expired:
            continue
        seen = best.get((item.agent, item.key))
        if seen is None or item.level > seen.level:
            best[(item.agent, item.key)] = item
    records = [best[pair] for pair in sorted(best)]
    if tag is not None:
        records = [record for record in records if tag in record.tags]
    listing.records = records[:limit] if limit else records
    return listing


@dataclass(frozen=True)
class Version:
    """One stored version of a key, for ``history``."""

    status: str  # current | shadowed | deleted | malformed
    storage_key: str
    record: MemoryRecord | None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record's fields (None for a malformed one) with status and reason."""
        parts = split_key(self.storage_key)
        assert parts is not None  # history only holds keys it built
        if self.record is not None:
            row = self.record.as_dict()
        else:
            row = dict.fromkeys(_RECORD_FIELDS)
            row.update(agent=parts[0], key=parts[2], level=parts[1].name)
            row["storage_key"] = self.storage_key
        return {
            "agent": row.pop("agent"),
            "level": row.pop("level"),
            "status": self.status,
            **row,
            "reason": self.reason,
        }


_RECORD_FIELDS = (
    "agent", "key", "level", "content", "tags", "created_at", "updated_at", "expired",
    "source_session", "lineage", "storage_key",
)  # fmt: skip


def history(
    provider: StorageProvider, key: str, *, taint: Level, agent: str | None
) -> list[Version]:
    """Every version of ``key`` at visible levels, soft-deleted ones included (audit)."""
    if agent is not None:
        check_agent(agent)
        agents = [agent]
    else:
        agents = sorted(
            {
                parts[0]
                for skey in provider.scan_keys(PREFIX)
                if (parts := split_key(skey)) is not None and parts[2] == key
            }
        )
    versions: list[Version] = []
    for name in agents:
        found = lookup(provider, key, taint=taint, agent=name)
        if found.record is not None:
            versions.append(Version("current", found.record.storage_key, found.record))
        versions += [Version("shadowed", r.storage_key, r) for r in found.shadowed]
        versions += [Version("deleted", r.storage_key, r) for r in found.deleted]
        versions += [Version("malformed", m.storage_key, None, m.reason) for m in found.malformed]
    versions.sort(key=_version_order)
    audit_read(provider, "history", taint, len(versions), agent=agent or "*", key=key)
    return versions


def _version_order(version: Version) -> tuple[str, int]:
    parts = split_key(version.storage_key)
    return (parts[0], -int(parts[1])) if parts else ("", 0)


# -- writing ---------------------------------------------------------------------------


def index_of(provider: StorageProvider) -> MemoryIndex:
    from triggerfish_cli.memory.indexes import index_for

    return index_for(provider)


@dataclass(frozen=True)
class SaveResult:
    record: MemoryRecord
    status: str  # created | updated | revived | replaced (a malformed value)

    def as_dict(self) -> dict[str, Any]:
        return {
            "agent": self.record.agent,
            "key": self.record.key,
            "level": self.record.level.name,
            "status": self.status,
            "created_at": self.record.created_at,
            "updated_at": self.record.updated_at,
            "storage_key": self.record.storage_key,
        }


def clean_tags(tags: Iterable[str]) -> list[str]:
    """Split on commas, trim, drop empties and repeats; order kept."""
    out: list[str] = []
    for item in tags:
        for tag in item.split(","):
            tag = tag.strip()
            if tag and tag not in out:
                out.append(tag)
    return out


def new_record_value(
    agent: str,
    level: Level,
    key: str,
    content: str,
    tags: list[str],
    *,
    created_at: str,
    updated_at: str,
) -> str:
    """A record exactly as the gateway serialises one (field order of StoredMemoryRecord)."""
    return dumps(
        {
            "key": key,
            "agentId": agent,
            "classification": level.name,
            "content": content,
            "tags": tags,
            "createdAt": created_at,
            "updatedAt": updated_at,
            "expired": False,
            "sourceSessionId": ADMIN_SOURCE,
        }
    )


def save_memory(
    provider: StorageProvider,
    key: str,
    content: str,
    tags: Iterable[str] = (),
    *,
    taint: Level,
    agent: str,
    now: datetime | None = None,
) -> SaveResult:
    """Save at exactly the taint: the level is never chosen otherwise."""
    check_agent(agent)
    if not key:
        raise UsageError("the memory key is empty")
    if not content:
        raise UsageError("the content is empty")
    tag_list = clean_tags(tags)
    stamp = to_iso(now or utc_now())
    skey = storage_key(agent, taint, key)
    outcome: dict[str, str] = {}

    def update(old: str | None) -> str:
        created = stamp
        if old is None:
            outcome["status"] = "created"
        else:
            previous = parse_record(skey, old)
            if isinstance(previous, Malformed):
                outcome["status"] = "replaced"
            else:
                outcome["status"] = "revived" if previous.expired else "updated"
                moment = parse_iso(previous.created_at)
                created = to_iso(moment) if moment else stamp
        return new_record_value(
            agent, taint, key, content, tag_list, created_at=created, updated_at=stamp
        )

    _old, value = index_of(provider).write(skey, update)
    record = parse_record(skey, value)
    assert isinstance(record, MemoryRecord)
    audit.record(
        provider,
        "memory_save",
        target=skey,
        counts={"saved": 1},
        details={"taint": taint.name, "agent": agent, "key": key, "status": outcome["status"]},
    )
    return SaveResult(record, outcome["status"])


@dataclass(frozen=True)
class DeleteResult:
    storage_key: str
    agent: str
    key: str
    level: Level
    deleted: bool
    dry_run: bool
    updated_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "key": self.key,
            "level": self.level.name,
            "deleted": self.deleted,
            "dry_run": self.dry_run,
            "updated_at": self.updated_at,
            "storage_key": self.storage_key,
        }


def check_deletable(
    provider: StorageProvider, key: str, *, taint: Level, agent: str
) -> MemoryRecord:
    """The live record ``delete`` would soft-delete at exactly ``taint``, or why not."""
    check_agent(agent)
    found = lookup(provider, key, taint=taint, agent=agent)
    skey = storage_key(agent, taint, key)
    if any(m.storage_key == skey for m in found.malformed):
        raise InvalidDataError(f"{skey}: malformed memory record; not changed")
    if found.record is not None and found.record.level == taint:
        return found.record
    lower = found.record or (found.shadowed[0] if found.shadowed else None)
    if lower is not None:
        raise RefusedError(
            f"memory {key!r} of agent {agent} is held at {lower.level.name}, "
            f"not at {taint.name}; a delete acts at exactly the taint's level",
            hint=f"use --taint {lower.level.name}",
        )
    hint = "it is already soft-deleted" if any(d.level == taint for d in found.deleted) else None
    raise NotFoundError(f"no memory {key!r} for agent {agent} at {taint.name}", hint=hint)


def delete_memory(
    provider: StorageProvider,
    key: str,
    *,
    taint: Level,
    agent: str,
    dry_run: bool = False,
    now: datetime | None = None,
) -> DeleteResult:
    """Soft delete at exactly the taint: ``expired: true``, ``updatedAt`` now; kept in kv."""
    record = check_deletable(provider, key, taint=taint, agent=agent)
    if dry_run:
        audit_read(provider, "delete_check", taint, 1, agent=agent, key=key)
        return DeleteResult(record.storage_key, agent, key, taint, False, True)
    stamp = to_iso(now or utc_now())

    def update(old: str | None) -> str:
        current = parse_record(record.storage_key, old) if old is not None else None
        if not isinstance(current, MemoryRecord) or current.expired:
            raise RefusedError(f"{record.storage_key} changed while deleting it", hint="retry")
        return dumps({**current.document, "expired": True, "updatedAt": stamp})

    index_of(provider).write(record.storage_key, update)
    audit.record(
        provider,
        "memory_delete",
        target=record.storage_key,
        counts={"deleted": 1},
        details={"taint": taint.name, "agent": agent, "key": key},
    )
    return DeleteResult(record.storage_key, agent, key, taint, True, False, stamp)


# -- search ----------------------------------------------------------------------------------


def search(
    provider: StorageProvider,
    text: str,
    *,
    taint: Level,
    agent: str | None,
    raw: bool = False,
    tag: str | None = None,
    limit: int = 10,
) -> SearchResult:
    """Full-text search at a taint; hits agree with get (see ``memory_index``)."""
    from triggerfish_cli.memory.index import SearchRequest

    if agent is not None:
        check_agent(agent)
    if limit < 1:
        raise UsageError("--limit must be at least 1")
    request = SearchRequest(text, raw=raw, taint=taint, agent=agent, tag=tag, limit=limit)
    result = index_of(provider).search(request)
    audit_read(
        provider,
        "search",
        taint,
        len(result.hits),
        agent=agent or "*",
        query=text,
        raw=raw,
    )
    return result
