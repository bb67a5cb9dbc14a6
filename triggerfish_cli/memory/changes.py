"""The two changes a session can make: save at exactly the taint, soft delete at it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from triggerfish_cli import audit
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import InvalidDataError, NotFoundError, RefusedError, UsageError
from triggerfish_cli.memory.access import audit_read, check_agent, index_of, lookup
from triggerfish_cli.memory.keys import storage_key
from triggerfish_cli.memory.record import Malformed, MemoryRecord, parse_record
from triggerfish_cli.serialization import dumps, parse_iso, to_iso, utc_now
from triggerfish_cli.storage.provider import StorageProvider

#: ``sourceSessionId`` of records the admin tool saves: there is no session.
ADMIN_SOURCE = "triggerfish-admin"


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


