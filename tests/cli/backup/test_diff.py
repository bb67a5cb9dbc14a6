"""``backup diff A B``: keys added, removed and changed per namespace (#18, like restic diff)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn
from tests.helpers.memories import MAIN, mkey, write_memory_store
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

ODD = "odd:\x1b[31mred\nline"


@pytest.fixture
def db(base_dir: Path) -> Path:
    return write_memory_store(base_dir / "data" / "triggerfish.db")


def backup(cli: CliFn, *args: str) -> str:
    run = cli("backup", "create", "-f", "json", *args)
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    return str(document["name"])


def change(db: Path) -> dict[str, list[str]]:
    """Add, remove and change some keys behind the tool's back; what was done."""
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        session = conn.execute("SELECT key FROM kv WHERE key LIKE 'sessions:%'").fetchone()[0]
        cron = conn.execute("SELECT key FROM kv WHERE key LIKE 'cron:%'").fetchone()[0]
        conn.execute("DELETE FROM kv WHERE key = ?", (session,))
        conn.execute("UPDATE kv SET value = '\"changed\"' WHERE key = ?", (cron,))
        conn.executemany(
            "INSERT INTO kv (key, value) VALUES (?, ?)", [("extra:1", "1"), (ODD, "2")]
        )
    return {"added": ["extra:1", ODD], "removed": [session], "changed": [cron]}


