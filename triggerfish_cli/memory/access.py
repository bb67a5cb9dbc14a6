"""What every memory operation shares: the agent check, the audit of reads, one key's
versions, the rows visible at a taint, and the store's search index."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from triggerfish_cli import audit
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import UsageError
from triggerfish_cli.memory.indexes import index_for
from triggerfish_cli.memory.keys import agent_prefix, may_name, storage_key, visible_levels
from triggerfish_cli.memory.record import Malformed, MemoryRecord, parse_record
from triggerfish_cli.serialization import fast_loads
from triggerfish_cli.storage.provider import StorageProvider

if TYPE_CHECKING:
    from triggerfish_cli.memory.index import MemoryIndex


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


def scan_visible(
    provider: StorageProvider, *, taint: Level, agent: str | None
) -> Iterator[MemoryRecord | Malformed]:
    """Parsed rows at visible levels; rows above the taint are never parsed."""
    loads = fast_loads()
    for skey, value in provider.scan(agent_prefix(agent), batch_size=2000):
        if not may_name(skey, taint):
            continue
        yield parse_record(skey, value, loads)



def index_of(provider: StorageProvider) -> MemoryIndex:

    return index_for(provider)


