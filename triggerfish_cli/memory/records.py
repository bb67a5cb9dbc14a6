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

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triggerfish_cli.classification import Level
from triggerfish_cli.errors import NotFoundError, RefusedError, UsageError
from triggerfish_cli.memory.access import Lookup, audit_read, check_agent, index_of, lookup
from triggerfish_cli.memory.changes import (
    DeleteResult,
    SaveResult,
    check_deletable,
    delete_memory,
    save_memory,
)
from triggerfish_cli.memory.index import SearchRequest
from triggerfish_cli.memory.keys import PREFIX, split_key, storage_key
from triggerfish_cli.memory.listing import Listing, list_memories
from triggerfish_cli.memory.record import MemoryRecord, disagreement, parse_record
from triggerfish_cli.storage.provider import StorageProvider

if TYPE_CHECKING:
    from triggerfish_cli.memory.index import SearchResult

#: The memory API, one import for its callers (the commands, migrate, backup, tests).
__all__ = [
    "DeleteResult",
    "Listing",
    "Lookup",
    "SaveResult",
    "Version",
    "check_deletable",
    "delete_memory",
    "get_memory",
    "history",
    "list_memories",
    "lookup",
    "refuse_write_down",
    "save_memory",
    "search",
]


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
