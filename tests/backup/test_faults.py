"""`backup` against a live writer, and killed (-9) in the middle of create and restore."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers import launch
from tests.helpers import writer as writer_process
from tests.helpers.gateway import GATEWAY_ROWS
from triggerfish_cli.backup.archive import is_archive_name

ROOT = Path(__file__).resolve().parents[2]


def _fill(db: Path, count: int) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.executemany(
            "INSERT INTO kv VALUES (?, ?)",
            ((f"conv:bulk:{i:012d}", json.dumps({"n": i, "pad": "x" * 400})) for i in range(count)),
        )
    conn.close()


def _rows(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        rows = dict(conn.execute("SELECT key, value FROM kv"))
        return {key: value for key, value in rows.items() if ":admin_backup_" not in key}
    finally:
        conn.close()


def _cli(db: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    return [sys.executable, "-m", "triggerfish_cli", "--db", str(db), "backup", *args]


#: Pause (seconds) with the archive half written: its trailer, the manifest, not yet.
BACKUP_PAUSE = ("--pause", "triggerfish_cli.backup.create:_trailer=30")
#: Pause with the restored scratch checked, before it is swapped in.
RESTORE_PAUSE = ("--pause", "triggerfish_cli.backup.physical:_swap_in=30")


def _paused(db: Path, pause: tuple[str, str], *args: str) -> list[str]:
    """The CLI run through the launcher (tests/helpers/launch.py) with ``pause``."""
    return [*launch.command(*pause), "--db", str(db), "backup", *args]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


@pytest.fixture
def writer(gateway_db: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A second process inserting every few milliseconds until the stop file appears
    (no busy timeout, like the gateway), on a store big enough for the copy to
    overlap its writes."""
    _fill(gateway_db, 20_000)
    stop, out = tmp_path / "stop", tmp_path / "writer.json"
    with writer_process.running(gateway_db, stop, out) as process:
        yield process, stop


