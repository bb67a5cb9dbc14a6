"""Opening a store never writes (issue 15), and a kv table not of the gateway's shape is refused.

Through the installed console script: a command that only reads leaves every
byte of the store and of its directory as it was: an empty file stays empty
(no table appears in it), a rollback-journal database stays one (no switch
to WAL), and it works on a read-only file system (a read-only bind mount,
which needs root) or a read-only copy. A ``kv`` table without a primary key
(where ``INSERT OR REPLACE`` adds rows instead of replacing) or otherwise
unlike the gateway's is exit 8 naming what differs, and nothing changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.gateway import write_gateway_store
from tests.helpers.script import run_on_store

#: Commands that only read. (Reading memory rows above PUBLIC, through memory
#: commands or the raw kv view, writes its audit record by the taint rules: a write.)
READS = [
    ["kv", "namespaces"],
    ["kv", "list", "sessions:"],
    ["kv", "get", "main-session-id"],
    ["kv", "export", "conv:"],
    ["retention", "plan"],
    ["memory", "list"],
    ["config", "history"],
    ["status"],
]


def run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_on_store(db, db.parent / "no-base", *args)


def fingerprint(directory: Path) -> dict[str, str]:
    """Every file of the directory and a hash of its bytes."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.iterdir())
        if path.is_file()
    }


def rollback_journal_store(path: Path) -> Path:
    write_gateway_store(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    return path


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c))
def test_reads_leave_a_rollback_journal_store_as_it_was(tmp_path: Path, command: list[str]) -> None:
    db = rollback_journal_store(tmp_path / "store" / "copy.db")
    before = fingerprint(db.parent)
    result = run(db, *command)
    assert result.returncode == 0, result.stderr
    assert fingerprint(db.parent) == before
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_a_write_to_a_rollback_journal_store_keeps_its_journal_mode(tmp_path: Path) -> None:
    db = rollback_journal_store(tmp_path / "copy.db")
    assert run(db, "kv", "set", "k", '"v"').returncode == 0
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("SELECT value FROM kv WHERE key = 'k'").fetchone() == ('"v"',)


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c))
def test_reads_leave_a_clean_wal_store_as_it_was(tmp_path: Path, command: list[str]) -> None:
    db = write_gateway_store(tmp_path / "store" / "triggerfish.db")
    before = fingerprint(db.parent)
    assert not Path(f"{db}-wal").exists()
    result = run(db, *command)
    assert result.returncode == 0, result.stderr
    assert fingerprint(db.parent) == before  # no -wal, -shm or table of ours left behind


