"""Memory search: plain-word queries, filters before the limit, agreement with get, drift."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.gateway import KV_SQL, dump_tables, memory_record, write_gateway_store
from tests.helpers.memories import CRON, MAIN, current_rows, mkey, write_memory_store
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import UsageError
from triggerfish_cli.memory import records as memory
from triggerfish_cli.memory import upkeep as memory_upkeep
from triggerfish_cli.memory.index import SearchResult, split_snippet
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.fts_query import fts_query

PUB, INT, CONF, RES = Level.PUBLIC, Level.INTERNAL, Level.CONFIDENTIAL, Level.RESTRICTED


@pytest.fixture(params=["sqlite", "memory"])
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStorage]:
    if request.param == "sqlite":
        store: BaseStorage = SqliteStorage(write_memory_store(tmp_path / "gw.db"))
    else:
        store = MemoryStorage(current_rows())
    yield store
    store.close()


def found(result: SearchResult) -> list[tuple[str, str, str]]:
    return [(h.record.agent, h.record.key, h.record.level.name) for h in result.hits]


def find(provider: BaseStorage, text: str, taint: Level, **options: object) -> SearchResult:
    options.setdefault("agent", MAIN)
    return memory.search(provider, text, taint=taint, **options)  # type: ignore[arg-type]


# -- the query language -------------------------------------------------------------------


def test_plain_words_become_fts5_strings() -> None:
    assert fts_query("what's my name", raw=False) == (
        '{key content tags} : ("what\'s" "my" "name")'
    )
    assert fts_query('say "hi" - acme-stack', raw=False) == (
        '{key content tags} : ("say" """hi""" "acme-stack")'
    )
    assert fts_query("a*b NEAR(x) OR", raw=False) == ('{key content tags} : ("a*b" "NEAR(x)" "OR")')
    assert fts_query("name AND", raw=True) == "name AND"
    for empty in ("", "   ", "- ' \" ...", "!!!"):
        with pytest.raises(UsageError):
            fts_query(empty, raw=False)


@pytest.mark.parametrize(
    "text",
    [
        "what's my name",
        "acme-stack",
        '"alice',
        "alice's",
        "AND OR NOT",
        "name*",
        "x:y",
        "(x",
        "ünï",
    ],
)
def test_any_text_is_a_valid_query(provider: BaseStorage, text: str) -> None:
    find(provider, text, RES)  # never a syntax error


def test_matching_is_stemmed_case_and_accent_insensitive(provider: BaseStorage) -> None:
    assert found(find(provider, "RUNNING", INT)) == [(MAIN, "user-name", "INTERNAL")]
    assert found(find(provider, "cafe oslo", PUB)) == [(MAIN, "café", "PUBLIC")]
    assert found(find(provider, "user's name", PUB)) == [(MAIN, "user-name", "PUBLIC")]
    assert found(find(provider, "acme-stack", INT)) == [(MAIN, "user-name", "INTERNAL")]


def test_only_key_content_and_tags_are_searched(provider: BaseStorage) -> None:
    # Every record has classification PUBLIC..RESTRICTED and agent main-session.
    assert found(find(provider, "public", RES)) == []
    assert found(find(provider, "main session", RES)) == []
    assert found(find(provider, "restricted", RES, agent=None)) == []
    assert found(find(provider, "persona", CONF)) == [(MAIN, "user-name", "CONFIDENTIAL")]  # a tag
    keyed = find(provider, "instructions", INT)  # only in the key "trigger:instructions"
    # (on SQLite that record's index rows are stale: it is searched from kv)
    assert found(keyed) == [(MAIN, "trigger:instructions", "INTERNAL")]


def test_raw_queries_pass_through_and_errors_are_usage_errors(provider: BaseStorage) -> None:
    result = find(provider, "content: (alice NOT passport)", RES, raw=True)
    assert found(result) == []  # the visible version (RESTRICTED) mentions the passport
    result = find(provider, "content: (alice NOT passport)", CONF, raw=True)
    assert found(result) == [(MAIN, "user-name", "CONFIDENTIAL")]
    for bad in ("name AND", "nosuchcolumn: x", '"unterminated', "NEAR(a b"):
        with pytest.raises(UsageError, match="invalid FTS5 query"):
            find(provider, bad, PUB, raw=True)


def test_hits_show_snippet_highlights_and_score(provider: BaseStorage) -> None:
    [hit] = find(provider, "legal", CONF).hits
    assert hit.snippet == "Alice's legal name is Alice Marie Chen"
    assert [hit.snippet[a:b] for a, b in hit.highlights] == ["legal"]
    assert hit.score > 0
    assert split_snippet("a \ue000b\ue001 c") == ("a b c", ((2, 3),))


# -- visibility, shadowing and agreement with get -----------------------------------------


@pytest.mark.parametrize("taint", list(Level))
def test_hits_agree_with_get(provider: BaseStorage, taint: Level) -> None:
    for text in ("alice", "name", "plan", "merger", "chen", "work"):
        for hit in find(provider, text, taint, agent=None, limit=50).hits:
            visible = memory.lookup(provider, hit.record.key, taint=taint, agent=hit.record.agent)
            assert visible.record == hit.record
            assert hit.record.level <= taint


def test_a_lower_version_never_shows_through(provider: BaseStorage) -> None:
    # INTERNAL's version mentions acme-stack; at CONFIDENTIAL the visible version does not.
    assert found(find(provider, "acme-stack", CONF)) == []
    assert found(find(provider, "passport", CONF)) == []
    assert found(find(provider, "passport", RES)) == [(MAIN, "user-name", "RESTRICTED")]
    # The CONFIDENTIAL project-plan is soft-deleted: INTERNAL's is what get returns.
    assert found(find(provider, "migrate", CONF)) == [(MAIN, "project-plan", "INTERNAL")]
    assert found(find(provider, "merger", CONF)) == []


def test_tag_filter(provider: BaseStorage) -> None:
    assert found(find(provider, "alice", INT, tag="work")) == [(MAIN, "user-name", "INTERNAL")]
    assert found(find(provider, "alice", CONF, tag="work")) == []


def test_limit_counts_only_visible_hits(tmp_path: Path) -> None:
    """The best-ranked rows are above the taint or shadowed: 10 visible ones still come back."""
    rows: dict[str, str] = {}
    indexed = []
    for n in range(30):
        for level, text in (
            ("RESTRICTED", "zebra zebra zebra zebra"),  # above the taint, best bm25
            ("PUBLIC", "zebra zebra zebra"),  # shadowed by the CONFIDENTIAL version below
            ("CONFIDENTIAL", "nothing to see"),
        ):
            rows[mkey(MAIN, level, f"k{n}")] = memory_record(f"k{n}", level, text)
            indexed.append((MAIN, level, f"k{n}"))
    for n in range(12):
        text = "a zebra among many other words in a long sentence about animals"
        rows[mkey(MAIN, "INTERNAL", f"p{n}")] = memory_record(f"p{n}", "INTERNAL", text)
        indexed.append((MAIN, "INTERNAL", f"p{n}"))
    path = write_gateway_store(tmp_path / "z.db", rows, tuple(indexed))
    for provider in (SqliteStorage(path), MemoryStorage(rows)):
        result = find(provider, "zebra", CONF, limit=10)
        assert len(result.hits) == 10
        assert {(key[0], level) for _, key, level in found(result)} == {("p", "INTERNAL")}
        assert len(find(provider, "zebra", CONF, limit=100).hits) == 12
        assert len(find(provider, "zebra", PUB, limit=10).hits) == 10
        assert {key[0] for _, key, _ in found(find(provider, "zebra", PUB, limit=50))} == {"k"}
        provider.close()


def gateway_search(path: Path, query: str, agent: str, taint: Level, max_results: int) -> int:
    """How many hits the gateway's own search returns (search_fts5.ts): LIMIT maxResults*4,
    then level and expiry filtered, then trimmed to maxResults."""
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT m.classification, m.record_json FROM memory_fts f JOIN memory_meta m "
        "ON f.agent_id = m.agent_id AND f.classification = m.classification AND f.key = m.key "
        "WHERE memory_fts MATCH ? AND f.agent_id = ? ORDER BY f.rank LIMIT ?",
        (query, agent, max_results * 4),
    ).fetchall()
    conn.close()
    visible = [
        level
        for level, record in rows
        if Level[level] <= taint and not json.loads(record)["expired"]
    ]
    return len(visible[:max_results])


def test_never_fewer_hits_than_asked_unlike_the_gateway(tmp_path: Path) -> None:
    """Forty better-ranked RESTRICTED memories fill the gateway's LIMIT 40: it finds none."""
    rows: dict[str, str] = {}
    indexed = []
    for n in range(40):
        rows[mkey(MAIN, "RESTRICTED", f"r{n}")] = memory_record(f"r{n}", "RESTRICTED", "okapi " * 4)
        indexed.append((MAIN, "RESTRICTED", f"r{n}"))
    for n in range(15):
        text = "an okapi among many other words in a long sentence about animals and more"
        rows[mkey(MAIN, "PUBLIC", f"p{n}")] = memory_record(f"p{n}", "PUBLIC", text)
        indexed.append((MAIN, "PUBLIC", f"p{n}"))
    path = write_gateway_store(tmp_path / "o.db", rows, tuple(indexed))
    assert gateway_search(path, "okapi", MAIN, PUB, 10) == 0
    assert gateway_search(path, "okapi", MAIN, PUB, 20) == 15  # asking for more finds them
    provider = SqliteStorage(path)
    for limit in (1, 10, 15):
        assert len(find(provider, "okapi", PUB, limit=limit).hits) == limit
    assert len(find(provider, "okapi", PUB, limit=50).hits) == 15
    assert len(find(provider, "okapi", RES, limit=100).hits) == 55
    provider.close()


