"""`demo create`: a deterministic store shaped exactly like the gateway's."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import dump_tables
from triggerfish_cli import demo, demo_random, namespaces
from triggerfish_cli import demo_conversations as dc
from triggerfish_cli.serialization import to_iso

NOW = "2026-11-01T12:00:00.000Z"
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
BARE = ("lineage-session:", "lineage-hash:", "lineage-fwd:", "browser:", "prefs:")


def make(cli: CliFn, path: Path, *extra: str) -> dict[str, object]:
    result = cli("--db", str(path), "demo", "create", "--now", NOW, "-f", "json", *extra)
    assert result.exit_code == 0, result.stderr
    return result.json()  # type: ignore[return-value]


def kv_rows(path: Path) -> dict[str, str]:
    return dict(sqlite3.connect(path).execute("SELECT key, value FROM kv"))


def test_deterministic_for_a_seed(cli: CliFn, tmp_path: Path) -> None:
    make(cli, tmp_path / "a.db", "--records", "800", "--seed", "7")
    make(cli, tmp_path / "b.db", "--records", "800", "--seed", "7")
    make(cli, tmp_path / "c.db", "--records", "800", "--seed", "8")
    a, b, c = (dump_tables(tmp_path / n) for n in ("a.db", "b.db", "c.db"))

    def strip(tables: dict[str, list[tuple[object, ...]]]) -> dict[str, list[tuple[object, ...]]]:
        return {
            name: [row for row in rows if not str(row[0]).startswith("audit:")]
            for name, rows in tables.items()
        }

    assert strip(a) == strip(b)
    assert strip(a)["kv"] != strip(c)["kv"]


def test_shapes_match_the_gateway(cli: CliFn, tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    summary = make(cli, path, "--records", "3000", "--days", "400")
    rows = kv_rows(path)
    assert summary["records"] == 3000
    assert len([k for k in rows if not k.startswith("audit:")]) == 3000
    now = datetime(2026, 11, 1, 12, tzinfo=timezone.utc)
    seen = set()
    for key, value in rows.items():
        ns = namespaces.for_key(key)
        assert ns is not None, key  # only known namespaces
        seen.add(ns.prefix)
        if ns.prefix.startswith(BARE) or ns.prefix in BARE:
            assert not value.startswith("{")
            continue
        document = json.loads(value)
        assert json.dumps(document, separators=(",", ":"), ensure_ascii=False) == value
        if ns.prefix == "audit:":
            continue
        moment = namespaces.record_time(ns, key, value)
        owners_list = ns.prefix == "todos:" and not key.startswith("todos:scheduler-")
        if ns.has_age and ns.prefix != "pairing:" and not owners_list:  # pending codes: ahead
            assert moment is not None, key
            assert now - timedelta(days=401) <= moment <= now, key
        for stamp in re.findall(r'"(?:createdAt|updatedAt|timestamp|executedAt)":"([^"]+)"', value):
            assert ISO.match(stamp), stamp
    assert {
        "sessions:",
        "conv:",
        "conv-session:",
        "lineage:",
        "lineage-session:",
        "lineage-hash:",
        "memory:",
        "cron:",
        "cron-history:",
        "notifications:",
        "main-session-id",
        "todos:",
        "prefs:",
        "browser:",
        "trigger:",
        "pairing:",
        "workflow-runs:",
        "session-id:",
        "workflow-versions:",
    } <= seen
    session_ids = [k.split(":", 1)[1] for k in rows if k.startswith("sessions:")]
    assert session_ids and all(UUID4.match(s) for s in session_ids)
    for key in rows:
        if key.startswith("conv:"):
            assert re.match(r"^conv:[0-9a-f-]{36}:\d{12}$", key)


def test_memories_in_all_three_places_with_the_gateways_gaps(cli: CliFn, tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    make(cli, path, "--records", "3000")
    conn = sqlite3.connect(path)
    memories = {
        k: json.loads(v)
        for k, v in conn.execute(
            "SELECT key, value FROM kv WHERE key >= 'memory:' AND key < 'memory;'"
        )
    }
    meta = {(a, c, k): r for a, c, k, r in conn.execute("SELECT * FROM memory_meta")}
    fts = conn.execute("SELECT agent_id, classification, key FROM memory_fts").fetchall()
    assert len(fts) == len(meta) > 0
    stale = 0
    for key, record in memories.items():
        agent, level, mkey = key.split(":", 3)[1:]
        assert (record["agentId"], record["classification"], record["key"]) == (agent, level, mkey)
        indexed = (agent, level, mkey) in meta
        if record["expired"] or agent.startswith("scheduler-"):
            assert not indexed
        else:
            assert indexed
            stale += meta[(agent, level, mkey)] != kv_rows(path)[key]
    assert any(a.startswith("scheduler-") for a, _, _ in (k.split(":", 3)[1:] for k in memories))
    assert any(r["expired"] for r in memories.values())
    assert stale < len(meta) * 0.1


def test_refuses_a_store_with_data(cli: CliFn, tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    make(cli, path, "--records", "100")
    before = dump_tables(path)
    result = cli("--db", str(path), "demo", "create")
    assert result.exit_code == 4
    assert "already holds data" in result.stderr
    assert dump_tables(path) == before


def test_default_store_and_memory_backend(cli: CliFn, base_dir: Path) -> None:
    result = cli("demo", "create", "--records", "300")
    assert result.exit_code == 0, result.stderr
    assert (base_dir / "data" / "triggerfish.db").exists()
    assert "wrote 300 demo keys and this run's audit record to" in result.stdout
    assert ": 301 keys (" in result.stdout
    memory = cli("--backend", "memory", "demo", "create", "--records", "200", "-f", "json")
    assert memory.exit_code == 0 and memory.json()["records"] == 200


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01T00:00:00Z"])
def test_bad_now_is_a_usage_error(cli: CliFn, bad: str) -> None:
    assert cli("demo", "create", "--now", bad).exit_code == 2


# -- the gateway's facts, record for record (UPSTREAM.md) ------------------------------------

ANCHOR = datetime(2026, 11, 1, 12, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def big() -> dict[str, str]:
    """A store large enough to hold every kind of record the generator writes."""
    rows, _fts, _meta = demo.generate(20_000, seed=5, now=ANCHOR, days=120)
    assert len(rows) == len(dict(rows)) == 20_000
    return dict(rows)


def docs(rows: dict[str, str], prefix: str) -> dict[str, dict[str, Any]]:
    return {k: json.loads(v) for k, v in rows.items() if k.startswith(prefix)}


def test_conversations_number_from_zero_with_the_counter_at_count_minus_one(
    big: dict[str, str],
) -> None:
    by_session: dict[str, list[int]] = {}
    for key, record in docs(big, "conv:").items():
        _, sid, seq = key.split(":")
        assert record["session_id"] == sid and record["sequence"] == int(seq)
        assert UUID4.match(record["message_id"]) and ISO.match(record["timestamp"])
        by_session.setdefault(sid, []).append(int(seq))
    counters = docs(big, "conv-session:")
    assert {k.split(":", 1)[1] for k in counters} == set(by_session)
    for sid, numbers in by_session.items():
        assert sorted(numbers) == list(range(len(numbers)))
        assert counters[f"conv-session:{sid}"] == {"lastSequence": len(numbers) - 1}
        times = [json.loads(big[f"conv:{sid}:{n:012d}"])["timestamp"] for n in sorted(numbers)]
        assert times == sorted(times)  # appended in time order


def test_messages_have_the_gateways_roles_and_fields(big: dict[str, str]) -> None:
    base = [
        "message_id",
        "session_id",
        "role",
        "content",
        "classification",
        "timestamp",
        "sequence",
        "compacted",
    ]
    optional = [
        "lineage_id",
        "tool_name",
        "tool_args",
        "token_count",
        "reasoning",
        "tool_calls",
        "tool_call_id",
        "provider",
        "model",
    ]
    lineage = docs(big, "lineage:")
    roles: set[str] = set()
    truncated = capped = 0
    for record in docs(big, "conv:").values():
        fields = list(record)
        assert fields[:8] == base
        extra = fields[8:]
        assert extra == [name for name in optional if name in extra]  # construction order
        roles.add(record["role"])
        if record["role"] == "tool_call":
            assert {"lineage_id", "tool_name", "tool_args"} <= set(extra)
            assert "token_count" not in extra
            args = record["tool_args"]
            if "_truncated" in args:
                truncated += 1
                assert list(args) == ["_truncated", "_preview"] and args["_truncated"] is True
                assert len(args["_preview"]) == dc.MAX_TOOL_ARGS_CHARS - 50
            else:
                assert len(json.dumps(args, separators=(",", ":"))) <= dc.MAX_TOOL_ARGS_CHARS
            budget = dc.RESPONSE_BUDGETS.get(record["tool_name"], dc.DEFAULT_RESPONSE_BUDGET)
            if "… [truncated — " in record["content"]:
                capped += 1
                body, marker = record["content"].rsplit("\n… [truncated — ", 1)
                assert len(body) <= budget and re.fullmatch(
                    r'\d+ chars remaining, use read_more\(cache_id="[0-9a-f]{6}"\) to continue\]',
                    marker,
                )
            else:
                assert len(record["content"]) <= budget
            origin = lineage[f"lineage:{record['lineage_id']}"]
            assert origin["sessionId"] == record["session_id"]
            assert origin["origin"]["source_name"] == record["tool_name"]
            assert origin["origin"]["source_type"] == dc.source_type(record["tool_name"])
            assert origin["classification"]["level"] == record["classification"]
        else:
            assert record["token_count"] == -(-len(record["content"]) // 4)
    assert roles == {"user", "assistant", "tool_call", "compaction_summary"}
    assert truncated and capped


def test_compaction_marks_what_came_before(big: dict[str, str]) -> None:
    conv = docs(big, "conv:")
    summaries = [r for r in conv.values() if r["role"] == "compaction_summary"]
    assert summaries
    for summary in summaries:
        sid, at = summary["session_id"], summary["sequence"]
        last = json.loads(big[f"conv-session:{sid}"])["lastSequence"]
        later = [
            conv[f"conv:{sid}:{n:012d}"]["role"] == "compaction_summary"
            for n in range(at + 1, last + 1)
        ]
        if not any(later):  # the session's last compaction
            flags = [conv[f"conv:{sid}:{n:012d}"]["compacted"] for n in range(last + 1)]
            assert flags == [n < at for n in range(last + 1)]


def test_lineage_is_what_the_gateway_records(big: dict[str, str]) -> None:
    lineage = docs(big, "lineage:")
    owners = {r["userId"] for r in docs(big, "sessions:").values()}
    assert len(owners) == 1
    kinds = set()
    for key, record in lineage.items():
        lid = key.split(":", 1)[1]
        assert list(record)[:5] == [
            "lineage_id",
            "content_hash",
            "origin",
            "classification",
            "sessionId",
        ]
        assert record["lineage_id"] == lid
        assert list(record["origin"]) == [
            "source_type",
            "source_name",
            "accessed_at",
            "accessed_by",
            "access_method",
        ]
        assert record["origin"]["accessed_by"] in owners
        assert record["origin"]["access_method"] == record["origin"]["source_name"]
        assert record["classification"]["reason"] == f"Tool call: {record['origin']['source_name']}"
        assert ("content" in record) == (record["classification"]["level"] == "PUBLIC")
        kinds.add(record["origin"]["source_type"])
        assert big[f"lineage-session:{record['sessionId']}:{lid}"] == lid
        named = big[f"lineage-hash:{record['content_hash']}"]
        assert lineage[f"lineage:{named}"]["content_hash"] == record["content_hash"]
        for parent in record.get("inputLineageIds", []):
            assert big[f"lineage-fwd:{parent}:{lid}"] == lid
    assert {"web_request", "memory_access", "filesystem", "google_api", "scheduler"} <= kinds


def test_sessions_taint_follows_their_history(big: dict[str, str]) -> None:
    sessions = docs(big, "sessions:")
    for record in sessions.values():
        history = record["history"]
        levels = ["PUBLIC"] + [step["newLevel"] for step in history]
        assert record["taint"] == levels[-1]
        for step, before in zip(history, levels, strict=False):
            assert step["previousLevel"] == before
            assert demo_random.LEVELS.index(step["newLevel"]) > demo_random.LEVELS.index(before)
    current = docs(big, "session-id:")
    assert current and all(f"sessions:{r['id']}" in big for r in current.values())
    main = json.loads(big["main-session-id"])
    assert f"sessions:{main['id']}" in big
    assert main["createdAt"] == min(r["createdAt"] for r in sessions.values())


def test_scheduler_runs_have_no_session_record(big: dict[str, str]) -> None:
    owned = {k.split(":", 1)[1] for k in big if k.startswith("sessions:")}
    talked = {k.split(":")[1] for k in big if k.startswith("conv:")}
    runs = talked - owned
    assert runs and owned & talked
    agents = {k.split(":")[1] for k in big if k.startswith("memory:scheduler-")}
    assert agents and all(re.fullmatch(r"scheduler-[a-z-]+-\d{13}", a) for a in agents)
    assert {a.split("-")[1] for a in agents} <= {"cron", "trigger", "webhook"}
    for record in docs(big, "memory:scheduler-").values():
        assert record["sourceSessionId"] in runs
        assert f"lineage:{record['lineageId']}" in big
        assert (
            json.loads(big[f"lineage:{record['lineageId']}"])["sessionId"]
            == record["sourceSessionId"]
        )
    lists = [k for k in big if k.startswith("todos:scheduler-")]
    assert lists and all(re.fullmatch(r"todos:scheduler-[a-z-]+-\d{13}", k) for k in lists)
    sources = {r["source"] for r in docs(big, "trigger:last:").values()}
    assert "trigger" in sources and any(s.startswith("cron:") for s in sources)
    assert any(s.startswith("webhook:") for s in sources)
    assert {k.removeprefix("trigger:last:") for k in big if k.startswith("trigger:")} == sources
    for record in docs(big, "cron:").values():
        assert record["enabled"] is True  # the gateway deletes a job, it never disables one


def test_pairing_workflow_versions_and_notifications(big: dict[str, str]) -> None:
    now = to_iso(ANCHOR)
    codes = {k: r for k, r in docs(big, "pairing:").items() if "linked" not in k}
    assert list(next(iter(codes.values()))) == ["code", "channelType", "expiresAt", "used"]
    pending = [k for k, r in codes.items() if r["expiresAt"] > now]
    assert pending and any(k.startswith("pairing:pending:") for k in pending)
    for key, record in docs(big, "pairing:linked:").items():
        assert key == f"pairing:linked:{record['channelType']}:{record['platformUserId']}"
    versions = docs(big, "workflow-versions:")
    assert versions
    for key, record in versions.items():
        assert list(record) == ["version", "classification"]
        version = record["version"]
        assert key == f"workflow-versions:{version['workflowName']}:{version['versionId']}"
        assert f"workflows:{version['workflowName']}" in big
        assert ("resolvedAt" in version) == (version["status"] != "PROPOSED")
    for record in docs(big, "notifications:").values():
        assert list(record) == [
            f
            for f in ("id", "userId", "message", "priority", "classification", "createdAt")
            if f in record
        ]