@pytest.mark.parametrize(
    "command", [["kv", "namespaces"], ["kv", "list"], ["status"], ["kv", "set", "k", '"v"']]
)
def test_an_empty_file_is_no_store_and_stays_empty(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    result = run(db, *command)
    assert result.returncode == 7
    assert result.stderr.startswith(
        f"error: no Triggerfish store at {db}: an empty file (from --db)"
    )
    assert db.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_demo_create_makes_a_store_of_an_empty_file(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    result = run(db, "demo", "create", "--records", "100")
    assert result.returncode == 0, result.stderr
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# -- read-only media ---------------------------------------------------------------------


@contextlib.contextmanager
def read_only_mount(source: Path, target: Path) -> Iterator[Path]:
    """``source`` seen read-only at ``target`` (a read-only bind mount: needs root)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a read-only file system needs root (a read-only bind mount)")
    target.mkdir()
    bound = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip(f"mount --bind is not permitted here: {bound.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)
        target.rmdir()


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c))
def test_reads_work_on_a_read_only_file_system(tmp_path: Path, command: list[str]) -> None:
    source = tmp_path / "media"
    write_gateway_store(source / "triggerfish.db")
    before = fingerprint(source)
    with read_only_mount(source, tmp_path / "ro") as media:
        result = run(media / "triggerfish.db", *command)
        assert result.returncode == 0, result.stderr
    assert fingerprint(source) == before


def test_a_read_only_file_system_with_wal_content(tmp_path: Path) -> None:
    """A copy taken with its -wal and -shm while the gateway ran: its last writes are seen."""
    source = tmp_path / "media"
    db = write_gateway_store(source / "triggerfish.db")
    writer = sqlite3.connect(db, isolation_level=None, timeout=0)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO kv VALUES ('late:key', '\"in the wal\"')")
    for suffix in ("", "-wal", "-shm"):
        shutil.copy(f"{db}{suffix}", source / f"copy.db{suffix}")
    writer.close()
    (source / "triggerfish.db").unlink()
    with read_only_mount(source, tmp_path / "ro") as media:
        got = run(media / "copy.db", "kv", "get", "late:key", "--raw")
        assert (got.returncode, got.stdout) == (0, '"in the wal"'), got.stderr
        refused = run(media / "copy.db", "kv", "set", "k", '"v"')
        assert refused.returncode == 9
        assert "can only be read here" in refused.stderr
        assert refused.stderr.count("\n") == 1


def test_writes_on_a_read_only_file_system_are_exit_9(tmp_path: Path) -> None:
    source = tmp_path / "media"
    write_gateway_store(source / "triggerfish.db")
    before = fingerprint(source)
    with read_only_mount(source, tmp_path / "ro") as media:
        for command in (["kv", "set", "k", '"v"'], ["kv", "delete", "main-session-id", "--yes"]):
            result = run(media / "triggerfish.db", *command)
            assert result.returncode == 9, result.stderr
            assert "can only be read here" in result.stderr
    assert fingerprint(source) == before


def test_a_sweep_on_a_read_only_file_system_is_exit_9_as_a_write(tmp_path: Path) -> None:
    """The sweep's lock file cannot be made there: exit 9 (cannot write), as ``kv set``,
    not 7 (the store can be opened, and is read)."""
    source = tmp_path / "media"
    write_gateway_store(source / "triggerfish.db")
    before = fingerprint(source)
    with read_only_mount(source, tmp_path / "ro") as media:
        for command in (["retention", "sweep", "--yes"], ["kv", "set", "k", '"v"']):
            result = run(media / "triggerfish.db", *command)
            assert result.returncode == 9, result.stderr
            assert result.stderr.count("\n") == 1 and "read-only file" in result.stderr.lower()
    assert fingerprint(source) == before


# -- the gateway's shape ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("create", "problem"),
    [
        (
            "CREATE TABLE kv (key TEXT, value TEXT NOT NULL)",
            "key is not its primary key (so INSERT OR REPLACE adds a row instead of replacing one)",
        ),
        (
            "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, extra TEXT)",
            "an extra column 'extra'",
        ),
        ("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT)", "value is not NOT NULL"),
        ("CREATE TABLE kv (key BLOB PRIMARY KEY, value TEXT NOT NULL)", "key is declared BLOB"),
        (
            "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
            "it is a WITHOUT ROWID table",
        ),
        (
            "CREATE TABLE kv (key TEXT, value TEXT NOT NULL, PRIMARY KEY (key, value))",
            "its primary key is (key, value), not (key)",
        ),
        ("CREATE TABLE kv (k TEXT, v TEXT)", "its columns are (k, v), not (key, value)"),
    ],
)
def test_a_kv_table_not_of_the_gateways_shape_is_exit_8(
    tmp_path: Path, create: str, problem: str
) -> None:
    db = tmp_path / "odd.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(create)
        columns = [row[1] for row in conn.execute("PRAGMA table_info(kv)")]
        conn.execute(f"INSERT INTO kv ({', '.join(columns[:2])}) VALUES ('a', '\"1\"')")
        conn.commit()
    before = fingerprint(tmp_path)
    for command in (["kv", "set", "a", '"2"'], ["kv", "list"], ["status"]):
        result = run(db, *command)
        assert result.returncode == 8, result.stderr
        assert problem in result.stderr
        assert "table kv is not the gateway's (key TEXT PRIMARY KEY, value TEXT NOT NULL)" in (
            result.stderr
        )
        assert result.stderr.count("\n") == 1
    assert fingerprint(tmp_path) == before


def test_a_backup_of_a_read_only_store_is_made_and_says_what_it_could_not_record(
    tmp_path: Path,
) -> None:
    source = tmp_path / "media"
    write_gateway_store(source / "triggerfish.db")
    before = fingerprint(source)
    with read_only_mount(source, tmp_path / "ro") as media:
        result = run(media / "triggerfish.db", "backup", "create", "--to", str(tmp_path / "b"))
        assert result.returncode == 0, result.stderr
        assert "note: the store's id could not be recorded" in result.stderr
        assert "note: no audit record of this backup in the store" in result.stderr
    assert fingerprint(source) == before
    assert len(list((tmp_path / "b").iterdir())) == 1