# -- drift between kv and the index (SQLite) ----------------------------------------------


def test_stale_and_unindexed_records_are_searched_from_kv(tmp_path: Path) -> None:
    provider = SqliteStorage(write_memory_store(tmp_path / "gw.db"))
    stale = find(provider, "inbox", INT)
    assert found(stale) == [] and stale.stale == 1  # kv no longer says "inbox"
    # The new text was never indexed, nor are cron runs: both found from kv.
    assert found(find(provider, "calendar", INT)) == [(MAIN, "trigger:instructions", "INTERNAL")]
    assert found(find(provider, "digest", PUB, agent=CRON)) == [(CRON, "digest", "PUBLIC")]
    check = memory_upkeep.reindex(provider, taint=RES, dry_run=True)
    assert (check.missing, check.stale, check.orphaned, check.fixed) == (2, 1, 0, 0)
    fixed = memory_upkeep.reindex(provider, taint=RES)
    assert fixed.fixed == 3
    assert found(find(provider, "calendar", INT)) == [(MAIN, "trigger:instructions", "INTERNAL")]
    assert found(find(provider, "inbox", INT)) == []
    assert found(find(provider, "digest", PUB, agent=CRON)) == [(CRON, "digest", "PUBLIC")]
    again = memory_upkeep.reindex(provider, taint=RES, dry_run=True)
    assert again.to_fix == 0 and again.in_sync == again.records == 10
    provider.close()


