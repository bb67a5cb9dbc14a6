"""Upkeep of the agent's memory: stats, reindex and purge, at a taint like every read.

Counts and drift cover only the levels the taint can see; reindex rewrites
only those levels' index rows (``--taint RESTRICTED`` for all of them); purge
hard-deletes soft-deleted records at those levels whose deletion
(``updatedAt``) is older than a duration, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from triggerfish_cli import audit
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import UsageError
from triggerfish_cli.memory.access import audit_read, check_agent, index_of, scan_visible
from triggerfish_cli.memory.keys import agent_prefix, visible_levels
from triggerfish_cli.memory.record import Malformed
from triggerfish_cli.serialization import to_iso, utc_now
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.timespec import parse_duration as parse

if TYPE_CHECKING:
    from triggerfish_cli.memory.index import Drift


@dataclass
class Stats:
    taint: Level
    #: (agent, level) -> {"live": n, "deleted": n, "shadowed": n}
    counts: dict[tuple[str, Level], dict[str, int]] = field(default_factory=dict)
    malformed: list[Malformed] = field(default_factory=list)
    drift: Drift | None = None
    index_kind: str = "scan"

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"agent": agent, "level": level.name, **counts}
            for (agent, level), counts in sorted(self.counts.items())
        ]

    def as_dict(self) -> dict[str, Any]:
        rows = self.rows()
        return {
            "taint": self.taint.name,
            "levels": [level.name for level in visible_levels(self.taint)],
            "rows": rows,
            "live": sum(row["live"] for row in rows),
            "deleted": sum(row["deleted"] for row in rows),
            "shadowed": sum(row["shadowed"] for row in rows),
            "malformed": len(self.malformed),
            "malformed_keys": [m.storage_key for m in self.malformed],
            "index": {"kind": self.index_kind, **(self.drift.as_dict() if self.drift else {})},
        }


def stats(provider: StorageProvider, *, taint: Level, agent: str | None = None) -> Stats:
    """Counts per agent and visible level, soft-deleted and malformed rows, index drift."""
    result = Stats(taint)
    live: dict[tuple[str, str], Level] = {}
    for item in scan_visible(provider, taint=taint, agent=agent):
        if isinstance(item, Malformed):
            result.malformed.append(item)
            continue
        counts = result.counts.setdefault(
            (item.agent, item.level), {"live": 0, "deleted": 0, "shadowed": 0}
        )
        if item.expired:
            counts["deleted"] += 1
            continue
        counts["live"] += 1
        top = live.get((item.agent, item.key))
        if top is None:
            live[(item.agent, item.key)] = item.level
        else:
            lower = min(top, item.level)
            result.counts[(item.agent, lower)]["shadowed"] += 1
            live[(item.agent, item.key)] = max(top, item.level)
    index = index_of(provider)
    result.index_kind = index.kind
    result.drift = index.check(visible_levels(taint), agent=agent)
    total = sum(c["live"] + c["deleted"] for c in result.counts.values())
    audit_read(provider, "stats", taint, total, agent=agent or "*")
    return result


def reindex(
    provider: StorageProvider,
    *,
    taint: Level,
    dry_run: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> Drift:
    """Rebuild the index rows of the visible levels from kv (all agents)."""
    index = index_of(provider)
    levels = visible_levels(taint)
    if dry_run:
        drift = index.check(levels, agent=None)
        audit_read(provider, "reindex_check", taint, drift.to_fix)
        return drift
    drift = index.repair(levels, on_batch=on_batch)
    audit.record(
        provider,
        "memory_reindex",
        target=index.kind,
        counts={"records": drift.records, "fixed": drift.fixed},
        details={"taint": taint.name, "levels": [level.name for level in levels]},
    )
    return drift


# -- purge -----------------------------------------------------------------------------


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``2w``, ``1y``, ``1d12h``, ``30m``, ``45s`` -> a timedelta."""
    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@dataclass
class PurgePlan:
    cutoff: datetime
    taint: Level
    agent: str | None
    items: list[tuple[str, str]] = field(default_factory=list)
    by_level: dict[str, int] = field(default_factory=dict)
    #: soft-deleted records whose updatedAt is not a time: never purged
    unknown_age: int = 0

    @property
    def count(self) -> int:
        return len(self.items)

    def as_dict(self, deleted: int, dry_run: bool) -> dict[str, Any]:
        return {
            "cutoff": to_iso(self.cutoff),
            "taint": self.taint.name,
            "agent": self.agent or "*",
            "matched": self.count,
            "by_level": dict(self.by_level),
            "unknown_age": self.unknown_age,
            "sample": [key for key, _ in self.items[:5]],
            "deleted": deleted,
            "dry_run": dry_run,
        }


def plan_purge(
    provider: StorageProvider,
    older_than: timedelta,
    *,
    taint: Level,
    agent: str | None,
    now: datetime | None = None,
) -> PurgePlan:
    """Soft-deleted records at visible levels whose deletion is older than ``older_than``."""
    if agent is not None:
        check_agent(agent)
    if older_than <= timedelta(0):
        raise UsageError(
            "--older-than must be more than zero, as for retention (0d would purge records "
            "soft-deleted a moment ago, before anyone could see or undo the delete)",
            hint="use at least 1h",
        )
    plan = PurgePlan((now or utc_now()) - older_than, taint, agent)
    for item in scan_visible(provider, taint=taint, agent=agent):
        if isinstance(item, Malformed) or not item.expired:
            continue
        moment = item.updated()
        if moment is None:
            plan.unknown_age += 1
        elif moment < plan.cutoff:
            plan.items.append((item.storage_key, item.value))
            plan.by_level[item.level.name] = plan.by_level.get(item.level.name, 0) + 1
    audit_read(provider, "purge_plan", taint, plan.count, agent=agent or "*")
    return plan


def purge(
    provider: StorageProvider,
    plan: PurgePlan,
    *,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Hard-delete exactly the planned records that are still unchanged."""
    deleted = 0
    try:
        deleted = index_of(provider).hard_delete(plan.items, on_batch=on_batch)
    finally:
        if deleted:
            audit.record(
                provider,
                "memory_purge",
                target=agent_prefix(plan.agent),
                counts={"planned": plan.count, "deleted": deleted},
                details={
                    "taint": plan.taint.name,
                    "agent": plan.agent or "*",
                    "cutoff": to_iso(plan.cutoff),
                },
            )
    return deleted