def test_a_backup_under_a_live_writer_restores_everything_committed_before_it(
    cli: CliFn,
    gateway_db: Path,
    tmp_path: Path,
    writer: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, stop = writer
    time.sleep(0.2)
    before = _rows(gateway_db)
    run = cli("backup", "create", "--format", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    archive = Path(document["destination"]) / document["name"]
    time.sleep(0.1)
    stop.touch()
    process.wait(timeout=60)
    report = json.loads((tmp_path / "writer.json").read_text())
    assert report["errors"] == []  # the writer never failed
    target = tmp_path / "restored.db"
    run = cli("backup", "restore", str(archive), "--to", str(target), "--yes")
    assert run.exit_code == 0, run.stderr
    conn = sqlite3.connect(target)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    restored = dict(conn.execute("SELECT key, value FROM kv"))
    conn.close()
    for key, value in before.items():  # every row committed before the backup started
        assert key in restored
        if not key.startswith(("sessions:", "conv-session:")):
            assert restored[key] == value
    audit = [key for key in restored if key.endswith(":admin_backup_restore")]
    assert len(audit) == 1 and document["manifest"]["keys"] == len(restored) - 1


def test_a_logical_backup_under_a_live_writer(
    cli: CliFn, gateway_db: Path, tmp_path: Path, writer: tuple[subprocess.Popen[bytes], Path]
) -> None:
    before = set(_rows(gateway_db))
    run = cli("backup", "create", "--logical", "--verify", "--format", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict) and document["verified"]["ok"]
    target = tmp_path / "fresh.db"
    archive = Path(document["destination"]) / document["name"]
    assert cli("backup", "restore", str(archive), "--to", str(target), "--yes").exit_code == 0
    assert before <= set(_rows(target))


def _kill_when(path_glob: tuple[Path, str], command: list[str], env: dict[str, str]) -> None:
    """Start ``command``, wait until a file matching the glob appears, kill -9 it."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    directory, pattern = path_glob
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if directory.is_dir() and list(directory.glob(pattern)):
            break
        if process.poll() is not None:
            raise AssertionError(process.communicate())
        time.sleep(0.02)
    else:
        process.kill()
        raise AssertionError("the command never reached the point to kill it at")
    time.sleep(0.3)  # inside the test hook's pause
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_kill_9_during_create_leaves_no_archive_under_a_final_name(
    cli: CliFn, gateway_db: Path, base_dir: Path, compression: str
) -> None:
    store = base_dir / "backups" / "store"
    _kill_when(
        (store, ".triggerfish-*.tmp"),
        _paused(gateway_db, BACKUP_PAUSE, "create", "-c", compression),
        _env(),
    )
    assert not [p for p in store.iterdir() if is_archive_name(p.name)]
    run = cli("backup", "list", "--format", "json")
    assert run.exit_code == 0 and run.json() == []
    assert cli("backup", "create").exit_code == 0  # and the next one works,
    assert not [p.name for p in store.iterdir() if p.name.startswith(".")]  # cleaning up


def test_kill_9_during_restore_leaves_the_store_intact(
    cli: CliFn, gateway_db: Path, base_dir: Path
) -> None:
    run = cli("backup", "create", "--format", "json")
    document = run.json()
    assert isinstance(document, dict)
    archive = Path(document["destination"]) / document["name"]
    conn = sqlite3.connect(gateway_db)
    conn.execute("DELETE FROM kv WHERE key LIKE 'sessions:%'")
    conn.commit()
    conn.close()
    before = hashlib.sha256(gateway_db.read_bytes()).hexdigest()
    rows = _rows(gateway_db)
    _kill_when(
        (gateway_db.parent, ".triggerfish.db.restore-*.tmp"),
        _paused(gateway_db, RESTORE_PAUSE, "restore", str(archive), "--yes"),
        _env(),
    )
    assert hashlib.sha256(gateway_db.read_bytes()).hexdigest() == before
    assert _rows(gateway_db) == rows
    assert not list(gateway_db.parent.glob("*pre-restore*"))
    # the leftover scratch file does not stop the next restore
    run = cli("backup", "restore", str(archive), "--yes")
    assert run.exit_code == 0, run.stderr
    assert _rows(gateway_db) == GATEWAY_ROWS
    assert not list(gateway_db.parent.glob(".*.tmp"))


def _script(db: Path, *args: str) -> list[str]:
    """The installed console script (what cron and operators run)."""
    script = Path(sys.executable).with_name("triggerfish-admin")
    assert script.exists(), script
    return [str(script), "--db", str(db), "backup", *args]


def test_kill_9_of_a_restore_leaves_no_scratch_wal_or_shm_after_the_next_run(
    cli: CliFn, gateway_db: Path
) -> None:
    """Issue 15: a restore killed while SQLite had its scratch open left
    ``.<db>.restore-<pid>.tmp-wal``/``-shm`` behind (2 of 11 kills); the next run
    removes every scratch file of a dead process, SQLite's companions included."""
    run = cli("backup", "create", "--format", "json")
    document = run.json()
    assert isinstance(document, dict)
    archive = Path(document["destination"]) / document["name"]
    process = subprocess.Popen(
        _paused(gateway_db, RESTORE_PAUSE, "restore", str(archive), "--yes"),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    scratch = gateway_db.parent / f".{gateway_db.name}.restore-{process.pid}.tmp"
    deadline = time.monotonic() + 60
    while not scratch.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.02)
    assert scratch.exists(), process.communicate()
    time.sleep(0.3)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    # Killed a moment earlier (verifying into the scratch), SQLite's -wal and -shm of
    # that process are beside it too: they are what the issue found left over.
    for suffix in ("-wal", "-shm", "-journal"):
        Path(f"{scratch}{suffix}").write_bytes(b"\0" * 64)
    assert len(list(gateway_db.parent.glob(f".{gateway_db.name}.restore-*"))) == 4
    rerun = subprocess.run(
        _script(gateway_db, "restore", str(archive), "--yes"),
        env=_env(),
        capture_output=True,
        timeout=120,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert not list(gateway_db.parent.glob(f".{gateway_db.name}.restore-*"))
    assert _rows(gateway_db) == GATEWAY_ROWS


def test_kill_9_of_a_logical_backup_leaves_nothing_after_the_next_run(
    cli: CliFn, gateway_db: Path, base_dir: Path
) -> None:
    """Issue 15: a killed logical backup's ``.triggerfish-<t>.jsonl.zst.<rand>.tmp``
    carried no pid, so no later run could tell it was dead (8 of 9 kills)."""
    store = base_dir / "backups" / "store"
    _kill_when(
        (store, ".triggerfish-*.tmp"),
        _paused(gateway_db, BACKUP_PAUSE, "create", "--logical"),
        _env(),
    )
    assert [p.name for p in store.iterdir() if p.name.startswith(".")]  # it was left
    assert not [p for p in store.iterdir() if is_archive_name(p.name)]
    rerun = subprocess.run(
        _script(gateway_db, "create", "--logical"), env=_env(), capture_output=True, timeout=120
    )
    assert rerun.returncode == 0, rerun.stderr
    assert not [p.name for p in store.iterdir() if p.name.startswith(".")]
    assert len([p for p in store.iterdir() if is_archive_name(p.name)]) == 1
