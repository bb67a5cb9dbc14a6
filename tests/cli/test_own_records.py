"""``status`` and ``status --check`` count only this store's own records (issue 36).

Through the installed console script. Audit records travel with the data: after a
migrate, the source's backup and sweep records are in the new store, and must not
be reported as its own. A sweep that was interrupted, failed or covered some
namespaces only (``--namespace``) is shown as such and is no "successful sweep".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.helpers.launch import command
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

SCRIPT = Path(sys.executable).parent / "triggerfish-admin"
SWEEP_ONLY = ["--backup-age", "off", "--full-verify-age", "off", "--wal-size", "off"]
SWEEP_ONLY += ["--index-drift", "off"]
SWEEP_ONLY += ["--config-versions", "off"]


def env(base: Path) -> dict[str, str]:
    found = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    found["TRIGGERFISH_DATA_DIR"] = str(base)
    return found


def run(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=env(base), timeout=300
    )


def ok(base: Path, *args: str) -> str:
    result = run(base, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def report(base: Path, *args: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(ok(base, *args, "status", "--format", "json"))
    return document


def sweep_finding(base: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = run(base, *args, "status", "--check", *SWEEP_ONLY, "--format", "json")
    document = json.loads(result.stdout)
    (found,) = [f for f in document["findings"] if f["check"] == "sweep_age"]
    return result.returncode, found


def demo_store(base: Path) -> None:
    (base / "backups" / "store").mkdir(parents=True)
    ok(base, "demo", "create", "--records", "300", "-q")


def test_a_migrated_store_does_not_report_the_source_s_backup_and_sweep(
    base_dir: Path, tmp_path: Path
) -> None:
    demo_store(base_dir)
    ok(base_dir, "backup", "create", "-q")
    ok(base_dir, "retention", "sweep", "--yes", "-q")
    source = report(base_dir)
    assert source["last_backup"]["store"] == source["store_id"]
    assert source["last_successful_sweep"]["store"] == source["store_id"]

    copy = tmp_path / "copy.db"
    ok(base_dir, "migrate", "--from", source["sqlite"]["path"], "--to", str(copy), "--yes", "-q")
    moved = report(base_dir, "--db", str(copy))
    assert moved["store_id"] not in (None, source["store_id"])
    assert moved["last_backup"] is None and moved["last_sweep"] is None
    assert moved["last_successful_sweep"] is None
    notes = " ".join(moved["notes"])
    assert "1 backup record(s)" in notes and "1 sweep record(s)" in notes
    text = ok(base_dir, "--db", str(copy), "status")
    assert "last backup      none recorded" in text

    code, found = sweep_finding(base_dir, "--db", str(copy))
    assert (code, found["state"]) == (2, "CRITICAL")
    assert found["message"].startswith("no successful sweep of this store recorded")
    assert sweep_finding(base_dir)[0] == 0  # the source's own sweep still counts there

    ok(base_dir, "--db", str(copy), "retention", "sweep", "--yes", "-q")
    assert sweep_finding(base_dir, "--db", str(copy))[0] == 0
    assert report(base_dir, "--db", str(copy))["last_sweep"]["store"] == moved["store_id"]


def test_records_naming_no_store_are_not_counted(base_dir: Path) -> None:
    demo_store(base_dir)
    db = Path(report(base_dir)["sqlite"]["path"])
    store = SqliteStorage(db)
    try:  # as a tool before store ids wrote them: no "store"
        store.set(
            "audit:2099-01-01T00:00:00.000Z:admin_retention_sweep",
            '{"timestamp":"2099-01-01T00:00:00.000Z","action":"retention_sweep"}',
        )
    finally:
        store.close()
    assert report(base_dir)["last_sweep"] is None
    assert sweep_finding(base_dir)[0] == 2


def test_a_one_namespace_sweep_is_not_the_last_successful_sweep(base_dir: Path) -> None:
    demo_store(base_dir)
    ok(base_dir, "retention", "sweep", "--namespace", "sessions", "--yes", "-q")
    document = report(base_dir)
    assert document["last_sweep"]["only"] == ["sessions:"]
    assert document["last_successful_sweep"] is None
    assert "only sessions: (--namespace)" in ok(base_dir, "status")
    code, found = sweep_finding(base_dir)
    assert (code, found["state"]) == (2, "CRITICAL")

    ok(base_dir, "retention", "sweep", "--yes", "-q")
    full = report(base_dir)["last_successful_sweep"]
    ok(base_dir, "retention", "sweep", "--namespace", "sessions", "--yes", "-q")
    document = report(base_dir)
    assert document["last_successful_sweep"] == full
    assert document["last_sweep"]["only"] == ["sessions:"]
    assert sweep_finding(base_dir)[0] == 0


def test_status_says_the_last_sweep_was_interrupted(base_dir: Path, tmp_path: Path) -> None:
    demo_store(base_dir)
    ok(base_dir, "retention", "sweep", "--yes", "-q")
    hang = tmp_path / "sweeping"
    proc = subprocess.Popen(
        [
            *command("--hang-before", f"triggerfish_cli.retention.sweep:_apply_all={hang}"),
            *("retention", "sweep", "--yes"),
        ],
        env=env(base_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not hang.exists():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)  # polls for the condition; no timing is asserted
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    document = report(base_dir)
    assert document["last_sweep"]["interrupted"] is True
    assert document["last_successful_sweep"]["key"] != document["last_sweep"]["key"]
    text = ok(base_dir, "status")
    assert "INTERRUPTED (the next sweep finishes the job)" in text
    assert "last successful sweep" in text


# -- the tool's own records of an action change no count ---------------------------------


def test_a_diff_right_after_a_backup_is_identical(base_dir: Path) -> None:
    demo_store(base_dir)
    for args in ([], ["--logical"]):
        ok(base_dir, "backup", "create", *args, "-q")
        result = run(base_dir, "backup", "diff", "--latest", "--exit-code")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "identical: 0 added, 0 removed, 0 changed" in result.stdout
        assert "left out: 1 audit record(s) of triggerfish-admin's own actions" in result.stdout
    document = json.loads(ok(base_dir, "backup", "diff", "--latest", "--format", "json"))
    assert document["identical"] is True and document["own_audit_left_out"] == 1

    ok(base_dir, "kv", "set", "prefs:owner:theme", "dark", "--raw")  # a change still shows
    result = run(base_dir, "backup", "diff", "--latest", "--exit-code", "--keys")
    assert result.returncode == 1
    assert "+ prefs:owner:theme" in result.stdout
    assert "audit:" not in result.stdout.replace("(audit:*:admin_*)", "")


def test_demo_create_counts_what_the_store_holds(base_dir: Path) -> None:
    created = json.loads(ok(base_dir, "demo", "create", "--records", "300", "--format", "json"))
    assert created["records"] == 300
    listed = json.loads(ok(base_dir, "kv", "namespaces", "--format", "json"))
    assert created["namespaces"] == {row["namespace"]: row["keys"] for row in listed}
    assert created["keys"] == sum(row["keys"] for row in listed) == report(base_dir)["keys"]
