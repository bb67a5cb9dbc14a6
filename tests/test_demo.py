"""`demo create`: a deterministic store shaped exactly like the gateway's."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import dump_tables
from triggerfish_cli import namespaces

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
        if ns.has_age and ns.prefix not in ("pairing:", "workflow-runs:"):
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
    assert "wrote 300 keys" in result.stdout
    memory = cli("--backend", "memory", "demo", "create", "--records", "200", "-f", "json")
    assert memory.exit_code == 0 and memory.json()["records"] == 200


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01T00:00:00Z"])
def test_bad_now_is_a_usage_error(cli: CliFn, bad: str) -> None:
    assert cli("demo", "create", "--now", bad).exit_code == 2
