"""The raw view of memory rows: audited above PUBLIC, and a set taint is honoured, never ignored."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import CliFn
from tests.helpers.memories import MAIN, current_rows, mkey, write_memory_store
from triggerfish_cli.storage.sqlite.backend import SqliteStorage


def audits(db: Path, action: str) -> list[dict[str, object]]:
    with SqliteStorage(db) as store:
        return [
            json.loads(value)
            for key, value in store.scan("audit:")
            if key.endswith(f":admin_{action}")
        ]


def memory_db(base: Path) -> Path:
    return write_memory_store(base / "data" / "triggerfish.db")


def test_raw_reads_of_memory_rows_above_public_are_audited_keys_never_content(
    cli: CliFn, base_dir: Path
) -> None:
    db = memory_db(base_dir)
    secret = mkey(MAIN, "RESTRICTED", "user-name")
    result = cli("kv", "get", secret, "--raw")
    assert result.exit_code == 0, result.stderr
    assert "passport" in result.stdout  # the raw view shows it, like sqlite3 would
    (record,) = audits(db, "kv_raw_read")
    text = json.dumps(record)
    assert secret in text and "passport" not in text and "X1234567" not in text
    assert record["counts"] == {"memory_rows": 1, "RESTRICTED": 1}
    assert record["target"] == secret

    for args in (("kv", "list", "memory:"), ("kv", "export", "memory:"), ("kv", "list", "-k")):
        assert cli(*args).exit_code == 0
    records = audits(db, "kv_raw_read")
    assert len(records) == 4
    above = {k for k in current_rows() if k.startswith("memory:") and ":PUBLIC:" not in k}
    for record in records[1:]:
        counts = record["counts"]
        assert isinstance(counts, dict) and counts["memory_rows"] == len(above)
        assert set(record["keys"]) == above  # type: ignore[arg-type]
        assert "passport" not in json.dumps(record)


def test_raw_reads_of_public_rows_and_other_keys_leave_no_record(
    cli: CliFn, base_dir: Path
) -> None:
    db = memory_db(base_dir)
    assert cli("kv", "get", mkey(MAIN, "PUBLIC", "user-name")).exit_code == 0
    assert cli("kv", "list", "sessions:").exit_code == 0
    assert cli("kv", "export", "conv:").exit_code == 0
    assert audits(db, "kv_raw_read") == []


def test_a_set_taint_is_honoured_by_the_raw_view(cli: CliFn, base_dir: Path) -> None:
    memory_db(base_dir)
    secret = mkey(MAIN, "RESTRICTED", "user-name")
    internal = mkey(MAIN, "INTERNAL", "user-name")
    for env, flag in (({"TRIGGERFISH_TAINT": "INTERNAL"}, ()), ({}, ("--taint", "INTERNAL"))):
        refused = cli("kv", "get", secret, *flag, env=env)
        assert refused.exit_code == 4
        assert "RESTRICTED" in refused.stderr and "INTERNAL" in refused.stderr
        assert "passport" not in refused.stdout + refused.stderr
        assert cli("kv", "get", internal, *flag, env=env).exit_code == 0
        listed = cli("kv", "list", "memory:", "-k", *flag, env=env)
        assert listed.exit_code == 0
        assert secret not in listed.stdout and internal in listed.stdout
        exported = cli("kv", "export", *flag, env=env)
        keys = [json.loads(line)["key"] for line in exported.stdout.splitlines()]
        assert internal in keys and secret not in keys and "main-session-id" in keys
        assert not any(":CONFIDENTIAL:" in key or ":RESTRICTED:" in key for key in keys)
    bad = cli("kv", "list", "--taint", "SECRET")
    assert bad.exit_code == 2


def test_the_sample_a_prefix_delete_names_is_audited_like_a_raw_read(
    cli: CliFn, base_dir: Path
) -> None:
    """Issue 35: `kv delete --prefix` names up to 5 keys; memory keys above PUBLIC among
    them leave the raw read's audit record (a dry run too), other keys none."""
    db = memory_db(base_dir)
    prefix = f"memory:{MAIN}:RESTRICTED:"
    dry = cli("kv", "delete", "--prefix", prefix, "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    (record,) = audits(db, "kv_raw_read")
    named = [k for k in current_rows() if k.startswith(prefix)][:5]
    assert record["command"] == "kv delete --prefix" and record["target"] == prefix
    assert sorted(record["keys"]) == sorted(named)  # type: ignore[arg-type]
    assert "passport" not in json.dumps(record)
    assert cli("kv", "delete", "--prefix", f"memory:{MAIN}:PUBLIC:", "--dry-run").exit_code == 0
    assert cli("kv", "delete", "--prefix", "sessions:", "--dry-run").exit_code == 0
    assert len(audits(db, "kv_raw_read")) == 1
