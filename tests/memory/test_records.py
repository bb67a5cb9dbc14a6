"""The memory core: records, visibility and shadowing, save/delete, history, stats, purge."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.memories import (
    CRON,
    MAIN,
    SLACK,
    STALE_KEY,
    current_rows,
    mkey,
    write_memory_store,
)
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import InvalidDataError, NotFoundError, RefusedError, UsageError
from triggerfish_cli.memory import keys as memory_keys
from triggerfish_cli.memory import records as memory
from triggerfish_cli.memory import upkeep as memory_upkeep
from triggerfish_cli.memory.keys import split_key
from triggerfish_cli.memory.record import Malformed, MemoryRecord, parse_record
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

PUB, INT, CONF, RES = Level.PUBLIC, Level.INTERNAL, Level.CONFIDENTIAL, Level.RESTRICTED
NOW = datetime(2026, 4, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(params=["sqlite", "memory"])
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStorage]:
    """The memory-rich gateway store on SQLite (with its index) and in a dict (scan)."""
    if request.param == "sqlite":
        store: BaseStorage = SqliteStorage(write_memory_store(tmp_path / "gw.db"))
    else:
        store = MemoryStorage(current_rows())
    yield store
    store.close()


def audits(provider: BaseStorage) -> list[dict[str, object]]:
    return [json.loads(value) for _key, value in provider.scan("audit:")]


def memories(provider: BaseStorage) -> dict[str, str]:
    return dict(provider.scan("memory:"))


# -- keys and records ---------------------------------------------------------------------


def test_storage_keys_split_on_the_first_three_colons() -> None:
    assert split_key("memory:main-session:INTERNAL:trigger:instructions") == (
        MAIN,
        INT,
        "trigger:instructions",
    )
    assert split_key("memory:a:PUBLIC:") == ("a", PUB, "")
    for bad in (
        "memory:a:SECRET:x",
        "memory:a:public:x",
        "memory::PUBLIC:x",
        "memory:a",
        "m:a:P:x",
    ):
        assert split_key(bad) is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('"a string"', "not a JSON object"),
        ('{"content":1,"tags":[],"expired":false,"classification":"PUBLIC"}', "content"),
        ('{"content":"x","tags":[],"expired":"no","classification":"PUBLIC"}', "expired"),
        ('{"content":"x","tags":"a","expired":false,"classification":"PUBLIC"}', "tags"),
        ('{"content":"x","tags":[1],"expired":false,"classification":"PUBLIC"}', "tags"),
        ('{"content":"x","tags":[],"expired":false,"classification":"INTERNAL"}', "classification"),
        ('{"content":"x","tags":[],"expired":false,"classification":"PUBLIC","n":NaN}', "JSON"),
    ],
)
def test_malformed_records_are_reported_not_raised(value: str, reason: str) -> None:
    parsed = parse_record("memory:a:PUBLIC:k", value)
    assert isinstance(parsed, Malformed) and reason in parsed.reason


def test_a_well_formed_record_keeps_everything() -> None:
    value = current_rows()[mkey(MAIN, "INTERNAL", "trigger:instructions")]
    parsed = parse_record(STALE_KEY, value)
    assert isinstance(parsed, MemoryRecord)
    assert (parsed.agent, parsed.level, parsed.key) == (MAIN, INT, "trigger:instructions")
    assert parsed.storage_key == STALE_KEY and parsed.value == value and parsed.live


# -- get and shadowing --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("taint", "content"),
    [
        (PUB, "User's name is Alice Chen"),
        (INT, "Alice Chen runs the acme-stack at work"),
        (CONF, "Alice's legal name is Alice Marie Chen"),
        (RES, "Alice's passport number is X1234567"),
    ],
)
def test_get_returns_the_highest_visible_version(
    provider: BaseStorage, taint: Level, content: str
) -> None:
    found = memory.get_memory(provider, "user-name", taint=taint, agent=MAIN)
    assert found.record is not None and found.record.content == content
    assert found.record.level == taint
    assert [r.level for r in found.shadowed] == sorted(memory_keys.visible_levels(taint))[::-1][1:]


def test_a_soft_deleted_version_does_not_shadow(provider: BaseStorage) -> None:
    found = memory.get_memory(provider, "project-plan", taint=CONF, agent=MAIN)
    assert found.record is not None and found.record.level == INT
    assert [r.level for r in found.deleted] == [CONF]


def test_nothing_above_the_taint_is_returned_or_named(provider: BaseStorage) -> None:
    with pytest.raises(NotFoundError) as public:
        memory.get_memory(provider, "merger", taint=PUB, agent=MAIN)
    with pytest.raises(NotFoundError) as absent:
        memory.get_memory(provider, "no-such-key", taint=PUB, agent=MAIN)
    assert str(public.value).replace("merger", "X") == str(absent.value).replace("no-such-key", "X")
    assert "RESTRICTED" not in str(public.value)
    found = memory.get_memory(provider, "merger", taint=RES, agent=MAIN)
    assert found.record is not None and found.record.content.startswith("Merger with Globex")


def test_agents_are_separate(provider: BaseStorage) -> None:
    found = memory.get_memory(provider, "user-name", taint=RES, agent=SLACK)
    assert found.record is not None and found.record.content == "Slack handle is alice.c"
    with pytest.raises(NotFoundError):
        memory.get_memory(provider, "user-name", taint=PUB, agent=SLACK)
    with pytest.raises(UsageError):
        memory.get_memory(provider, "user-name", taint=PUB, agent="bad:agent")


def test_a_record_claiming_another_level_is_shown_to_nobody(provider: BaseStorage) -> None:
    for taint in Level:
        with pytest.raises(NotFoundError):
            memory.get_memory(provider, "liar", taint=taint, agent=MAIN)
    found = memory.lookup(provider, "liar", taint=PUB, agent=MAIN)
    assert [m.storage_key for m in found.malformed] == [mkey(MAIN, "PUBLIC", "liar")]


# -- list and history ---------------------------------------------------------------------


def test_list_applies_shadowing_and_reports_only_visible_malformed(provider: BaseStorage) -> None:
    public = memory.list_memories(provider, taint=PUB, agent=MAIN)
    assert [(r.key, r.level) for r in public.records] == [("café", PUB), ("user-name", PUB)]
    assert [m.storage_key for m in public.malformed] == [
        mkey(MAIN, "PUBLIC", "broken"),
        mkey(MAIN, "PUBLIC", "liar"),
    ]
    everything = memory.list_memories(provider, taint=RES, agent=None)
    assert [(r.agent, r.key, r.level) for r in everything.records] == [
        (MAIN, "café", PUB),
        (MAIN, "merger", RES),
        (MAIN, "project-plan", INT),
        (MAIN, "trigger:instructions", INT),
        (MAIN, "user-name", RES),
        (SLACK, "user-name", INT),
        (CRON, "digest", PUB),
    ]
    assert mkey(MAIN, "RESTRICTED", "broken-secret") in [
        m.storage_key for m in everything.malformed
    ]


def test_tag_filter_applies_to_the_visible_version(provider: BaseStorage) -> None:
    internal = memory.list_memories(provider, taint=INT, agent=MAIN, tag="work")
    assert [(r.key, r.level) for r in internal.records] == [
        ("project-plan", INT),
        ("user-name", INT),
    ]
    # At CONFIDENTIAL user-name's visible version has no "work" tag: the INTERNAL one
    # that has it must not show through.
    confidential = memory.list_memories(provider, taint=CONF, agent=MAIN, tag="work")
    assert [(r.key, r.level) for r in confidential.records] == [("project-plan", INT)]


def test_history_lists_visible_versions_including_deleted(provider: BaseStorage) -> None:
    versions = memory.history(provider, "project-plan", taint=CONF, agent=MAIN)
    assert [(v.status, v.record.level if v.record else None) for v in versions] == [
        ("deleted", CONF),
        ("current", INT),
    ]
    names = memory.history(provider, "user-name", taint=INT, agent=None)
    assert [(v.as_dict()["agent"], v.as_dict()["level"], v.status) for v in names] == [
        (MAIN, "INTERNAL", "current"),
        (MAIN, "PUBLIC", "shadowed"),
        (SLACK, "INTERNAL", "current"),
    ]
    assert memory.history(provider, "merger", taint=CONF, agent=None) == []
    [broken] = memory.history(provider, "broken", taint=PUB, agent=MAIN)
    row = broken.as_dict()
    assert set(row) == set(names[0].as_dict())  # one shape for every row
    assert (row["status"], row["reason"], row["content"]) == (
        "malformed",
        "value is not valid JSON",
        None,
    )


# -- save ---------------------------------------------------------------------------------


def test_save_writes_at_the_taint_in_the_gateways_format(provider: BaseStorage) -> None:
    result = memory.save_memory(
        provider,
        "home-city",
        "Lives in Oslo",
        ["persona, travel", "persona"],
        taint=CONF,
        agent=MAIN,
        now=NOW,
    )
    assert result.status == "created" and result.record.level == CONF
    value = provider.get(mkey(MAIN, "CONFIDENTIAL", "home-city"))
    assert value == (
        '{"key":"home-city","agentId":"main-session","classification":"CONFIDENTIAL",'
        '"content":"Lives in Oslo","tags":["persona","travel"],'
        '"createdAt":"2026-04-01T12:00:00.000Z","updatedAt":"2026-04-01T12:00:00.000Z",'
        '"expired":false,"sourceSessionId":"triggerfish-admin"}'
    )
    assert [k for k in memories(provider) if "home-city" in k] == [
        mkey(MAIN, "CONFIDENTIAL", "home-city")
    ]


def test_save_keeps_created_at_and_revives(provider: BaseStorage) -> None:
    updated = memory.save_memory(provider, "user-name", "Alice C.", taint=PUB, agent=MAIN, now=NOW)
    assert updated.status == "updated"
    assert updated.record.created_at == "2026-03-02T10:15:30.123Z"
    assert updated.record.updated_at == "2026-04-01T12:00:00.000Z"
    revived = memory.save_memory(provider, "old-fact", "Prefers coffee", taint=PUB, agent=MAIN)
    assert revived.status == "revived" and not revived.record.expired
    assert memory.get_memory(provider, "old-fact", taint=PUB, agent=MAIN).record == revived.record
    replaced = memory.save_memory(provider, "broken", "Fixed now", taint=PUB, agent=MAIN, now=NOW)
    assert replaced.status == "replaced"
    assert replaced.record.created_at == "2026-04-01T12:00:00.000Z"


def test_save_refuses_empty_input(provider: BaseStorage) -> None:
    before = memories(provider)
    for key, content, agent in (
        ("", "x", MAIN),
        ("k", "", MAIN),
        ("k", "x", ""),
        ("k", "x", "a:b"),
    ):
        with pytest.raises(UsageError):
            memory.save_memory(provider, key, content, taint=PUB, agent=agent)
    assert memories(provider) == before


# -- delete -------------------------------------------------------------------------------


def test_delete_is_soft_and_at_exactly_the_taint(provider: BaseStorage) -> None:
    before = memories(provider)
    skey = mkey(MAIN, "INTERNAL", "user-name")
    result = memory.delete_memory(provider, "user-name", taint=INT, agent=MAIN, now=NOW)
    assert result.deleted and result.storage_key == skey
    after = memories(provider)
    expected = {
        **json.loads(before[skey]),
        "expired": True,
        "updatedAt": "2026-04-01T12:00:00.000Z",
    }
    assert json.loads(after[skey]) == expected
    assert list(json.loads(after[skey])) == list(json.loads(before[skey]))  # field order kept
    assert {k: v for k, v in after.items() if k != skey} == {
        k: v for k, v in before.items() if k != skey
    }
    # The PUBLIC version is visible again at INTERNAL.
    found = memory.get_memory(provider, "user-name", taint=INT, agent=MAIN)
    assert found.record is not None and found.record.level == PUB


def test_delete_refuses_other_levels_without_revealing_higher_ones(provider: BaseStorage) -> None:
    before = memories(provider)
    with pytest.raises(RefusedError, match="held at INTERNAL"):
        memory.delete_memory(provider, "trigger:instructions", taint=CONF, agent=MAIN)
    with pytest.raises(NotFoundError) as higher:
        memory.delete_memory(provider, "merger", taint=CONF, agent=MAIN)
    assert "RESTRICTED" not in str(higher.value)
    with pytest.raises(NotFoundError, match="already soft-deleted"):
        memory.delete_memory(provider, "old-fact", taint=PUB, agent=MAIN)
    with pytest.raises(InvalidDataError):
        memory.delete_memory(provider, "broken", taint=PUB, agent=MAIN)
    dry = memory.delete_memory(provider, "user-name", taint=PUB, agent=MAIN, dry_run=True)
    assert dry.dry_run and not dry.deleted
    assert memories(provider) == before
    assert audits(provider) == []
    memory.delete_memory(provider, "user-name", taint=RES, agent=MAIN, dry_run=True)
    assert [r["action"] for r in audits(provider)] == ["memory_delete_check"]
    assert memories(provider) == before


# -- audit --------------------------------------------------------------------------------


def test_audit_of_changes_and_reads_above_public_without_content(provider: BaseStorage) -> None:
    memory.get_memory(provider, "user-name", taint=PUB, agent=MAIN)
    memory.list_memories(provider, taint=PUB, agent=None)
    assert audits(provider) == []
    memory.get_memory(provider, "user-name", taint=RES, agent=MAIN)
    memory.save_memory(provider, "k", "secret words", ["t"], taint=CONF, agent=MAIN)
    memory.delete_memory(provider, "k", taint=CONF, agent=MAIN)
    memory.history(provider, "user-name", taint=INT, agent=None)
    records = {r["action"]: r for r in audits(provider)}  # same-millisecond keys sort by name
    assert sorted(records) == ["memory_delete", "memory_get", "memory_history", "memory_save"]
    get = records["memory_get"]
    assert get["taint"] == "RESTRICTED" and get["counts"] == {"results": 1}
    assert get["agent"] == MAIN and get["key"] == "user-name"
    save = records["memory_save"]
    assert save["key"] == "k" and save["taint"] == "CONFIDENTIAL" and save["status"] == "created"
    text = json.dumps(records)
    assert "passport" not in text and "secret words" not in text


# -- stats --------------------------------------------------------------------------------


def test_stats_count_only_visible_levels(provider: BaseStorage) -> None:
    public = memory_upkeep.stats(provider, taint=PUB).as_dict()
    assert public["levels"] == ["PUBLIC"]
    assert public["rows"] == [
        {"agent": MAIN, "level": "PUBLIC", "live": 2, "deleted": 1, "shadowed": 0},
        {"agent": CRON, "level": "PUBLIC", "live": 1, "deleted": 0, "shadowed": 0},
    ]
    assert public["malformed"] == 2
    full = memory_upkeep.stats(provider, taint=RES).as_dict()
    assert (full["live"], full["deleted"], full["malformed"]) == (10, 3, 3)
    assert full["shadowed"] == 3  # user-name at PUBLIC, INTERNAL and CONFIDENTIAL
    if provider.backend == "sqlite":
        index = full["index"]
        assert index["kind"] == "sqlite-fts5"
        assert (index["missing"], index["stale"], index["orphaned"]) == (2, 1, 0)
        assert index["samples"]["stale"] == [STALE_KEY]
    else:
        assert full["index"]["kind"] == "scan" and full["index"]["indexed"] is False


# -- purge --------------------------------------------------------------------------------


def test_parse_duration() -> None:
    assert memory_upkeep.parse_duration("30d") == timedelta(days=30)
    assert memory_upkeep.parse_duration("1d12h") == timedelta(hours=36)
    assert memory_upkeep.parse_duration("2w") == timedelta(weeks=2)
    assert memory_upkeep.parse_duration("45s") == timedelta(seconds=45)
    # one grammar with the retention config: y is 365 days
    assert memory_upkeep.parse_duration("1y") == timedelta(days=365)
    for bad in ("", "30", "d", "1.5d", "-3d", "30 days", "3mo"):
        with pytest.raises(UsageError):
            memory_upkeep.parse_duration(bad)


def test_purge_plan_is_visible_soft_deleted_and_old_enough(provider: BaseStorage) -> None:
    def planned(taint: Level, age: str) -> list[str]:
        plan = memory_upkeep.plan_purge(
            provider, memory_upkeep.parse_duration(age), taint=taint, agent=None, now=NOW
        )
        return [key for key, _ in plan.items]

    assert planned(PUB, "1d") == [mkey(MAIN, "PUBLIC", "old-fact")]
    assert planned(PUB, "4d") == []  # deleted 2026-03-29, three days before NOW
    assert planned(RES, "30d") == [
        mkey(MAIN, "CONFIDENTIAL", "project-plan"),
        mkey(MAIN, "RESTRICTED", "old-secret"),
    ]


def test_purge_deletes_exactly_the_unchanged_planned_records(provider: BaseStorage) -> None:
    before = memories(provider)
    plan = memory_upkeep.plan_purge(provider, timedelta(seconds=1), taint=RES, agent=MAIN, now=NOW)
    assert plan.count == 3
    rewritten = mkey(MAIN, "PUBLIC", "old-fact")
    provider.set(rewritten, before[rewritten].replace("Prefers tea", "Prefers green tea"))
    assert memory_upkeep.purge(provider, plan) == 2
    after = memories(provider)
    gone = {key for key, _ in plan.items} - {rewritten}
    assert set(before) - set(after) == gone
    assert {k: v for k, v in after.items() if k != rewritten} == {
        k: v for k, v in before.items() if k not in gone and k != rewritten
    }
    records = {r["action"]: r for r in audits(provider)}
    assert records["memory_purge"]["counts"] == {"planned": 3, "deleted": 2}
    assert records["memory_purge_plan"]["counts"] == {"results": 3}  # a read at RESTRICTED


_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(
    content=st.text() | _json,
    tags=st.lists(st.text(max_size=4), max_size=3) | _json,
    expired=st.booleans() | _json,
    classification=st.sampled_from(["PUBLIC", "INTERNAL", "public"]) | _json,
    extra=st.dictionaries(st.sampled_from(["createdAt", "updatedAt", "x", "content"]), _json),
    drop=st.sets(st.sampled_from(["content", "tags", "expired", "classification"])),
    big=st.booleans(),
)
def test_the_checking_parser_and_the_plain_one_agree(
    content: object,
    tags: object,
    expired: object,
    classification: object,
    extra: dict[str, object],
    drop: set[str],
    big: bool,
) -> None:
    """parse_record checks the fields while msgspec parses (the fast path); without
    msgspec (or where it refuses) it parses the whole object and checks each field.
    Both give the same record, or the same reason, for any value: later keys win
    (a repeated field), unknown fields and huge integers are kept in the document."""
    from triggerfish_cli.memory import record as module

    fields = {"content": content, "tags": tags, "expired": expired}
    fields["classification"] = classification
    document = {key: value for key, value in fields.items() if key not in drop}
    text = json.dumps(document)
    if extra:  # repeated keys: the last one wins, as in JSON.parse
        text = text[:-1] + ("," if document else "") + json.dumps(extra)[1:]
    if big:
        text = text[:-1] + ("," if text != "{}" else "") + '"n":123456789012345678901234567890}'
    key = "memory:a:PUBLIC:k"
    fast = parse_record(key, text)
    saved = module._parsers
    module._parsers = lambda: module._Parsers(None, Exception, json.loads)  # type: ignore[assignment]
    try:
        plain = parse_record(key, text)
    finally:
        module._parsers = saved  # type: ignore[assignment]
    assert type(fast) is type(plain)
    if isinstance(fast, Malformed):
        assert fast == plain
    else:
        assert isinstance(plain, MemoryRecord)
        assert fast == plain and fast.as_dict() == plain.as_dict()
        assert fast.document == plain.document == json.loads(text)
