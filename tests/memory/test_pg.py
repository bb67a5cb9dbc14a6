"""Memory search on Postgres: our own full-text table, the same rules and hits as SQLite FTS5."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.gateway import memory_record
from tests.helpers.memories import CRON, MAIN, current_rows, mkey, write_memory_store
from tests.helpers.services import Postgres
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import UsageError
from triggerfish_cli.memory import records as memory
from triggerfish_cli.memory import upkeep as memory_upkeep
from triggerfish_cli.memory.index import SearchResult
from triggerfish_cli.storage.postgres.backend import PostgresStorage
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

PUB, INT, CONF, RES = Level.PUBLIC, Level.INTERNAL, Level.CONFIDENTIAL, Level.RESTRICTED

#: A corpus of plain english texts: stems, plurals, several agents, levels and tags.
TEXTS = [
    ("pets", "The cats are sleeping on the warm windowsill", ["home"]),
    ("garden", "Planted tomatoes and basil in the garden beds", ["home", "weekend"]),
    ("running", "Runs five kilometres every morning before work", ["health"]),
    ("diet", "Avoids gluten; likes green tea and dark chocolate", ["health", "food"]),
    ("travel", "Flying to Oslo in March for the nordic conference", ["work", "travel"]),
    ("car", "The car needs new winter tyres before December", []),
    ("books", "Reading a novel about whales and the sea", ["leisure"]),
    ("music", "Plays the piano; learning Chopin nocturnes", ["leisure"]),
    ("meeting", "Weekly planning meeting with the platform team on Mondays", ["work"]),
    ("budget", "Quarterly budget review: cloud costs are rising", ["work", "finance"]),
    ("server-room", "The server room cooling failed twice this summer", ["work"]),
    ("coffee", "Drinks two coffees a day, no sugar", ["food"]),
    ("kids", "Children's school starts at eight; pickup at three", ["home"]),
    ("dentist", "Dentist appointment on the twelfth at nine", []),
    ("sleeping-bag", "Bought a sleeping bag for the camping trip", ["weekend"]),
]
QUERIES = [
    "cats", "cat", "sleeping", "sleep", "garden", "tomato", "runs", "running", "kilometres",
    "tea", "green tea", "oslo", "conference", "winter tyres", "whales", "piano", "planning",
    "meeting", "budget", "costs", "cloud", "server", "room", "cooling", "coffee", "children",
    "school", "dentist", "camping", "work", "home", "health", "weekend", "leisure", "food",
    "alice", "chen", "plan", "postgres", "inbox", "digest", "persona", "bag", "nothing-here",
]  # fmt: skip


def corpus() -> dict[str, str]:
    rows = dict(current_rows())
    levels = ["PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED"]
    for n, (key, text, tags) in enumerate(TEXTS):
        agent = (MAIN, CRON)[n % 2]
        level = levels[n % 4]
        rows[mkey(agent, level, key)] = memory_record(key, level, text, agent=agent, tags=tags)
        if n % 3 == 0:  # a lower version the higher one shadows
            lower = levels[(n % 4) - 1] if n % 4 else "INTERNAL"
            rows[mkey(agent, lower, key)] = memory_record(
                key, lower, f"older words: {text}", agent=agent, tags=tags
            )
    return rows


@pytest.fixture
def pg(postgres: Postgres) -> Iterator[PostgresStorage]:
    schema = postgres.new_schema()
    store = PostgresStorage(postgres.dsn, schema=schema, create=True)
    yield store
    store.close()
    postgres.drop_schema(schema)


def keys(result: SearchResult) -> set[str]:
    return {hit.record.storage_key for hit in result.hits}


def find(provider: object, text: str, taint: Level, **options: object) -> SearchResult:
    options.setdefault("agent", MAIN)
    return memory.search(provider, text, taint=taint, **options)  # type: ignore[arg-type]


def test_the_same_hits_as_sqlite_fts5_on_a_shared_corpus(
    pg: PostgresStorage, tmp_path: Path
) -> None:
    rows = corpus()
    sqlite = SqliteStorage(write_memory_store(tmp_path / "gw.db"), create=True)
    sqlite.set_many(rows.items())
    memory_upkeep.reindex(sqlite, taint=RES)
    pg.set_many(rows.items())
    drift = memory_upkeep.reindex(pg, taint=RES)
    assert drift.kind == "postgres-fts" and drift.fixed == drift.records
    compared = 0
    for taint in Level:
        for text in QUERIES:
            for agent in (MAIN, CRON, None):
                for tag in (None, "work", "home"):
                    ours = find(pg, text, taint, agent=agent, tag=tag, limit=100)
                    theirs = find(sqlite, text, taint, agent=agent, tag=tag, limit=100)
                    assert ours.kind == "postgres-fts"
                    assert keys(ours) == keys(theirs), (text, taint, agent, tag)
                    assert [h.record for h in ours.hits] == [
                        memory.get_memory(
                            pg, h.record.key, taint=taint, agent=h.record.agent
                        ).record
                        for h in ours.hits
                    ]
                    compared += len(theirs.hits)
    assert compared > 500  # the corpus is not trivially empty
    sqlite.close()


def test_hits_carry_a_snippet_with_highlights_and_a_rank(pg: PostgresStorage) -> None:
    pg.set_many(corpus().items())
    memory_upkeep.reindex(pg, taint=RES)
    hits = find(pg, "conference oslo", RES, agent=None).hits
    assert [h.record.key for h in hits] == ["travel"]
    hit = hits[0]
    assert hit.score > 0
    start, end = hit.highlights[0]
    assert hit.snippet[start:end] == "Oslo"
    raw = find(pg, "cat & !dog", RES, agent=None, raw=True)
    assert {h.record.key for h in raw.hits} == {"pets"}
    with pytest.raises(UsageError, match="invalid tsquery"):
        find(pg, "cat & (", RES, raw=True)
    with pytest.raises(UsageError, match="nothing to search for"):
        find(pg, "the and of", RES)  # english stop words only


def test_saves_and_deletes_keep_the_index_in_step(pg: PostgresStorage) -> None:
    pg.set_many(current_rows().items())
    assert find(pg, "alice", PUB).kind == "scan"  # no table yet: search scans
    memory.save_memory(pg, "quokka", "a quokka smiles", taint=PUB, agent=MAIN)
    assert memory_upkeep.stats(pg, taint=RES).index_kind == "scan"  # a save makes no table
    memory_upkeep.reindex(pg, taint=RES)
    memory.save_memory(pg, "wombat", "a wombat digs burrows", taint=INT, agent=MAIN)
    assert [h.record.key for h in find(pg, "burrows", INT).hits] == ["wombat"]
    memory.save_memory(pg, "wombat", "a wombat sleeps all day", taint=INT, agent=MAIN)
    assert find(pg, "burrows", INT).hits == [] and find(pg, "burrows", INT).stale == 0
    memory.delete_memory(pg, "wombat", taint=INT, agent=MAIN)
    assert find(pg, "wombat", INT).hits == []
    assert memory_upkeep.reindex(pg, taint=RES, dry_run=True).to_fix == 0

    def fail(old: str | None) -> str:
        raise UsageError("refused")

    from triggerfish_cli.storage.postgres.index import for_postgres

    before = dict(pg.scan("memory:"))
    with pytest.raises(UsageError):
        for_postgres(pg).write(mkey(MAIN, "PUBLIC", "quokka"), fail)
    assert dict(pg.scan("memory:")) == before


def test_drift_from_writes_behind_our_back_and_reindex(
    pg: PostgresStorage, postgres: Postgres
) -> None:
    pg.set_many(current_rows().items())
    memory_upkeep.reindex(pg, taint=RES)

    def gateway_writes() -> None:
        """The gateway rewrites a record, saves another and soft-deletes a third, in kv."""
        pg.set(
            mkey(MAIN, "INTERNAL", "trigger:instructions"),
            memory_record("trigger:instructions", "INTERNAL", "Check the agenda at noon"),
        )
        pg.set(
            mkey(CRON, "PUBLIC", "sunrise"), memory_record("sunrise", "PUBLIC", "sunrise report")
        )
        pg.set(
            mkey(MAIN, "PUBLIC", "user-name"),
            memory_record("user-name", "PUBLIC", "User's name is Alice Chen", expired=True),
        )

    gateway_writes()
    drift = memory_upkeep.reindex(pg, taint=RES, dry_run=True)
    assert (drift.missing, drift.stale, drift.orphaned) == (1, 1, 1)
    # A read-only session cannot bring the index in step: stale rows are skipped.
    from triggerfish_cli.memory.index import SearchRequest
    from triggerfish_cli.storage.postgres.index import for_postgres

    reader = for_postgres(pg.reopen(read_only=True))
    stale = reader.search(SearchRequest("calendar", False, INT, MAIN, None, 10))
    assert stale.hits == [] and stale.stale == 1
    assert reader.search(SearchRequest("sunrise", False, PUB, CRON, None, 10)).hits == []
    reader.storage.close()
    # A search that can write indexes what the gateway wrote first: it sees what get sees.
    assert [h.record.key for h in find(pg, "agenda", INT).hits] == ["trigger:instructions"]
    assert [h.record.key for h in find(pg, "sunrise", PUB, agent=CRON).hits] == ["sunrise"]
    assert find(pg, "calendar", INT).hits == [] and find(pg, "calendar", INT).stale == 0
    assert memory_upkeep.reindex(pg, taint=RES, dry_run=True).to_fix == 0
    # So does memory reindex, for the same writes.
    pg.set(mkey(CRON, "PUBLIC", "sunrise"), memory_record("sunrise", "PUBLIC", "sunset report"))
    assert memory_upkeep.reindex(pg, taint=RES).fixed == 1
    assert [h.record.key for h in find(pg, "sunset", PUB, agent=CRON).hits] == ["sunrise"]
    with postgres.connect() as conn:
        columns = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'kv' ORDER BY ordinal_position",
            (pg.schema,),
        ).fetchall()
        triggers = conn.execute(
            "SELECT count(*) FROM information_schema.triggers WHERE event_object_schema = %s",
            (pg.schema,),
        ).fetchone()
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "ORDER BY table_name",
            (pg.schema,),
        ).fetchall()
    assert columns == [("key", "text"), ("value", "text")] and triggers == (0,)
    # kv untouched; ours: the search table and the store's identity (storage/identity.py)
    assert tables == [("kv",), ("tfadmin_memory_fts",), ("tfadmin_store",)]


def test_filters_apply_before_the_limit(pg: PostgresStorage) -> None:
    rows: dict[str, str] = {}
    for n in range(30):
        for level, text in (
            ("RESTRICTED", "zebra zebra zebra zebra"),  # above the taint, best rank
            ("PUBLIC", "zebra zebra zebra"),  # shadowed by the CONFIDENTIAL version below
            ("CONFIDENTIAL", "nothing to see"),
        ):
            rows[mkey(MAIN, level, f"k{n}")] = memory_record(f"k{n}", level, text)
    for n in range(12):
        text = "a zebra among many other words in a long sentence about animals"
        rows[mkey(MAIN, "INTERNAL", f"p{n}")] = memory_record(f"p{n}", "INTERNAL", text)
    pg.set_many(rows.items())
    memory_upkeep.reindex(pg, taint=RES)
    result = find(pg, "zebra", CONF, limit=10)
    assert len(result.hits) == 10 and {h.record.key[0] for h in result.hits} == {"p"}
    assert len(find(pg, "zebra", CONF, limit=100).hits) == 12
    assert {h.record.key[0] for h in find(pg, "zebra", PUB, limit=50).hits} == {"k"}


def test_purge_removes_index_rows_in_the_same_transaction(pg: PostgresStorage) -> None:
    pg.set_many(current_rows().items())
    memory_upkeep.reindex(pg, taint=RES)
    memory.save_memory(pg, "quokka", "a quokka smiles", taint=PUB, agent=MAIN)
    memory.delete_memory(pg, "quokka", taint=PUB, agent=MAIN)
    from datetime import timedelta

    plan = memory_upkeep.plan_purge(pg, timedelta(seconds=1), taint=RES, agent=None)
    assert plan.count > 0
    memory_upkeep.purge(pg, plan)
    assert memory_upkeep.reindex(pg, taint=RES, dry_run=True).to_fix == 0
