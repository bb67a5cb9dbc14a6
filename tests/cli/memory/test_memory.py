"""`triggerfish-admin memory` on a store shaped like one the gateway wrote."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn, StoreHandle
from tests.helpers.gateway import dump_tables
from tests.helpers.memories import CRON, MAIN, mkey, write_memory_store

LEVELS = "PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED"


@pytest.fixture
def memory_db(base_dir: Path) -> Path:
    """The default store, holding the memory-rich gateway fixture."""
    return write_memory_store(base_dir / "data" / "triggerfish.db")


def without_audit(
    tables: dict[str, list[tuple[object, ...]]],
) -> dict[str, list[tuple[object, ...]]]:
    return {**tables, "kv": [r for r in tables["kv"] if not str(r[0]).startswith("audit:")]}


def kv(path: Path) -> dict[str, str]:
    return dict(dump_tables(path)["kv"])  # type: ignore[arg-type]


# -- search ---------------------------------------------------------------------------------


def test_search_json_shape(cli: CliFn, memory_db: Path) -> None:
    result = cli("memory", "search", "legal", "name", "-t", "CONFIDENTIAL", "-f", "json")
    assert result.exit_code == 0, result.stderr
    [hit] = result.json()  # type: ignore[misc]
    assert set(hit) == {
        "agent", "key", "level", "tags", "updated_at", "score", "snippet", "highlights",
        "content", "storage_key",
    }  # fmt: skip
    assert (hit["agent"], hit["key"], hit["level"], hit["tags"]) == (
        MAIN,
        "user-name",
        "CONFIDENTIAL",
        ["persona"],
    )
    assert [hit["snippet"][a:b] for a, b in hit["highlights"]] == ["legal", "name"]
    assert hit["score"] > 0 and hit["storage_key"] == mkey(MAIN, "CONFIDENTIAL", "user-name")


def test_search_table_marks_matches(cli: CliFn, memory_db: Path) -> None:
    table = cli("memory", "search", "alice", "-t", "INTERNAL")
    assert table.exit_code == 0
    assert "[Alice] Chen runs the acme-stack" in table.stdout and "agent" not in table.stdout
    every = cli("memory", "search", "alice", "-t", "INTERNAL", "--all-agents")
    # a memory the gateway never indexed (a cron run's) is found all the same
    assert "agent" in every.stdout and "scheduler-slack" in every.stdout
    empty = cli("memory", "search", "merger")
    assert empty.exit_code == 0 and empty.stdout == "" and "no memories match" in empty.stderr


def test_search_finds_memories_the_index_lacks_or_holds_stale(
    cli: CliFn, memory_db: Path
) -> None:
    old = cli("memory", "search", "inbox", "-t", "INTERNAL", "-f", "json")
    assert old.exit_code == 0 and old.json() == [] and old.stderr == ""  # kv says otherwise
    new = cli("memory", "search", "calendar", "-t", "INTERNAL", "-f", "json")
    assert [hit["key"] for hit in new.json()] == ["trigger:instructions"]


def test_search_query_errors(cli: CliFn, memory_db: Path) -> None:
    raw = cli("memory", "search", "--raw", "name AND")
    assert raw.exit_code == 2
    assert raw.stderr.count("\n") == 1 and "invalid FTS5 query" in raw.stderr
    nothing = cli("memory", "search", "--", "- ...")
    assert nothing.exit_code == 2 and "nothing to search for" in nothing.stderr
    assert cli("memory", "search", "what's", "my", "name").exit_code == 0
    assert cli("memory", "search", "--limit", "0", "x").exit_code == 2


# -- the taint and the agent ------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["public", "SECRET", "", "Restricted"])
def test_taint_must_be_an_exact_level(cli: CliFn, memory_db: Path, bad: str) -> None:
    result = cli("memory", "list", "--taint", bad)
    assert result.exit_code == 2 and LEVELS in result.stderr
    assert result.stderr.count("\n") == 1
    env = cli("memory", "list", env={"TRIGGERFISH_TAINT": bad or "x"})
    assert env.exit_code == 2 and LEVELS in env.stderr


def test_taint_from_the_environment(cli: CliFn, memory_db: Path) -> None:
    result = cli("memory", "get", "user-name", "-f", "json", env={"TRIGGERFISH_TAINT": "INTERNAL"})
    assert result.exit_code == 0 and result.json()["level"] == "INTERNAL"  # type: ignore[index]
    default = cli("memory", "get", "user-name", "-f", "json")
    assert default.json()["level"] == "PUBLIC"  # type: ignore[index]


def test_agent_options(cli: CliFn, memory_db: Path) -> None:
    both = cli("memory", "list", "--agent", CRON, "--all-agents")
    assert both.exit_code == 2 and "not both" in both.stderr
    cron = cli("memory", "list", "--agent", CRON, "-f", "json")
    assert [r["key"] for r in cron.json()] == ["digest"]  # type: ignore[union-attr]
    assert cli("memory", "get", "digest", "--agent", "bad:agent").exit_code == 2


# -- get, list, history -----------------------------------------------------------------------


def test_get(cli: CliFn, memory_db: Path) -> None:
    result = cli("memory", "get", "user-name", "-t", "RESTRICTED", "-f", "json")
    document = result.json()
    assert document["content"] == "Alice's passport number is X1234567"  # type: ignore[index]
    assert document["shadows"] == ["CONFIDENTIAL", "INTERNAL", "PUBLIC"]  # type: ignore[index]
    assert document["created_at"] == "2026-03-02T10:15:30.123Z"  # type: ignore[index]
    missing = cli("memory", "get", "merger")
    assert missing.exit_code == 3 and "RESTRICTED" not in missing.stderr
    table = cli("memory", "get", "trigger:instructions", "-t", "INTERNAL")
    assert "Summarise the calendar every evening" in table.stdout


def test_list_reports_malformed_records_by_key_and_goes_on(cli: CliFn, memory_db: Path) -> None:
    result = cli("memory", "list", "-f", "json")
    assert result.exit_code == 0
    assert [(r["key"], r["level"]) for r in result.json()] == [  # type: ignore[union-attr]
        ("café", "PUBLIC"),
        ("user-name", "PUBLIC"),
    ]
    assert f"skipped {mkey(MAIN, 'PUBLIC', 'broken')}: value is not valid JSON" in result.stderr
    assert mkey(MAIN, "PUBLIC", "liar") in result.stderr
    assert "broken-secret" not in result.stderr  # RESTRICTED: not even its key
    every = cli("memory", "list", "-t", "RESTRICTED", "-A", "--tag", "persona", "-l", "1")
    assert every.exit_code == 0 and "user-name" in every.stdout and "broken-secret" in every.stderr


def test_history(cli: CliFn, memory_db: Path) -> None:
    result = cli("memory", "history", "project-plan", "-t", "RESTRICTED", "-f", "json")
    rows = result.json()
    assert [(r["level"], r["status"]) for r in rows] == [  # type: ignore[union-attr]
        ("CONFIDENTIAL", "deleted"),
        ("INTERNAL", "current"),
    ]
    assert rows[0]["expired"] is True and rows[0]["updated_at"] == "2026-01-10T09:00:00.000Z"  # type: ignore[index]
    public = cli("memory", "history", "project-plan")
    assert public.exit_code == 0 and public.stdout == ""


# -- save and delete ----------------------------------------------------------------------------


def test_save_and_get_back(cli: CliFn, memory_db: Path) -> None:
    saved = cli(
        "memory", "save", "home-city", "-", "--tags", "persona,travel", "--tags", "home",
        "-t", "INTERNAL", "-f", "json", input="Lives in Bergen\n",
    )  # fmt: skip
    assert saved.exit_code == 0, saved.stderr
    document = saved.json()
    assert document["status"] == "created" and document["level"] == "INTERNAL"  # type: ignore[index]
    record = json.loads(kv(memory_db)[mkey(MAIN, "INTERNAL", "home-city")])
    assert record["content"] == "Lives in Bergen" and record["tags"] == [
        "persona",
        "travel",
        "home",
    ]
    assert cli("memory", "get", "home-city").exit_code == 3  # saved above PUBLIC
    found = cli("memory", "search", "bergen", "-t", "INTERNAL", "-f", "json").json()
    assert [h["key"] for h in found] == ["home-city"]  # type: ignore[union-attr]
    quiet = cli("memory", "save", "home-city", "Lives in Oslo", "-t", "INTERNAL", "-q")
    assert quiet.exit_code == 0 and quiet.stdout == ""
    assert cli("memory", "save", "", "x").exit_code == 2


def test_delete_needs_yes_and_touches_nothing_else(cli: CliFn, memory_db: Path) -> None:
    before = dump_tables(memory_db)
    refused = cli("memory", "delete", "user-name", "-t", "CONFIDENTIAL")
    assert refused.exit_code == 4 and "--yes" in refused.stderr
    dry = cli("memory", "delete", "user-name", "-t", "CONFIDENTIAL", "--dry-run", "-f", "json")
    assert dry.json()["deleted"] is False and dry.json()["dry_run"] is True  # type: ignore[index]
    wrong = cli("memory", "delete", "trigger:instructions", "-t", "RESTRICTED", "--yes")
    assert wrong.exit_code == 4 and "--taint INTERNAL" in wrong.stderr
    assert cli("memory", "delete", "merger", "--yes").exit_code == 3
    assert without_audit(dump_tables(memory_db)) == before  # the dry run above PUBLIC: audited
    done = cli("memory", "delete", "user-name", "-t", "CONFIDENTIAL", "--yes", "-f", "json")
    assert done.exit_code == 0 and done.json()["deleted"] is True  # type: ignore[index]
    after = dump_tables(memory_db)
    skey = mkey(MAIN, "CONFIDENTIAL", "user-name")
    assert json.loads(dict(after["kv"])[skey])["expired"] is True  # type: ignore[arg-type]
    changed = {k for k, v in after["kv"] if dict(before["kv"]).get(k) != v}  # type: ignore[misc]
    assert {k for k in changed if not str(k).startswith("audit:")} == {skey}
    assert ("main-session", "CONFIDENTIAL", "user-name") not in {
        row[:3] for row in after["memory_meta"]
    }


def test_delete_confirmation_on_a_tty(
    cli: CliFn, memory_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.cli import output

    monkeypatch.setattr(output.Output, "stdin_is_tty", property(lambda self: True))
    before = dump_tables(memory_db)
    assert cli("memory", "delete", "café", input="n\n").exit_code == 4
    assert dump_tables(memory_db) == before
    assert cli("memory", "delete", "café", input="y\n").exit_code == 0


# -- stats, reindex, purge ------------------------------------------------------------------------


def test_stats(cli: CliFn, memory_db: Path) -> None:
    result = cli("memory", "stats", "-t", "INTERNAL", "-f", "json")
    document = result.json()
    assert document["levels"] == ["PUBLIC", "INTERNAL"]  # type: ignore[index]
    assert (document["live"], document["deleted"], document["malformed"]) == (7, 1, 2)  # type: ignore[index]
    assert document["index"]["missing"] == 2 and document["index"]["stale"] == 1  # type: ignore[index]
    table = cli("memory", "stats")
    assert "malformed records: 2" in table.stdout and "1 missing" in table.stdout


def test_reindex_dry_run_then_fix(cli: CliFn, memory_db: Path) -> None:
    before = dump_tables(memory_db)
    dry = cli("memory", "reindex", "-t", "RESTRICTED", "--dry-run", "-f", "json")
    assert dry.exit_code == 0
    report = dry.json()
    assert (report["missing"], report["stale"], report["fixed"]) == (2, 1, 0)  # type: ignore[index]
    assert without_audit(dump_tables(memory_db)) == before
    done = cli("memory", "reindex", "-t", "RESTRICTED")
    assert done.exit_code == 0 and "fixed 3 record(s)" in done.stdout
    again = cli("memory", "reindex", "-t", "RESTRICTED", "--dry-run", "-f", "json").json()
    assert again["missing"] + again["stale"] + again["orphaned"] == 0  # type: ignore[index]
    digest = cli("memory", "search", "digest", "--agent", CRON, "-f", "json").json()
    assert [h["key"] for h in digest] == ["digest"]  # type: ignore[union-attr]


def test_purge_touches_nothing_else(cli: CliFn, memory_db: Path) -> None:
    before = dump_tables(memory_db)
    # Between project-plan's deletion (2026-01-10) and old-fact's (2026-03-29).
    between = datetime(2026, 2, 15, tzinfo=timezone.utc)
    age = f"{(datetime.now(timezone.utc) - between).days}d"
    dry = cli("memory", "purge", "--older-than", age, "-t", "RESTRICTED", "--dry-run", "-f", "json")
    assert dry.exit_code == 0, dry.stderr
    plan = dry.json()
    assert plan["matched"] == 2 and plan["deleted"] == 0  # type: ignore[index]
    assert plan["by_level"] == {"CONFIDENTIAL": 1, "RESTRICTED": 1}  # type: ignore[index]
    assert cli("memory", "purge", "--older-than", age, "-t", "RESTRICTED").exit_code == 4
    assert without_audit(dump_tables(memory_db)) == before  # reads above PUBLIC are audited
    done = cli("memory", "purge", "--older-than", age, "-t", "RESTRICTED", "--yes", "-f", "json")
    assert done.json()["deleted"] == 2  # type: ignore[index]
    after = dump_tables(memory_db)
    gone = {mkey(MAIN, "CONFIDENTIAL", "project-plan"), mkey(MAIN, "RESTRICTED", "old-secret")}
    assert without_audit(after)["kv"] == [r for r in before["kv"] if r[0] not in gone]
    assert {k: v for k, v in after.items() if k != "kv"} == {
        k: v for k, v in before.items() if k != "kv"
    }
    records = [json.loads(v) for k, v in after["kv"] if str(k).startswith("audit:")]  # type: ignore[arg-type]
    assert sorted(r["action"] for r in records) == ["memory_purge"] + ["memory_purge_plan"] * 3
    assert "Old vault" not in json.dumps(records)
    public = cli("memory", "purge", "--older-than", "1d", "--yes", "-f", "json")
    assert public.json()["deleted"] == 1  # type: ignore[index]  # old-fact: PUBLIC only
    assert cli("memory", "purge", "--older-than", "soon").exit_code == 2


# -- no write-down through kv ----------------------------------------------------------------------


def test_kv_refuses_to_write_memory_records(cli: CliFn, memory_db: Path, tmp_path: Path) -> None:
    before = dump_tables(memory_db)
    secret = kv(memory_db)[mkey(MAIN, "RESTRICTED", "merger")]
    copy = secret.replace("RESTRICTED", "PUBLIC")
    result = cli("kv", "set", mkey(MAIN, "PUBLIC", "merger"), copy)
    assert result.exit_code == 4 and "memory save" in result.stderr
    lines = json.dumps({"key": "a", "value": "1"}) + "\n"
    lines += json.dumps({"key": mkey(MAIN, "PUBLIC", "merger"), "value": copy}) + "\n"
    imported = cli("kv", "import", "-", input=lines)
    assert imported.exit_code == 4, imported.stderr
    assert "a copy of the RESTRICTED version in the target" in imported.stderr
    assert cli("kv", "import", "-", "--dry-run", input=lines).exit_code == 4
    assert dump_tables(memory_db) == before
    assert cli("memory", "get", "merger").exit_code == 3


# -- the demo generator's memory options -----------------------------------------------------------


def test_demo_memory_options(cli: CliFn, tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    result = cli("--db", str(path), "demo", "create", "--records", "400", "--memories", "150",
                 "--memory-words", "60")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT value FROM kv WHERE key >= 'memory:' AND key < 'memory;'")
    contents = [json.loads(value)["content"] for (value,) in rows]
    assert len(contents) == 150
    assert 45 <= sum(len(c.split()) for c in contents) / len(contents) <= 75
    assert cli("--db", str(tmp_path / "x.db"), "demo", "create", "--records", "100",
               "--memories", "51").exit_code == 2  # fmt: skip


def test_memory_commands_on_every_persistent_backend(cli: CliFn, store: StoreHandle) -> None:
    """save, get, search, list, delete, history through whatever index the backend has."""
    for level, text in (("PUBLIC", "Likes green tea"), ("CONFIDENTIAL", "Likes tea at 5 sharp")):
        saved = cli(*store.args, "memory", "save", "drink", text, "-t", level, "--tags", "prefs")
        assert saved.exit_code == 0, saved.stderr
    got = cli(*store.args, "memory", "get", "drink", "-t", "RESTRICTED", "-f", "json").json()
    assert got["level"] == "CONFIDENTIAL" and got["shadows"] == ["PUBLIC"]  # type: ignore[index]
    hits = cli(*store.args, "memory", "search", "tea", "-t", "INTERNAL", "-f", "json").json()
    assert [(h["key"], h["level"]) for h in hits] == [("drink", "PUBLIC")]  # type: ignore[union-attr]
    assert (
        cli(*store.args, "memory", "search", "green", "-t", "CONFIDENTIAL", "-f", "json").json()
        == []
    )
    deleted = cli(*store.args, "memory", "delete", "drink", "-t", "CONFIDENTIAL", "--yes")
    assert deleted.exit_code == 0, deleted.stderr
    listed = cli(*store.args, "memory", "list", "-t", "RESTRICTED", "--tag", "prefs", "-f", "json")
    assert [(r["key"], r["level"]) for r in listed.json()] == [("drink", "PUBLIC")]  # type: ignore[union-attr]
    history = cli(
        *store.args, "memory", "history", "drink", "-t", "RESTRICTED", "-f", "json"
    ).json()
    assert [r["status"] for r in history] == ["deleted", "current"]  # type: ignore[union-attr]


def test_memory_upkeep_on_every_persistent_backend(cli: CliFn, store: StoreHandle) -> None:
    """stats, reindex, search and purge on a gateway-shaped memory set, on each backend."""
    from tests.helpers.memories import current_rows

    provider: Any = store.open()
    provider.set_many(current_rows().items())
    provider.close()
    kind = {"sqlite": "sqlite-fts5", "postgres": "postgres-fts", "s3": "scan"}[store.backend]
    check = cli(*store.args, "memory", "reindex", "-t", "RESTRICTED", "-n", "-f", "json").json()
    assert check["dry_run"] and check["records"] == 10  # type: ignore[index]
    fixed = cli(*store.args, "memory", "reindex", "-t", "RESTRICTED", "-f", "json").json()
    assert fixed["kind"] == kind  # type: ignore[index]
    again = cli(*store.args, "memory", "reindex", "-t", "RESTRICTED", "-n", "-f", "json").json()
    assert again["missing"] + again["stale"] + again["orphaned"] == 0  # type: ignore[index]
    stats = cli(*store.args, "memory", "stats", "-t", "RESTRICTED", "-f", "json").json()
    assert stats["index"]["kind"] == kind  # type: ignore[index]
    hits = cli(*store.args, "memory", "search", "alice", "-t", "CONFIDENTIAL", "--all-agents",
               "-f", "json").json()  # fmt: skip
    assert sorted((h["agent"], h["key"], h["level"]) for h in hits) == [  # type: ignore[union-attr]
        ("main-session", "user-name", "CONFIDENTIAL"),
        ("scheduler-slack-1712000000000", "user-name", "INTERNAL"),
    ]
    tagged = cli(*store.args, "memory", "search", "plan", "--tag", "work", "-t", "RESTRICTED",
                 "-f", "json").json()  # fmt: skip
    assert [(h["key"], h["level"]) for h in tagged] == [("project-plan", "INTERNAL")]  # type: ignore[union-attr]
    dry = cli(*store.args, "memory", "purge", "--older-than", "1d", "-t", "RESTRICTED",
              "--all-agents", "--dry-run", "-f", "json").json()  # fmt: skip
    planned = dry["matched"]  # type: ignore[index]
    assert planned >= 2
    refused = cli(*store.args, "memory", "purge", "--older-than", "1d", "-t", "RESTRICTED",
                  "--all-agents")  # fmt: skip
    assert refused.exit_code == 4
    done = cli(*store.args, "memory", "purge", "--older-than", "1d", "-t", "RESTRICTED",
               "--all-agents", "--yes", "-f", "json").json()  # fmt: skip
    assert done["deleted"] == planned  # type: ignore[index]
    after = cli(*store.args, "memory", "reindex", "-t", "RESTRICTED", "-n", "-f", "json").json()
    assert after["missing"] + after["stale"] + after["orphaned"] == 0  # type: ignore[index]
