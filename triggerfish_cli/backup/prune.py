"""``backup prune``: which backups a keep policy keeps, and why (a pure plan).

The rules are restic's: ``keep_last`` keeps the N newest; ``keep_daily``
keeps the newest backup of each of the D most recent days that have one
(``weekly``: ISO weeks, ``monthly``: calendar months), all in UTC. A backup
kept by no rule goes, except:

- the newest verified backup is always kept (``newest verified``);
- archives whose manifest cannot be read are never touched (``unreadable``):
  prune deletes only what it understands.

The policy applies to one store's backups (backup/stores.py): the caller
passes them alone, or :func:`plan_prune_by_store` applies it to each
store's backups separately, so one store's backups never push out another's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from triggerfish_cli.backup.dest import Entry
from triggerfish_cli.backup.stores import groups
from triggerfish_cli.errors import UsageError
from triggerfish_cli.serialization import parse_iso


@dataclass(frozen=True)
class KeepPolicy:
    last: int = 0
    daily: int = 0
    weekly: int = 0
    monthly: int = 0

    def check(self) -> None:
        if min(self.last, self.daily, self.weekly, self.monthly) < 0:
            raise UsageError("keep counts cannot be negative")
        if not (self.last or self.daily or self.weekly or self.monthly):
            raise UsageError(
                "an empty policy would delete every backup: refused",
                hint="give at least one of --keep-last, --keep-daily, --keep-weekly, "
                "--keep-monthly",
            )


@dataclass
class Decision:
    entry: Entry
    keep: bool
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.entry.as_dict(),
            "action": "keep" if self.keep else "delete",
            "reasons": self.reasons,
        }


@dataclass
class PrunePlan:
    decisions: list[Decision]

    @property
    def deletes(self) -> list[Decision]:
        return [decision for decision in self.decisions if not decision.keep]

    def as_dict(self) -> dict[str, Any]:
        return {
            "keep": sum(1 for decision in self.decisions if decision.keep),
            "delete": len(self.deletes),
            "backups": [decision.as_dict() for decision in self.decisions],
        }


_BUCKETS: dict[str, Callable[[datetime], tuple[int, ...]]] = {
    "daily": lambda moment: (moment.year, moment.month, moment.day),
    "weekly": lambda moment: tuple(moment.isocalendar()[:2]),
    "monthly": lambda moment: (moment.year, moment.month),
}


def plan_prune(entries: Sequence[Entry], policy: KeepPolicy) -> PrunePlan:
    """Newest first: each backup with the rules that keep it (none: it goes)."""
    policy.check()
    readable: list[tuple[datetime, Entry]] = []
    decisions: list[Decision] = []
    for entry in entries:
        moment = parse_iso(entry.created) if entry.manifest else None
        if moment is None:
            decisions.append(Decision(entry, True, ["unreadable: never pruned"]))
        else:
            readable.append((moment, entry))
    readable.sort(key=lambda pair: (pair[0], pair[1].name), reverse=True)
    planned = [Decision(entry, False) for _moment, entry in readable]
    for index, decision in enumerate(planned[: policy.last]):
        decision.reasons.append(f"last {index + 1}")
    for rule, count in (
        ("daily", policy.daily),
        ("weekly", policy.weekly),
        ("monthly", policy.monthly),
    ):
        seen: list[tuple[int, ...]] = []
        for (moment, _entry), decision in zip(readable, planned, strict=True):
            if len(seen) >= count:
                break
            bucket = _BUCKETS[rule](moment)
            if bucket in seen:
                continue
            seen.append(bucket)
            decision.reasons.append(f"{rule} {len(seen)}")
    for decision in planned:
        if decision.entry.verified == "yes":
            decision.reasons.append("newest verified")
            break
    for decision in planned:
        decision.keep = bool(decision.reasons)
    return PrunePlan(planned + decisions)


def plan_prune_by_store(entries: Sequence[Entry], policy: KeepPolicy) -> PrunePlan:
    """:func:`plan_prune` applied to each store's backups separately (backup_stores.groups)."""
    readable = [entry for entry in entries if entry.manifest is not None]
    by_manifest = {id(entry.manifest): entry for entry in readable}
    decisions: list[Decision] = []
    for manifests in groups(entry.manifest for entry in readable if entry.manifest).values():
        decisions.extend(plan_prune([by_manifest[id(m)] for m in manifests], policy).decisions)
    unreadable = [entry for entry in entries if entry.manifest is None]
    decisions.extend(plan_prune(unreadable, policy).decisions)
    return PrunePlan(decisions)
