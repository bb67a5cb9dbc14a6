"""Properties of the classification rules, on random gateway-shaped memory stores.

1. Nothing above the taint is returned or revealed: every read at taint T
   gives the same answer on a store and on that store with every row above
   T (kv and index) removed.
2. Search agrees with get: each hit is the version get returns, and (with
   an index in step with kv) every record get returns whose text holds the
   query word is found.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.gateway import memory_record, write_gateway_store
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import NotFoundError
from triggerfish_cli.memory import keys as memory_keys
from triggerfish_cli.memory import records as memory
from triggerfish_cli.memory import upkeep as memory_upkeep
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

AGENTS = ("main-session", "scheduler-slack-1712000000000")
KEYS = ("name", "trigger:plan", "home-city")
WORDS = ("apple", "berry", "cherry", "date", "elder", "fig")  # distinct porter stems
TAGS = ("persona", "work")

record_strategy = st.one_of(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
        st.lists(st.sampled_from(TAGS), max_size=2, unique=True),
        st.booleans(),  # soft-deleted
    ),
    st.sampled_from(["{broken", '{"content":"fig","tags":[],"expired":false}']),  # malformed
)
slot = st.tuples(st.sampled_from(AGENTS), st.sampled_from(list(Level)), st.sampled_from(KEYS))
store_strategy = st.dictionaries(slot, st.tuples(record_strategy, st.booleans()), max_size=14)

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def build(spec: dict[tuple[str, Level, str], tuple[Any, bool]]) -> tuple[dict[str, str], tuple]:
    """kv rows and the gateway-indexed (agent, level, key) of a random store."""
    rows: dict[str, str] = {}
    indexed = []
    for (agent, level, key), (record, is_indexed) in spec.items():
        skey = memory_keys.storage_key(agent, level, key)
        if isinstance(record, str):
            rows[skey] = record
            continue
        words, tags, expired = record
        rows[skey] = memory_record(
            key, level.name, " ".join(words), agent=agent, tags=tags, expired=expired
        )
        if is_indexed and not expired:
            indexed.append((agent, level.name, key))
    return rows, tuple(indexed)


def below(rows: dict[str, str], indexed: tuple, taint: Level) -> tuple[dict[str, str], tuple]:
    keep = {k: v for k, v in rows.items() if memory_keys.split_key(k)[1] <= taint}  # type: ignore[index]
    return keep, tuple(t for t in indexed if Level[t[1]] <= taint)


def observe(provider: BaseStorage, taint: Level) -> dict[str, Any]:
    """Everything a reader at ``taint`` can learn, audit records aside."""
    seen: dict[str, Any] = {}
    for agent in AGENTS:
        for key in KEYS:
            try:
                found = memory.get_memory(provider, key, taint=taint, agent=agent)
                seen[f"get {agent} {key}"] = (
                    found.record.value if found.record else None,
                    [r.value for r in found.shadowed],
                    [m.storage_key for m in found.malformed],
                )
            except NotFoundError as exc:
                seen[f"get {agent} {key}"] = str(exc)
            seen[f"history {key}"] = [
                v.as_dict() for v in memory.history(provider, key, taint=taint, agent=None)
            ]
    listing = memory.list_memories(provider, taint=taint, agent=None)
    seen["list"] = ([r.value for r in listing.records], [m.storage_key for m in listing.malformed])
    for word in WORDS:
        result = memory.search(provider, word, taint=taint, agent=None, limit=100)
        seen[f"search {word}"] = (
            sorted(h.record.storage_key for h in result.hits),
            result.stale,
            result.malformed,
        )
    stats = memory_upkeep.stats(provider, taint=taint).as_dict()
    seen["stats"] = stats
    plan = memory_upkeep.plan_purge(
        provider, memory_upkeep.parse_duration("1s"), taint=taint, agent=None
    )
    seen["purge"] = plan.as_dict(0, True) | {"cutoff": None}
    return seen


def sqlite_store(folder: Path, name: str, rows: dict[str, str], indexed: tuple) -> SqliteStorage:
    return SqliteStorage(write_gateway_store(folder / name, rows, indexed))


@SETTINGS
@given(store_strategy)
def test_nothing_above_the_taint_is_revealed(spec: dict[Any, Any]) -> None:
    rows, indexed = build(spec)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for taint in Level:
            low_rows, low_indexed = below(rows, indexed, taint)
            pairs = [
                (MemoryStorage(rows), MemoryStorage(low_rows)),
                (
                    sqlite_store(folder, f"full-{taint}.db", rows, indexed),
                    sqlite_store(folder, f"low-{taint}.db", low_rows, low_indexed),
                ),
            ]
            for full, low in pairs:
                assert observe(full, taint) == observe(low, taint)
                full.close()
                low.close()


def visible_matches(provider: BaseStorage, word: str, taint: Level) -> set[str]:
    """What search must find: get's version of each agent and key, when it holds the word."""
    out = set()
    for agent in AGENTS:
        for key in KEYS:
            found = memory.lookup(provider, key, taint=taint, agent=agent)
            if found.record is not None and word in found.record.content.split():
                out.add(found.record.storage_key)
    return out


@SETTINGS
@given(store_strategy, st.sampled_from(WORDS), st.integers(min_value=1, max_value=4))
def test_search_agrees_with_get(spec: dict[Any, Any], word: str, limit: int) -> None:
    rows, indexed = build(spec)
    with tempfile.TemporaryDirectory() as tmp:
        gateway = sqlite_store(Path(tmp), "gw.db", rows, indexed)  # with the gateway's gaps
        reindexed = sqlite_store(Path(tmp), "re.db", rows, indexed)
        memory_upkeep.reindex(reindexed, taint=Level.RESTRICTED)
        for taint in Level:
            expected = visible_matches(gateway, word, taint)
            for provider, complete in (
                (gateway, False),
                (reindexed, True),
                (MemoryStorage(rows), True),
            ):
                hits = memory.search(provider, word, taint=taint, agent=None, limit=limit).hits
                keys = [h.record.storage_key for h in hits]
                assert len(keys) == len(set(keys)) <= limit
                assert set(keys) <= expected  # sound, whatever state the index is in
                for hit in hits:
                    got = memory.lookup(
                        provider, hit.record.key, taint=taint, agent=hit.record.agent
                    )
                    assert got.record == hit.record
                if complete:  # and complete when the index is in step with kv
                    assert len(keys) == min(limit, len(expected))
                    everything = memory.search(provider, word, taint=taint, agent=None, limit=100)
                    assert {h.record.storage_key for h in everything.hits} == expected
        gateway.close()
        reindexed.close()


def test_property_store_shapes_are_gateway_shapes(tmp_path: Path) -> None:
    """The generated stores really carry the gateway's gaps (guards the strategy)."""
    spec = {
        ("main-session", Level.PUBLIC, "name"): ((["apple"], ["work"], False), False),
        ("main-session", Level.INTERNAL, "name"): ((["berry"], [], False), True),
    }
    rows, indexed = build(spec)
    provider = sqlite_store(tmp_path, "s.db", rows, indexed)
    conn = sqlite3.connect(provider.path)
    assert conn.execute("SELECT agent_id, classification, key FROM memory_meta").fetchall() == [
        ("main-session", "INTERNAL", "name")
    ]
    assert memory_upkeep.reindex(provider, taint=Level.RESTRICTED, dry_run=True).missing == 1
    provider.close()
