"""``backup create --logical --max-taint LEVEL``: a partial copy for a lower clearance (#18).

Nothing above the level is in the archive, nor comes back in the store a
restore produces (kv, memory_fts, memory_meta); the manifest, list, verify
and restore all say the backup is partial.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import write_gateway_store
from tests.helpers.memories import current_rows, write_memory_store
from triggerfish_cli.backup.archive import read_manifest
from triggerfish_cli.classification import Level
from triggerfish_cli.memory.keys import split_key

#: Words only the memories above INTERNAL hold (CONFIDENTIAL and RESTRICTED ones).
HIDDEN_WORDS = ("passport", "Globex", "Marie", "vault", "merger", "claim")


@pytest.fixture
def db(base_dir: Path) -> Path:
    return write_memory_store(base_dir / "data" / "triggerfish.db")


def create(cli: CliFn, *args: str) -> dict[str, Any]:
    run = cli("backup", "create", "--format", "json", *args)
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    return document


def tables(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        found = {"kv": conn.execute("SELECT key, value FROM kv").fetchall()}
        for name in ("memory_fts", "memory_meta"):
            found[name] = conn.execute(
                f"SELECT agent_id, classification, key, * FROM {name}"
            ).fetchall()
    return found


def test_a_partial_backup_restores_nothing_above_its_level(
    cli: CliFn, db: Path, tmp_path: Path
) -> None:
    document = create(cli, "--logical", "--max-taint", "INTERNAL", "--to", str(tmp_path / "b"))
    manifest = document["manifest"]
    assert manifest["partial"] is True and manifest["max_taint"] == "INTERNAL"
    assert set(manifest["memories"]) == {"PUBLIC", "INTERNAL"}
    above = [
        key for key in current_rows()
        if key.startswith("memory:") and (split_key(key) is None or split_key(key)[1] > 1)
    ]  # fmt: skip
    # the "liar" row (key PUBLIC, record RESTRICTED) is left out too
    assert document["partial"]["left_out"] >= len(above) + 1
    assert document["partial"]["left_out_by_namespace"]["memory:"] == len(above) + 1
    archive = Path(document["destination"]) / document["name"]
    assert read_manifest(archive).max_taint == "INTERNAL"

    # a gateway store with its (empty) search tables, and one made by the restore
    gateway = write_gateway_store(tmp_path / "gw" / "triggerfish.db", {})
    fresh = tmp_path / "fresh" / "triggerfish.db"
    for target in (gateway, fresh):
        run = cli("backup", "restore", str(archive), "--to", str(target), "--yes")
        assert run.exit_code == 0, run.stderr
        assert "partial: nothing above INTERNAL" in run.stdout
        found = tables(target)
        for table, rows in found.items():
            text = json.dumps(rows, ensure_ascii=False)
            for word in HIDDEN_WORDS:
                assert word not in text, (table, word)
        for key, _value in found["kv"]:
            if key.startswith("memory:"):
                parts = split_key(key)
                assert parts is not None and parts[1] <= Level.INTERNAL, key
        for table in ("memory_fts", "memory_meta"):
            assert found[table], table  # the index was rebuilt for what is there
            assert {row[1] for row in found[table]} <= {"PUBLIC", "INTERNAL"}
        for word in HIDDEN_WORDS:
            hits = cli("--db", str(target), "memory", "search", word, "--taint", "RESTRICTED",
                       "-f", "json")  # fmt: skip
            assert hits.exit_code == 0, hits.stderr
            assert hits.json() == [], word
        hits = cli("--db", str(target), "memory", "search", "Alice", "--taint", "RESTRICTED",
                   "-f", "json")  # fmt: skip
        levels = {hit["level"] for hit in hits.json()}  # type: ignore[union-attr]
        assert levels and levels <= {"PUBLIC", "INTERNAL"}


def test_records_classified_above_the_level_are_left_out_too(
    cli: CliFn, db: Path, tmp_path: Path
) -> None:
    """A memory read in a chat lands in a conversation message classified at the
    session's taint: such messages (and lineage) above the level are left out."""
    session = "0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f"
    message = {
        "message_id": "1c2d3e4f-5061-4728-939a-4b5c6d7e8f90",
        "session_id": session,
        "role": "tool_call",
        "content": "memory_search: Alice's passport number is X1234567",
        "classification": "RESTRICTED",
        "timestamp": "2026-03-28T15:00:00.000Z",
        "sequence": 0,
        "compacted": False,
    }
    lineage = {"lineage_id": "x", "classification": {"level": "CONFIDENTIAL", "reason": "r"}}
    low = {**message, "content": "hello", "classification": "INTERNAL", "sequence": 1}
    rows = {
        f"conv:{session}:000000000000": json.dumps(message),
        f"conv:{session}:000000000001": json.dumps(low),
        f"conv-session:{session}": '{"lastSequence":1}',
        "lineage:2d3e4f50-6172-4839-a4ab-5c6d7e8f9012": json.dumps(lineage),
    }
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?)", rows.items())
    document = create(cli, "--logical", "--max-taint", "INTERNAL", "--to", str(tmp_path / "b"))
    left_out = document["partial"]["left_out_by_namespace"]
    assert left_out["conv:"] >= 1 and left_out["lineage:"] >= 1
    archive = Path(document["destination"]) / document["name"]
    fresh = tmp_path / "fresh.db"
    assert cli("backup", "restore", str(archive), "--to", str(fresh), "--yes").exit_code == 0
    kept = dict(tables(fresh)["kv"])
    assert f"conv:{session}:000000000000" not in kept
    assert "lineage:2d3e4f50-6172-4839-a4ab-5c6d7e8f9012" not in kept
    assert kept[f"conv:{session}:000000000001"] == rows[f"conv:{session}:000000000001"]
    assert f"conv-session:{session}" in kept and "main-session-id" in kept  # no level: kept
    assert "X1234567" not in json.dumps(kept)