def diff(cli: CliFn, *args: str) -> dict[str, Any]:
    run = cli("backup", "diff", *args, "-f", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    return document


def without_audit(document: dict[str, Any]) -> dict[str, Any]:
    return {ns: c for ns, c in document["namespaces"].items() if ns != "audit:"}


@pytest.mark.parametrize("kind", ["physical", "logical"])
def test_a_backup_against_the_live_store(cli: CliFn, db: Path, tmp_path: Path, kind: str) -> None:
    name = backup(cli, *(["--logical"] if kind == "logical" else []))
    done = change(db)
    scratch = tmp_path / "scratch"
    document = diff(cli, name, "--keys", "--scratch", str(scratch))
    assert document["from"]["name"] == name and document["to"]["kind"] == "live"
    assert document["identical"] is False
    assert without_audit(document) == {
        "cron:": {"added": 0, "removed": 0, "changed": 1},
        "extra:": {"added": 1, "removed": 0, "changed": 0},
        "odd:": {"added": 1, "removed": 0, "changed": 0},
        "sessions:": {"added": 0, "removed": 1, "changed": 0},
    }
    keys = document["keys"]
    for what, listed in done.items():
        assert set(listed) <= set(keys[what])
    assert [k for k in keys["added"] if not k.startswith("audit:")] == sorted(done["added"])
    assert document["totals"]["removed"] == 1 and document["totals"]["changed"] == 1
    assert scratch.is_dir() and list(scratch.iterdir()) == []  # the scratch copy is gone

    same = cli("backup", "diff", "--latest")  # the same as `backup diff --latest current`
    assert same.exit_code == 0, same.stderr
    assert "differ: " in same.stdout and "sessions:" in same.stdout
    table = cli("backup", "diff", name, "current", "--keys")
    assert table.exit_code == 0
    assert "+ odd:\\x1b[31mred\\nline" in table.stdout  # escaped, on one line
    assert "\x1b" not in table.stdout
    assert f"- {done['removed'][0]}" in table.stdout and f"M {done['changed'][0]}" in table.stdout


def test_two_backups_of_either_kind_and_the_exit_code(cli: CliFn, db: Path) -> None:
    physical = backup(cli)
    change(db)
    logical = backup(cli, "--logical")
    document = diff(cli, physical, logical)
    assert document["from"]["kind"] == document["to"]["kind"] == "backup"
    assert without_audit(document)["sessions:"] == {"added": 0, "removed": 1, "changed": 0}
    assert "keys" not in document

    differ = cli("backup", "diff", physical, logical, "--exit-code")
    assert differ.exit_code == 1 and "differ:" in differ.stdout
    quiet = cli("backup", "diff", physical, logical, "--exit-code", "-q")
    assert quiet.exit_code == 1 and quiet.stdout == ""
    same = cli("backup", "diff", logical, logical, "--exit-code")
    assert same.exit_code == 0 and "identical: 0 added, 0 removed, 0 changed" in same.stdout
    assert cli("backup", "diff", physical, logical).exit_code == 0  # differ: still 0 without it


def _audits(db: Path) -> list[dict[str, Any]]:
    with SqliteStorage(db) as store:
        return [json.loads(v) for k, v in store.scan("audit:") if k.endswith(":admin_kv_raw_read")]


def test_memory_rows_follow_the_raw_views_taint_and_audit_rules(cli: CliFn, db: Path) -> None:
    name = backup(cli, "--logical")
    secret = mkey(MAIN, "RESTRICTED", "merger")
    internal = mkey(MAIN, "INTERNAL", "project-plan")
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        for key in (secret, internal):
            conn.execute("UPDATE kv SET value = replace(value, 'Q3', 'Q4') WHERE key = ?", (key,))
            conn.execute(
                "UPDATE kv SET value = replace(value, 'postgres', 'mysql') WHERE key = ?", (key,)
            )

    counted = diff(cli, name)  # counts name nothing: no audit record
    assert counted["namespaces"]["memory:"]["changed"] == 2
    assert _audits(db) == []

    run = cli("backup", "diff", name, "--keys")
    assert run.exit_code == 0, run.stderr
    assert f"M {secret}" in run.stdout and f"M {internal}" in run.stdout
    for text in ("Globex", "Q4", "mysql", "Merger"):
        assert text not in run.stdout + run.stderr  # never content
    (record,) = _audits(db)
    assert record["command"] == "backup diff" and record["keys"] == [internal, secret]
    assert record["counts"] == {"memory_rows": 2, "INTERNAL": 1, "RESTRICTED": 1}

    low = diff(cli, name, "--keys", "--taint", "INTERNAL")
    assert low["taint"] == "INTERNAL"
    assert low["namespaces"]["memory:"]["changed"] == 1  # the RESTRICTED one is left out
    assert secret not in json.dumps(low) and internal in low["keys"]["changed"]
    assert len(_audits(db)) == 2  # the INTERNAL key it named is audited, as kv list does
    table = cli("backup", "diff", name, "--taint", "PUBLIC")
    assert "memory rows above PUBLIC left out" in table.stdout
    assert "memory:" not in table.stdout


def test_a_partial_backup_is_named_partial(cli: CliFn, db: Path) -> None:
    """A partial backup against the store it came from: what it left out shows as added."""
    name = backup(cli, "--logical", "--max-taint", "INTERNAL")
    table = cli("backup", "diff", name, "--taint", "INTERNAL")
    assert "partial: nothing above INTERNAL" in table.stdout
    document = diff(cli, name)
    assert document["from"]["partial"] is True and document["from"]["max_taint"] == "INTERNAL"
    assert document["namespaces"]["memory:"]["added"] > 0 and "keys" not in document
    # at INTERNAL only the row whose key says PUBLIC but whose record claims RESTRICTED
    # (left out of the partial backup by its record) shows
    low = diff(cli, name, "--taint", "INTERNAL", "--keys")
    assert [k for k in low["keys"]["added"] if k.startswith("memory:")] == [
        mkey(MAIN, "PUBLIC", "liar")
    ]


def test_a_damaged_backup_is_no_diff(cli: CliFn, db: Path) -> None:
    from tests.backup.test_backup import _damage

    name = backup(cli, "--logical")
    archive = db.parent.parent / "backups" / "store" / name
    _damage("flipped byte", archive)
    run = cli("backup", "diff", str(archive))
    assert run.exit_code == 5 and "no diff" in run.stderr
    assert cli("backup", "diff").exit_code == 2
    assert cli("backup", "diff", "--latest", "a", "b").exit_code == 2
    assert cli("backup", "diff", "no-such-backup.jsonl.zst").exit_code == 3


@pytest.mark.parametrize("kind", ["physical", "logical"])
def test_an_encrypted_backup_needs_its_identity(
    cli: CliFn, db: Path, tmp_path: Path, kind: str
) -> None:
    identity = tmp_path / "keys" / "backup.key"
    identity.parent.mkdir()
    keyed = cli("backup", "keygen", "-o", str(identity))
    assert keyed.exit_code == 0, keyed.stderr
    extra = ["--logical"] if kind == "logical" else []
    name = backup(cli, *extra, "-r", keyed.stdout.strip())
    change(db)
    refused = cli("backup", "diff", name)
    assert refused.exit_code == 2 and "--identity" in refused.stderr
    document = diff(cli, name, "--identity", str(identity))
    assert without_audit(document)["sessions:"] == {"added": 0, "removed": 1, "changed": 0}
    assert document["from"]["keys"] > 0
