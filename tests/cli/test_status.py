"""``triggerfish-admin status`` (issue 14): which store am I on, and who else is on it.

Through the installed console script, on SQLite, Postgres and S3; on SQLite
with and without a live writer, modelled as the gateway is (a process that
keeps the store open with NO busy timeout and writes all the time), which
also holds ``daemon.json`` open as the gateway's daemon does. Status reads
only: the writer never meets a lock, and nothing of ours appears in the store.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StoreHandle
from tests.helpers.gateway import GATEWAY_ROWS, write_gateway_store

SCRIPT = Path(sys.executable).parent / "triggerfish-admin"


def status(base: Path, *args: str) -> tuple[int, Any, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env["TRIGGERFISH_DATA_DIR"] = str(base)
    result = subprocess.run(
        [str(SCRIPT), *args, "status", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return result.returncode, json.loads(result.stdout) if result.stdout else None, result.stderr


def admin(base: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env["TRIGGERFISH_DATA_DIR"] = str(base)
    result = subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("writer", [False, True], ids=["alone", "live-writer"])
def test_status_json_on_sqlite(base_dir: Path, writer: bool) -> None:
    db = write_gateway_store(base_dir / "data" / "triggerfish.db")
    (base_dir / "daemon.json").write_text('{"startedAt":"2026-12-01T08:00:00.000Z","port":18789}')
    admin(base_dir, "backup", "create")  # the default destination, and an audit record
    with gateway(db, base_dir / "daemon.json") if writer else contextlib.nullcontext() as proc:
        code, report, stderr = status(base_dir)
        errors = stop(proc) if proc is not None else []
    assert code == 0, stderr
    assert errors == []  # status never held a lock the gateway met
    assert report["backend"] == "sqlite"
    assert report["location"] == str(db)
    assert report["chosen_by"] == "from TRIGGERFISH_DATA_DIR"
    assert report["base_dir"] == {"path": str(base_dir), "chosen_by": "TRIGGERFISH_DATA_DIR"}
    assert report["exists"] is True and report["read_only"] is False
    assert report["store_id"] == store_id(db) is not None
    assert report["keys"] >= len(GATEWAY_ROWS) + 1  # and the backup's audit record
    files = report["sqlite"]
    assert files["journal_mode"] == "wal" and files["size"] == db.stat().st_size
    assert files["wal_size"] >= 0
    assert report["last_backup"]["key"].endswith(":admin_backup_create")
    assert report["last_sweep"] is None
    newest = report["newest_backup"]
    assert newest["backups"] == 1 and newest["name"] == report["last_backup"]["name"]
    assert report["memory_index"]["kind"] == "sqlite-fts5"
    assert report["config_versions"] == {"count": 0, "oldest": None, "newest": None}
    daemon = report["daemon"]
    assert daemon["started"] == "2026-12-01T08:00:00.000Z"
    if writer:
        assert proc is not None
        [found] = report["live_writers"]
        assert found["pid"] == proc.pid and found["may_signal"] is True
        assert "gateway-model" in found["command"] and found["user"]
        assert daemon["running"] is True and daemon["processes"] == [proc.pid]
    else:
        assert report["live_writers"] == []
        assert daemon["running"] is False and daemon["processes"] == []


def test_status_reads_only(base_dir: Path) -> None:
    db = write_gateway_store(base_dir / "data" / "triggerfish.db")
    before = sorted((p.name, p.stat().st_size, p.read_bytes()) for p in db.parent.iterdir())
    code, report, _ = status(base_dir)
    assert code == 0 and report["store_id"] is None  # nothing recorded by a read
    assert sorted((p.name, p.stat().st_size, p.read_bytes()) for p in db.parent.iterdir()) == before


def test_status_notes_a_gateway_token_others_can_read(base_dir: Path) -> None:
    """Newer gateways keep their API token beside the store, 0600 (UPSTREAM.md): a looser
    mode (a copy, a restore by hand) is a note; the token itself is never read."""
    db = write_gateway_store(base_dir / "data" / "triggerfish.db")
    token = db.parent / "gateway.token"
    token.write_text("a" * 64)
    token.chmod(0o600)
    code, report, _ = status(base_dir)
    assert code == 0 and not any("gateway.token" in note for note in report["notes"])
    token.chmod(0o644)
    code, report, _ = status(base_dir)
    [note] = [note for note in report["notes"] if "gateway.token" in note]
    assert code == 0 and "mode 0644" in note and f"chmod 600 {token}" in note
    assert "a" * 8 not in json.dumps(report)


def test_status_of_a_missing_store_is_exit_7_with_the_report(base_dir: Path) -> None:
    code, report, stderr = status(base_dir)
    assert code == 7
    assert report["exists"] is False and report["store_id"] is None
    assert report["error"].startswith(f"no Triggerfish store at {base_dir}/data/triggerfish.db")
    assert stderr.startswith("error: no Triggerfish store at") and stderr.count("\n") == 1
    assert sorted(p.name for p in base_dir.iterdir()) == []


def test_status_json_on_every_backend(base_dir: Path, store: StoreHandle) -> None:
    store.seed({"sessions:1": '{"createdAt":"2026-01-01T00:00:00.000Z"}', "k:2": '"v"'})
    code, report, stderr = status(base_dir, *store.args)
    assert code == 0, stderr
    assert report["backend"] == store.backend and report["exists"] is True
    assert report["keys"] == 2
    assert "password" not in json.dumps(report).lower()
    if store.backend == "postgres":
        assert report["location"].endswith(f"schema {store_schema(base_dir)}")
        assert report["chosen_by"].startswith("from the storage: section of")
        assert report["store_id"] is None  # never written by us yet
    if store.backend == "s3":
        assert report["location"].startswith("s3://") and "/triggerfish/" in report["location"]
        assert report["store_id"]  # an S3 store is made with its identity object
    if store.backend != "sqlite":
        assert report["sqlite"] is None and report["live_writers"] is None
    admin(base_dir, *store.args, "kv", "set", "k:3", '"w"')
    code, after, _ = status(base_dir, *store.args)
    assert code == 0 and after["store_id"] and after["keys"] == 4  # and the audit record
    if report["store_id"]:
        assert after["store_id"] == report["store_id"]
    admin(base_dir, *store.args, "retention", "sweep", "--yes")
    code, swept, _ = status(base_dir, *store.args)
    assert swept["last_sweep"]["key"].endswith(":admin_retention_sweep")
    assert swept["memory_index"] is not None


def store_schema(base: Path) -> str:
    text = (base / "triggerfish.yaml").read_text()
    return json.loads(text.split("schema:")[1].splitlines()[0])  # type: ignore[no-any-return]


def store_id(db: Path) -> str | None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute("SELECT value FROM tfadmin_store WHERE name = 'id'").fetchone()
    return None if row is None else str(row[0])


# -- a live writer, as the gateway is --------------------------------------------------------

GATEWAY = textwrap.dedent(
    """
    import json, select, sqlite3, sys
    db, daemon = sys.argv[1], sys.argv[2]
    held = open(daemon)  # the daemon keeps its daemon.json open
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)  # NO busy timeout
    errors, n = [], 0
    print("ready", flush=True)
    while not select.select([sys.stdin], [], [], 0.005)[0]:
        n += 1
        try:
            conn.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (f"gw:{n % 50}", str(n)))
        except sqlite3.Error as exc:
            errors.append(str(exc))
    print(json.dumps(errors), flush=True)
    """
)


@contextlib.contextmanager
def gateway(db: Path, daemon: Path) -> Iterator[subprocess.Popen[str]]:
    script = daemon.parent / "gateway-model.py"
    script.write_text(GATEWAY)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(db), str(daemon)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stop(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("stop\n")
    proc.stdin.flush()
    errors: list[str] = json.loads(proc.stdout.readline())
    proc.wait(timeout=30)
    return errors
