"""Interop: what `memory save`, `delete`, `purge` and `reindex` leave is what the gateway writes.

Each test runs our command on one copy of a gateway store and the gateway's own
statements (tests/helpers/gateway.py, written from UPSTREAM.md) on another,
then compares every table.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from tests.conftest import CliFn
from tests.helpers.gateway import dump_tables, gateway_index, gateway_remove
from tests.helpers.memories import MAIN, mkey, write_memory_store
from triggerfish_cli.serialization import parse_iso


def without_audit(
    tables: dict[str, list[tuple[object, ...]]],
) -> dict[str, list[tuple[object, ...]]]:
    out = dict(tables)
    out["kv"] = [row for row in tables["kv"] if not str(row[0]).startswith("audit:")]
    return out


def fts_rows(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return sorted(conn.execute("SELECT * FROM memory_fts").fetchall(), key=repr)
    finally:
        conn.close()


def copies(base: Path, tmp_path: Path) -> tuple[Path, Path]:
    write_memory_store(base)
    theirs = tmp_path / "gateway.db"
    shutil.copyfile(base, theirs)
    return base, theirs


def js(document: object) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def kv_value(path: Path, key: str) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()[0])
    finally:
        conn.close()


def gateway_writes(path: Path, key: str, value: str | None, index: bool) -> None:
    """storage.set(key, value) (or delete) followed by the search provider's index/remove."""
    conn = sqlite3.connect(path)
    if value is None:
        conn.execute("DELETE FROM kv WHERE key = ?", (key,))
    else:
        conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
    if index and value is not None:
        gateway_index(conn, value)
    else:
        _, agent, level, memory_key = key.split(":", 3)
        gateway_remove(conn, agent, level, memory_key)
    conn.commit()
    conn.close()


def test_save_new_memory(cli: CliFn, base_dir: Path, tmp_path: Path) -> None:
    ours, theirs = copies(base_dir / "data" / "triggerfish.db", tmp_path)
    result = cli(
        "memory",
        "save",
        "home:city",
        "Lives in Tromsø",
        "--tags",
        "persona,travel",
        "-t",
        "CONFIDENTIAL",
        "-f",
        "json",
    )
    assert result.exit_code == 0, result.stderr
    key = mkey(MAIN, "CONFIDENTIAL", "home:city")
    stamp = json.loads(kv_value(ours, key))["updatedAt"]
    assert parse_iso(stamp) is not None and len(stamp) == 24 and stamp.endswith("Z")
    expected = js(
        {
            "key": "home:city",
            "agentId": "main-session",
            "classification": "CONFIDENTIAL",
            "content": "Lives in Tromsø",
            "tags": ["persona", "travel"],
            "createdAt": stamp,
            "updatedAt": stamp,
            "expired": False,
            "sourceSessionId": "triggerfish-admin",
        }
    )
    gateway_writes(theirs, key, expected, index=True)
    assert without_audit(dump_tables(ours)) == dump_tables(theirs)
    assert fts_rows(ours) == fts_rows(theirs)


def test_save_over_an_indexed_memory_replaces_its_rows(
    cli: CliFn, base_dir: Path, tmp_path: Path
) -> None:
    ours, theirs = copies(base_dir / "data" / "triggerfish.db", tmp_path)
    key = mkey(MAIN, "INTERNAL", "user-name")
    before = json.loads(kv_value(ours, key))
    assert (
        cli("memory", "save", "user-name", "Alice, call her Ali", "-t", "INTERNAL").exit_code == 0
    )
    stamp = json.loads(kv_value(ours, key))["updatedAt"]
    expected = js(
        {
            "key": "user-name",
            "agentId": "main-session",
            "classification": "INTERNAL",
            "content": "Alice, call her Ali",
            "tags": [],
            "createdAt": before["createdAt"],
            "updatedAt": stamp,
            "expired": False,
            "sourceSessionId": "triggerfish-admin",
        }
    )
    gateway_writes(theirs, key, expected, index=True)
    assert without_audit(dump_tables(ours)) == dump_tables(theirs)
    assert fts_rows(ours) == fts_rows(theirs)


def test_delete_memory(cli: CliFn, base_dir: Path, tmp_path: Path) -> None:
    ours, theirs = copies(base_dir / "data" / "triggerfish.db", tmp_path)
    key = mkey(MAIN, "CONFIDENTIAL", "user-name")
    before = json.loads(kv_value(ours, key))
    assert cli("memory", "delete", "user-name", "-t", "CONFIDENTIAL", "--yes").exit_code == 0
    stamp = json.loads(kv_value(ours, key))["updatedAt"]
    assert stamp > before["updatedAt"]
    gateway_writes(theirs, key, js({**before, "expired": True, "updatedAt": stamp}), index=False)
    assert without_audit(dump_tables(ours)) == dump_tables(theirs)
    assert fts_rows(ours) == fts_rows(theirs)


def test_purge(cli: CliFn, base_dir: Path, tmp_path: Path) -> None:
    ours, theirs = copies(base_dir / "data" / "triggerfish.db", tmp_path)
    result = cli(
        "memory", "purge", "--older-than", "1d", "-t", "RESTRICTED", "-A", "--yes", "-f", "json"
    )
    assert result.exit_code == 0, result.stderr
    assert result.json()["deleted"] == 3  # type: ignore[index]
    for level, key in (
        ("PUBLIC", "old-fact"),
        ("CONFIDENTIAL", "project-plan"),
        ("RESTRICTED", "old-secret"),
    ):
        gateway_writes(theirs, mkey(MAIN, level, key), None, index=False)
    assert without_audit(dump_tables(ours)) == dump_tables(theirs)
    assert fts_rows(ours) == fts_rows(theirs)


def test_reindex_builds_what_the_gateway_would_have_indexed(
    cli: CliFn, base_dir: Path, tmp_path: Path
) -> None:
    ours, theirs = copies(base_dir / "data" / "triggerfish.db", tmp_path)
    assert cli("memory", "reindex", "-t", "RESTRICTED").exit_code == 0
    conn = sqlite3.connect(theirs)  # the gateway saving every live record once more
    conn.execute("DELETE FROM memory_fts")
    conn.execute("DELETE FROM memory_meta")
    for key, value in conn.execute(
        "SELECT key, value FROM kv WHERE key LIKE 'memory:%'"
    ).fetchall():
        try:
            record = json.loads(value)
        except ValueError:
            continue
        if key.split(":", 3)[2] == record.get("classification") and not record["expired"]:
            gateway_index(conn, value)
    conn.commit()
    conn.close()
    assert without_audit(dump_tables(ours)) == dump_tables(theirs)
    assert fts_rows(ours) == fts_rows(theirs)
