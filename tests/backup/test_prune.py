"""The prune plan: restic's keep rules, the reasons, the guards (pure, no files)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triggerfish_cli.backup.dest import Entry
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.backup.prune import KeepPolicy, plan_prune
from triggerfish_cli.errors import UsageError
from triggerfish_cli.serialization import to_iso

START = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


def entry(moment: datetime, *, verified: bool = False, index: int = 0) -> Entry:
    created = to_iso(moment)
    manifest = Manifest("physical", created, "sqlite:x", "sqlite", "zstd", payload_sha256="a" * 64)
    marker = {"ok": True, "sha256": "a" * 64} if verified else None
    return Entry(
        f"triggerfish-{created.replace(':', '-')}-{index}.db.zst", 1, manifest, None, marker
    )


def kept(plan_entries: list[Entry], policy: KeepPolicy) -> dict[str, list[str]]:
    plan = plan_prune(plan_entries, policy)
    return {d.entry.created[:16]: d.reasons for d in plan.decisions if d.keep}


def test_an_empty_or_negative_policy_is_refused() -> None:
    with pytest.raises(UsageError):
        plan_prune([entry(START)], KeepPolicy())
    with pytest.raises(UsageError):
        plan_prune([entry(START)], KeepPolicy(last=-1, daily=2))


def test_daily_keeps_the_newest_of_each_day_and_says_so() -> None:
    entries = [entry(START + timedelta(hours=8 * i), index=i) for i in range(9)]  # 3 days x 3
    result = kept(entries, KeepPolicy(daily=2))
    assert result == {"2026-01-03T19:00": ["daily 1"], "2026-01-02T19:00": ["daily 2"]}


def test_rules_combine_and_each_reason_is_listed() -> None:
    entries = [entry(START + timedelta(days=i), index=i) for i in range(60)]
    result = kept(entries, KeepPolicy(last=2, weekly=2, monthly=2))
    newest = to_iso(START + timedelta(days=59))[:16]
    assert result[newest] == ["last 1", "weekly 1", "monthly 1"]
    assert (
        sum(1 for reasons in result.values() if any(r.startswith("monthly") for r in reasons)) == 2
    )
    assert len(result) <= 6


def test_the_newest_verified_backup_always_stays() -> None:
    entries = [entry(START, verified=True), entry(START + timedelta(days=1), index=1)]
    entries.append(entry(START + timedelta(days=2), index=2))
    result = kept(entries, KeepPolicy(last=1))
    assert result[to_iso(START)[:16]] == ["newest verified"]
    assert len(result) == 2


def test_unreadable_archives_are_never_pruned() -> None:
    broken = Entry("triggerfish-2020-01-01T00-00-00.000Z.db.zst", 5, None, "not a backup")
    plan = plan_prune([broken, entry(START)], KeepPolicy(last=1))
    assert [d.keep for d in plan.decisions] == [True, True]
    assert plan.decisions[-1].reasons == ["unreadable: never pruned"]


@settings(max_examples=60, deadline=None)
@given(
    hours=st.lists(st.integers(min_value=0, max_value=24 * 400), min_size=1, max_size=40),
    last=st.integers(0, 5),
    daily=st.integers(0, 5),
    weekly=st.integers(0, 5),
    monthly=st.integers(0, 5),
    verified=st.integers(0, 39),
)
def test_plan_properties(
    hours: list[int], last: int, daily: int, weekly: int, monthly: int, verified: int
) -> None:
    policy = KeepPolicy(last, daily, weekly, monthly)
    if not (last or daily or weekly or monthly):
        return
    entries = [
        entry(START + timedelta(hours=h), verified=i == verified, index=i)
        for i, h in enumerate(hours)
    ]
    plan = plan_prune(entries, policy)
    assert len(plan.decisions) == len(entries)
    assert all(d.keep == bool(d.reasons) for d in plan.decisions)
    kept_count = sum(1 for d in plan.decisions if d.keep)
    assert kept_count <= last + daily + weekly + monthly + 1
    newest = max(entries, key=lambda e: (e.created, e.name))
    assert next(d for d in plan.decisions if d.entry is newest).keep  # every rule keeps it
    if verified < len(entries):
        verified_entries = [d for d in plan.decisions if d.entry.verified == "yes"]
        assert all(d.keep for d in verified_entries)