def test_orphaned_duplicate_and_malformed_index_rows(tmp_path: Path) -> None:
    path = write_memory_store(tmp_path / "gw.db")
    conn = sqlite3.connect(path)
    skey = mkey(MAIN, "PUBLIC", "user-name")
    conn.execute("DELETE FROM kv WHERE key = ?", (skey,))  # an orphaned index row
    conn.execute(  # a duplicate row for one record
        "INSERT INTO memory_fts SELECT * FROM memory_fts WHERE key = 'café'"
    )
    conn.execute(
        "UPDATE kv SET value = '{oops' WHERE key = ?", (mkey(MAIN, "RESTRICTED", "merger"),)
    )
    conn.commit()
    conn.close()
    provider = SqliteStorage(path)
    orphan = find(provider, "alice", PUB)
    assert found(orphan) == [] and orphan.stale == 1
    assert found(find(provider, "oslo", PUB)) == [(MAIN, "café", "PUBLIC")]  # once, not twice
    assert find(provider, "globex", CONF).malformed == []  # above the taint: never named
    broken = find(provider, "globex", RES)
    assert found(broken) == [] and broken.malformed == [mkey(MAIN, "RESTRICTED", "merger")]
    drift = memory_upkeep.reindex(provider, taint=RES, dry_run=True)
    assert (drift.orphaned, drift.duplicates) == (2, 1)  # user-name PUBLIC and the merger
    memory_upkeep.reindex(provider, taint=RES)
    assert memory_upkeep.reindex(provider, taint=RES, dry_run=True).to_fix == 0
    assert sqlite3.connect(path).execute(
        "SELECT count(*) FROM memory_fts WHERE key = 'café'"
    ).fetchone() == (1,)
    provider.close()