def test_list_verify_and_the_restore_dry_run_say_it_is_partial(
    cli: CliFn, db: Path, tmp_path: Path
) -> None:
    full = create(cli, "--logical")
    partial = create(cli, "--logical", "--max-taint", "CONFIDENTIAL", "--label", "handover")
    listed = cli("backup", "list", "--format", "json").json()
    assert isinstance(listed, list)
    by_name = {row["name"]: row for row in listed}
    assert by_name[partial["name"]]["partial"] is True
    assert by_name[partial["name"]]["max_taint"] == "CONFIDENTIAL"
    assert by_name[full["name"]]["partial"] is False and by_name[full["name"]]["max_taint"] is None
    table = cli("backup", "list")
    line = next(row for row in table.stdout.splitlines() if "handover" in row)
    assert "<= CONFIDENTIAL" in line

    verified = cli("backup", "verify", partial["name"])
    assert verified.exit_code == 0, verified.stderr
    assert "partial: nothing above CONFIDENTIAL" in verified.stdout
    document = cli("backup", "verify", partial["name"], "-f", "json").json()
    assert isinstance(document, list) and document[0]["max_taint"] == "CONFIDENTIAL"

    dry = cli("backup", "restore", partial["name"], "--replace", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert "would restore" in dry.stdout and "partial: nothing above CONFIDENTIAL" in dry.stdout
    dry_json = cli("backup", "restore", partial["name"], "--replace", "--dry-run", "-f", "json")
    assert dry_json.json()["partial"] is True  # type: ignore[index]
    assert dry_json.json()["max_taint"] == "CONFIDENTIAL"  # type: ignore[index]


def test_a_partial_archive_holding_a_row_above_its_level_fails_verification(
    cli: CliFn, db: Path, tmp_path: Path
) -> None:
    """The manifest's promise is checked: a doctored full backup passed off as partial fails."""
    from tests.backup.test_backup import _rewrite_manifest

    document = create(cli, "--logical", "--to", str(tmp_path / "b"))
    archive = Path(document["destination"]) / document["name"]
    _rewrite_manifest(archive, {"partial": True, "max_taint": "PUBLIC"})
    run = cli("backup", "verify", str(archive))
    assert run.exit_code == 5
    assert "classified above PUBLIC" in run.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--max-taint", "INTERNAL"), "--max-taint needs --logical"),
        (("--logical", "--max-taint", "SECRET"), "unknown classification level"),
        (("--logical", "--max-taint", "internal"), "unknown classification level"),
    ],
)
def test_max_taint_is_refused_without_logical_or_with_a_bad_level(
    cli: CliFn, db: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    target = tmp_path / "b"
    run = cli("backup", "create", "--to", str(target), *args)
    assert run.exit_code == 2
    assert message in run.stderr
    assert not target.exists()  # refused before anything was made
