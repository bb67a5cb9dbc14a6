"""Issue 35: a partial backup (``--max-taint``) fails closed, and ``verify`` checks the same rule.

``backup create --logical --max-taint PUBLIC`` kept records whose level it could
not read (``"restricted"``, ``"TOP_SECRET"``, ``["RESTRICTED"]``), a cron job whose
``classificationCeiling`` is RESTRICTED, and todo lists and notifications that
state no level. Now a row is kept only when its level is established and at or
below the ceiling; the others are left out and counted (output and manifest).
The create, restore and verify runs use the installed console script.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway import memory_record, write_gateway_store
from tests.helpers.memories import MAIN, mkey
from tests.helpers.terminal import SCRIPT

SESSION = "0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f"


def message(seq: int, classification: object) -> tuple[str, str]:
    document = {
        "message_id": f"1c2d3e4f-5061-4728-939a-4b5c6d7e8f{seq:02d}",
        "session_id": SESSION,
        "role": "assistant",
        "content": f"secret text {seq}",
        "classification": classification,
        "timestamp": "2026-03-28T15:00:00.000Z",
        "sequence": seq,
        "compacted": False,
    }
    return f"conv:{SESSION}:{seq:012d}", json.dumps(document, separators=(",", ":"))


def cron(job: str, **fields: object) -> tuple[str, str]:
    document = {
        "id": job,
        "expression": "0 7 * * *",
        "task": "summarise the deal room",
        **fields,
        "createdAt": "2026-03-01T07:00:00.000Z",
        "enabled": True,
    }
    return f"cron:{job}", json.dumps(document)


def notification(uuid: str, **fields: object) -> tuple[str, str]:
    document = {
        "id": uuid,
        "userId": "owner",
        "message": "the merger closes Friday",
        "priority": "normal",
        **fields,
        "createdAt": "2026-03-28T15:00:00.000Z",
    }
    return f"notifications:owner:{uuid}", json.dumps(document)


#: Rows a partial backup at PUBLIC must leave out, by namespace.
LEFT_OUT = dict(
    [
        message(0, "restricted"),
        message(1, "TOP_SECRET"),
        message(2, ["RESTRICTED"]),
        message(3, None),
        message(4, "CONFIDENTIAL"),
        cron("5d1e", classificationCeiling="RESTRICTED"),
        cron("6e2f"),  # no ceiling: it cannot be established
        notification("7f30"),
        notification("8041", classification="restricted"),
        (
            "todos:main-session",
            '{"todos":[{"id":"t1","content":"call the lawyer about Globex",'
            '"status":"pending","priority":"high","created_at":"2026-03-28T15:00:00.000Z",'
            '"updated_at":"2026-03-28T15:00:00.000Z"}]}',
        ),
        (
            "cron-history:5d1e",
            '[{"jobId":"5d1e","executedAt":"2026-03-28T07:00:00.000Z",'
            '"durationMs":812,"success":false,"error":"tool failed: Globex term sheet"}]',
        ),
        ("audit:2026-03-28T15:00:00.000Z:admin_memory_search", '{"query":"globex merger"}'),
        ("lineage:2d3e4f50-6172-4839-a4ab-5c6d7e8f9012", '{"classification":{"level":"secret"}}'),
        ("workflows:deal", '{"name":"deal","yaml":"steps: []","classification":"INTERNAL"}'),
        ("custom:thing", '{"note":"anything at all"}'),
        (mkey(MAIN, "PUBLIC", "lower"), memory_record("lower", "restricted", "Globex")),
    ]
)
#: Rows it keeps: their level is established and PUBLIC, or they hold no content.
KEPT = dict(
    [
        message(5, "PUBLIC"),
        cron("9152", classificationCeiling="PUBLIC"),
        notification("a263", classification="PUBLIC"),
        (
            "trigger:last:trigger",
            '{"id":"x","source":"trigger","message":"ok",'
            '"classification":"PUBLIC","firedAt":"2026-03-28T15:00:00.000Z"}',
        ),
        (
            f"sessions:{SESSION}",
            '{"id":"s","taint":"RESTRICTED","createdAt":"2026-03-28T15:00:00.000Z"}',
        ),
        (f"conv-session:{SESSION}", '{"lastSequence":5}'),
        (f"lineage-session:{SESSION}:2d3e", "2d3e4f50-6172-4839-a4ab-5c6d7e8f9012"),
        ("main-session-id", '{"id":"m","createdAt":"2026-03-28T15:00:00.000Z"}'),
        ("prefs:owner:bumpers_default", "true"),
        ("browser:profile:main-session:watermark", "CONFIDENTIAL"),
        ("custom:labelled", '{"classification":"PUBLIC","note":"says its level"}'),
        (mkey(MAIN, "PUBLIC", "name"), memory_record("name", "PUBLIC", "Alice")),
        (mkey(MAIN, "PUBLIC", "broken"), '{"key":"broken","content":'),  # the key says PUBLIC
    ]
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, env=dict(os.environ), timeout=120
    )


def store(path: Path, rows: dict[str, str]) -> Path:
    return write_gateway_store(path, rows, ())


def kv(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT key, value FROM kv WHERE key NOT LIKE 'audit:%'"))


def test_rows_of_no_established_level_are_left_out_and_counted(tmp_path: Path) -> None:
    db = store(tmp_path / "store.db", {**LEFT_OUT, **KEPT})
    made = run(
        "--db",
        str(db),
        "backup",
        "create",
        "--logical",
        "--max-taint",
        "PUBLIC",
        "--to",
        str(tmp_path / "b"),
        "-f",
        "json",
    )
    assert made.returncode == 0, made.stderr
    document = json.loads(made.stdout)
    expected: dict[str, int] = {}
    for key in LEFT_OUT:
        group = key.split(":", 1)[0] + ":"
        expected[group] = expected.get(group, 0) + 1
    assert document["partial"]["left_out_by_namespace"] == expected
    assert document["partial"]["left_out"] == len(LEFT_OUT)
    manifest = document["manifest"]
    assert manifest["left_out"] == len(LEFT_OUT) and manifest["left_out_by_namespace"] == expected
    assert manifest["keys"] == len(KEPT)
    archive = tmp_path / "b" / document["name"]

    verified = run("backup", "verify", str(archive))
    assert verified.returncode == 0, verified.stderr
    assert "partial: nothing above PUBLIC" in verified.stdout
    listed = run("backup", "verify", str(archive), "-f", "json")
    assert json.loads(listed.stdout)[0]["ok"] is True

    restored = tmp_path / "restored.db"
    done = run("backup", "restore", str(archive), "--to", str(restored), "--yes")
    assert done.returncode == 0, done.stderr
    assert kv(restored) == KEPT  # exactly: nothing left out came back

    table = run(
        "--db",
        str(db),
        "backup",
        "create",
        "--logical",
        "--max-taint",
        "PUBLIC",
        "--to",
        str(tmp_path / "b"),
    )
    assert table.returncode == 0, table.stderr
    line = table.stdout.splitlines()[-1]  # the first backup's audit record is left out too
    assert line.startswith(f"partial: nothing above PUBLIC ({len(LEFT_OUT) + 1} row(s) left out")
    assert "of no established level: audit: 2, conv: 5, " in line and "todos: 1" in line


def _mark_partial(archive: Path, level: str) -> None:
    from tests.backup.test_backup import _rewrite_manifest

    _rewrite_manifest(archive, {"partial": True, "max_taint": level})


def _full_backup(tmp_path: Path, rows: dict[str, str]) -> Path:
    db = store(tmp_path / "one.db", rows)
    made = run(
        "--db", str(db), "backup", "create", "--logical", "--to", str(tmp_path / "b"), "-f", "json"
    )
    assert made.returncode == 0, made.stderr
    document: dict[str, Any] = json.loads(made.stdout)
    return tmp_path / "b" / document["name"]


@pytest.mark.parametrize("key", sorted(LEFT_OUT))
def test_verify_fails_a_partial_archive_holding_a_row_it_must_leave_out(
    tmp_path: Path, key: str
) -> None:
    """A logical archive whose manifest (payload hash intact) says partial at PUBLIC, but
    which holds one row the rule leaves out: verification failed, exit 5."""
    archive = _full_backup(tmp_path, {**KEPT, key: LEFT_OUT[key]})
    _mark_partial(archive, "PUBLIC")
    failed = run("backup", "verify", str(archive))
    assert failed.returncode == 5, failed.stderr
    assert "1 row(s) classified above PUBLIC or of a level that cannot be established" in (
        failed.stderr + failed.stdout
    )


def test_verify_passes_a_partial_archive_that_keeps_the_rule(tmp_path: Path) -> None:
    archive = _full_backup(tmp_path, KEPT)
    _mark_partial(archive, "PUBLIC")
    passed = run("backup", "verify", str(archive))
    assert passed.returncode == 0, passed.stderr + passed.stdout


def test_the_manifest_records_the_rows_left_out_and_reads_them_back() -> None:
    from triggerfish_cli.backup.manifest import Manifest
    from triggerfish_cli.errors import InvalidDataError

    made = Manifest(
        "logical",
        "2026-03-28T15:00:00.000Z",
        "sqlite:/x.db",
        "sqlite",
        "zstd",
        payload_sha256="0" * 64,
        max_taint="PUBLIC",
        left_out={"todos:": 2, "conv:": 1},
    )
    document = made.as_dict()
    assert document["left_out"] == 3
    assert document["left_out_by_namespace"] == {"conv:": 1, "todos:": 2}
    assert Manifest.from_dict(document, "m").left_out == {"conv:": 1, "todos:": 2}
    older = {k: v for k, v in document.items() if not k.startswith("left_out")}
    assert Manifest.from_dict(older, "m").left_out is None  # archives made before it
    for wrong in ({"left_out": 4}, {"left_out_by_namespace": {"todos:": "2"}}, {"partial": False}):
        with pytest.raises(InvalidDataError, match="manifest field"):
            Manifest.from_dict({**document, **wrong}, "m")