def test_reindex_touches_only_visible_levels(tmp_path: Path) -> None:
    path = write_memory_store(tmp_path / "gw.db")
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM memory_fts")
    conn.execute("DELETE FROM memory_meta")
    conn.commit()
    provider = SqliteStorage(path)
    drift = memory_upkeep.reindex(provider, taint=INT)
    assert drift.levels == (PUB, INT) and drift.fixed == 7
    levels = {row[0] for row in conn.execute("SELECT classification FROM memory_meta")}
    assert levels == {"PUBLIC", "INTERNAL"}
    assert memory_upkeep.reindex(provider, taint=INT, dry_run=True).to_fix == 0
    assert memory_upkeep.reindex(provider, taint=RES, dry_run=True).missing == 3
    provider.close()
    conn.close()


def test_without_index_tables_search_scans_and_reindex_creates_them(tmp_path: Path) -> None:
    path = tmp_path / "bare.db"
    conn = sqlite3.connect(path)
    conn.execute(KV_SQL)
    conn.executemany("INSERT INTO kv VALUES (?, ?)", current_rows().items())
    conn.commit()
    provider = SqliteStorage(path)
    result = find(provider, "digest", PUB, agent=CRON)
    assert found(result) == [(CRON, "digest", "PUBLIC")] and result.kind == "scan"
    memory.save_memory(provider, "new", "brand new words", taint=PUB, agent=MAIN)
    assert "memory_fts" not in provider.tables()  # a save does not make a partial index
    before = dump_tables(path)["kv"]
    check = memory_upkeep.reindex(provider, taint=RES, dry_run=True)
    assert check.tables_missing and check.missing == 11
    assert "memory_fts" not in provider.tables()
    memory_upkeep.reindex(provider, taint=RES)
    schema = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE name LIKE 'memory_%'"))
    gateway = sqlite3.connect(write_gateway_store(tmp_path / "gw.db"))
    assert schema == dict(
        gateway.execute("SELECT name, sql FROM sqlite_master WHERE name LIKE 'memory_%'")
    )
    assert [r for r in dump_tables(path)["kv"] if not str(r[0]).startswith("audit:")] == [
        r for r in before if not str(r[0]).startswith("audit:")
    ]
    result = find(provider, "digest", PUB, agent=CRON)
    assert found(result) == [(CRON, "digest", "PUBLIC")] and result.kind == "sqlite-fts5"
    provider.close()


def test_scan_and_sqlite_index_give_the_same_results(tmp_path: Path) -> None:
    sqlite = SqliteStorage(write_memory_store(tmp_path / "gw.db"))
    memory_upkeep.reindex(sqlite, taint=RES)
    scan = MemoryStorage(dict(sqlite.scan("memory:")))
    for taint in Level:
        for text in ("alice", "name", "plan work", "oslo", "digest", "calendar", "persona"):
            for agent in (MAIN, None):
                ours = find(sqlite, text, taint, agent=agent, limit=50)
                theirs = find(scan, text, taint, agent=agent, limit=50)
                assert [h.as_dict() for h in ours.hits] == [h.as_dict() for h in theirs.hits]
    sqlite.close()


def test_an_index_row_that_names_another_record_is_not_trusted(tmp_path: Path) -> None:
    """agent_id 'main-session:PUBLIC' + key 'k' spells the storage key of key 'PUBLIC:k'."""
    path = write_memory_store(tmp_path / "gw.db")
    value = memory_record("PUBLIC:k", "PUBLIC", "a quokka smiles")
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO kv VALUES (?, ?)", (mkey(MAIN, "PUBLIC", "PUBLIC:k"), value))
    conn.execute(
        "INSERT INTO memory_fts VALUES ('main-session:PUBLIC', 'PUBLIC', 'k', ?, '')",
        ("a quokka smiles",),
    )
    conn.execute(
        "INSERT INTO memory_meta VALUES ('main-session:PUBLIC', 'PUBLIC', 'k', ?)", (value,)
    )
    conn.commit()
    provider = SqliteStorage(path)
    # The row is not trusted; the record itself (no meta row of its own) is found from kv.
    wrong = find(provider, "quokka", PUB, agent=None)
    assert found(wrong) == [(MAIN, "PUBLIC:k", "PUBLIC")] and wrong.stale == 1
    drift = memory_upkeep.reindex(provider, taint=RES)
    assert drift.samples["orphaned"] == ["memory:main-session:PUBLIC:PUBLIC:k"]
    assert drift.samples["missing"][0] == mkey(MAIN, "PUBLIC", "PUBLIC:k")
    assert found(find(provider, "quokka", PUB)) == [(MAIN, "PUBLIC:k", "PUBLIC")]
    assert conn.execute("SELECT count(*) FROM memory_fts WHERE key = 'k'").fetchone() == (0,)
    provider.close()
    conn.close()


def _reference_order(path: Path, text: str, agent: str | None) -> list[str]:
    """Every match's storage key in the documented order: each row's own score from
    which of key, content and tags it matches (bm25 of one column, < 0) and their
    lengths in tokens, then storage key, then rowid (the slow way: all in Python)."""
    from triggerfish_cli.memory.index import column_sizes, rank_score
    from triggerfish_cli.storage.sqlite.fts_search import COLUMN_WEIGHTS

    conn = sqlite3.connect(path)
    flags = ", ".join(f"bm25(memory_fts, {w}) < 0" for w in COLUMN_WEIGHTS)
    rows = conn.execute(
        f"SELECT rowid, agent_id, classification, key, {flags}, "
        "(SELECT sz FROM memory_fts_docsize WHERE id = memory_fts.rowid) "
        "FROM memory_fts WHERE memory_fts MATCH ?",
        (fts_query(text, False),),
    ).fetchall()
    conn.close()
    ordered = sorted(
        (-rank_score((k, c, t), column_sizes(sz, (2, 3, 4))), f"memory:{a}:{lv}:{key}", rowid)
        for rowid, a, lv, key, k, c, t, sz in rows
        if agent is None or a == agent
    )
    return [skey for _, skey, _ in ordered]


@pytest.mark.parametrize("window", [1024, 3])
def test_the_order_is_every_rows_own_score_then_storage_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    """Many runs of equal scores (the same lengths), words in key and tags as well as
    in content, two agents: the SQL ranking gives exactly the documented order, also
    when the window SQLite keeps cuts a run of equal scores (window 3: every run is
    cut, so each later window must skip exactly what was given), rows that match
    in their key or tags alone, and raw queries
    (bm25 for all three columns) agree with plain ones."""
    from triggerfish_cli.storage.sqlite import fts_search as memory_fts

    monkeypatch.setattr(memory_fts, "WINDOW", window)
    rows: dict[str, str] = {}
    indexed = []
    for n in range(60):
        agent = MAIN if n % 3 else CRON
        key = f"otter-{n}" if n % 7 == 0 else f"k{n:02d}"
        # Some hold "otter" only in their key (n % 14 == 0) or only in their tags (n % 22).
        alone = n % 14 == 0 or n % 22 == 0
        text = " ".join(
            ["otter"] * (not alone) + ["word"] * (n % 4 + alone) + ["river"] * (n % 5 == 0)
        )
        tags = ["otter"] if n % 11 == 0 else ["misc"]
        record = memory_record(key, "PUBLIC", text, agent=agent, tags=tags)
        rows[mkey(agent, "PUBLIC", key)] = record
        indexed.append((agent, "PUBLIC", key))
    path = write_gateway_store(tmp_path / "ties.db", rows, tuple(indexed))
    provider = SqliteStorage(path)
    for text in ("otter", "otter word", "river otter"):
        for agent in (MAIN, None):
            expected = _reference_order(path, text, agent)
            assert len(expected) > 7
            result = find(provider, text, RES, agent=agent, limit=len(expected) + 5)
            assert [h.record.storage_key for h in result.hits] == expected
            first = find(provider, text, PUB, agent=agent, limit=7)
            assert [h.record.storage_key for h in first.hits] == expected[:7]
            raw = " ".join(f'"{word}"' for word in text.split())
            raw_hits = find(provider, f"{{key content tags}} : ({raw})", RES, agent=agent,
                            limit=len(expected), raw=True)  # fmt: skip
            assert [h.as_dict() for h in raw_hits.hits] == [h.as_dict() for h in result.hits]
    provider.close()
