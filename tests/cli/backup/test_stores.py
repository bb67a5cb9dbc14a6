"""A store has an identity; backups know whose they are (issue 14).

Through the installed console script, two stores backing up into one
destination: the manifest records the store's id, source and host; a restore
names the backup it uses (the dry run too), ``--latest`` is the target's own
newest backup, another store's backup is refused (exit 4) with the store
unchanged unless ``--other-store``; ``list``, ``verify --all`` and ``prune``
work per store, and pruning one store's backups never deletes another's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway import write_gateway_store

SCRIPT = Path(sys.executable).parent / "triggerfish-admin"


class Store:
    """One store and the console script run against it."""

    def __init__(self, path: Path, backups: Path) -> None:
        self.path, self.backups = path, backups

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
        env["TRIGGERFISH_DATA_DIR"] = str(self.path.parent.parent)
        return subprocess.run(
            [str(SCRIPT), "--db", str(self.path), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    def ok(self, *args: str) -> Any:
        result = self.run(*args, "--format", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout) if result.stdout.strip() else None

    def backup(self, *args: str) -> dict[str, Any]:
        document = self.ok("backup", "create", "--to", str(self.backups), *args)
        assert isinstance(document, dict)
        return document

    def rows(self) -> dict[str, str]:
        with contextlib.closing(sqlite3.connect(self.path)) as conn:
            return dict(conn.execute("SELECT key, value FROM kv"))

    def store_id(self) -> str | None:
        with contextlib.closing(sqlite3.connect(self.path)) as conn:
            try:
                row = conn.execute("SELECT value FROM tfadmin_store WHERE name = 'id'").fetchone()
            except sqlite3.OperationalError:
                return None
        return None if row is None else str(row[0])

    def digest(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


@pytest.fixture
def two(tmp_path: Path) -> tuple[Store, Store]:
    backups = tmp_path / "shared-backups"
    small = write_gateway_store(tmp_path / "a" / "data" / "triggerfish.db", {"small:1": '"a"'})
    big = write_gateway_store(
        tmp_path / "b" / "data" / "triggerfish.db",
        {f"big:{n:03d}": '"b"' for n in range(120)},
    )
    return Store(small, backups), Store(big, backups)


def test_identity_is_written_by_the_first_write_and_stays(tmp_path: Path) -> None:
    store = Store(write_gateway_store(tmp_path / "s" / "data" / "triggerfish.db"), tmp_path / "b")
    for read in (["kv", "list", "sessions:"], ["kv", "namespaces"], ["status"], ["backup", "list"]):
        store.ok(*read)
    assert store.store_id() is None  # nothing but reads: no id yet
    store.ok("kv", "set", "x:1", '"y"')
    first = store.store_id()
    assert first is not None and len(first) == 36
    store.ok("kv", "set", "x:2", '"y"')
    assert store.store_id() == first
    status = store.ok("status")
    assert status["store_id"] == first
    audit = [json.loads(v) for k, v in store.rows().items() if k.startswith("audit:")]
    assert {record["store"] for record in audit} == {first}


def test_the_manifest_records_the_store(two: tuple[Store, Store]) -> None:
    a, _ = two
    document = a.backup()
    manifest = document["manifest"]
    assert manifest["store_id"] == a.store_id() is not None  # recorded by the backup itself
    assert manifest["source"] == f"sqlite:{os.path.realpath(a.path)}"
    assert manifest["host"] == os.uname().nodename
    assert document["audit_key"].endswith(":admin_backup_create")
    assert a.ok("status")["last_backup"]["name"] == document["name"]


def test_restore_of_another_stores_backup_is_refused_and_changes_nothing(
    two: tuple[Store, Store],
) -> None:
    a, b = two
    b_backup = b.backup()["name"]
    a.backup()
    before = a.digest()
    for args in ([], ["--dry-run"]):
        refused = a.run("backup", "restore", b_backup, "--from", str(a.backups), "--yes", *args)
        assert refused.returncode == 4, refused.stderr
        assert f"{b_backup} is a backup of another store" in refused.stderr
        assert "--other-store" in refused.stderr
        assert refused.stderr.count("\n") == 1
    assert a.digest() == before
    assert "big:000" not in a.rows()


def test_restore_latest_is_the_targets_own_newest(two: tuple[Store, Store]) -> None:
    a, b = two
    own = a.backup()["name"]
    b.backup()  # newer, of the other store, in the same destination
    dry = a.ok("backup", "restore", "--latest", "--from", str(a.backups), "--dry-run")
    assert dry["backup"] == own and dry["dry_run"] is True
    assert dry["backup_store"]["store_id"] == a.store_id()
    table = a.run("backup", "restore", "--latest", "--from", str(a.backups), "--dry-run")
    assert own in table.stderr + table.stdout
    done = a.ok("backup", "restore", "--latest", "--from", str(a.backups), "--yes")
    assert done["backup"] == own
    assert "big:000" not in a.rows() and "small:1" in a.rows()


def test_other_store_restores_it_and_the_target_keeps_its_identity(
    two: tuple[Store, Store],
) -> None:
    a, b = two
    b_backup = b.backup()["name"]
    a.ok("kv", "set", "mine:1", '"a"')
    a_id = a.store_id()
    done = a.ok("backup", "restore", b_backup, "--from", str(a.backups), "--yes", "--other-store")
    assert done["backup"] == b_backup
    assert "big:000" in a.rows()
    assert a.store_id() == a_id != b.store_id()  # still store a, now holding b's data
    # and so a's next backups are a's, not b's
    assert a.backup()["manifest"]["store_id"] == a_id


def test_a_restore_into_an_empty_target_needs_no_flag(
    two: tuple[Store, Store], tmp_path: Path
) -> None:
    _, b = two
    name = b.backup()["name"]
    fresh = tmp_path / "fresh" / "restored.db"
    dry = b.ok("backup", "restore", name, "--from", str(b.backups), "--to", str(fresh), "--dry-run")
    assert dry["backup"] == name and not fresh.exists()
    b.ok("backup", "restore", name, "--from", str(b.backups), "--to", str(fresh), "--yes")
    copy = Store(fresh, b.backups)
    assert "big:000" in copy.rows()
    assert copy.store_id() is not None and copy.store_id() != b.store_id()  # a copy elsewhere


def test_a_store_put_back_where_it_was_keeps_its_identity(two: tuple[Store, Store]) -> None:
    a, _ = two
    name = a.backup()["name"]
    original = a.store_id()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{a.path}{suffix}").unlink(missing_ok=True)  # the disk died
    a.ok("backup", "restore", name, "--from", str(a.backups), "--yes")
    assert a.store_id() == original


def test_list_and_verify_work_per_store(two: tuple[Store, Store]) -> None:
    a, b = two
    a.backup()
    a.backup()
    b.backup()
    mine = a.ok("backup", "list", "--from", str(a.backups))
    assert len(mine) == 2 and {row["store_id"] for row in mine} == {a.store_id()}
    every = a.ok("backup", "list", "--from", str(a.backups), "--all-stores")
    assert len(every) == 3 and {row["store_id"] for row in every} == {a.store_id(), b.store_id()}
    table = a.run("backup", "list", "--from", str(a.backups), "--all-stores")
    assert str(a.store_id())[:8] in table.stdout and str(b.store_id())[:8] in table.stdout
    verified = a.ok("backup", "verify", "--all", "--from", str(a.backups))
    assert len(verified) == 2
    assert len(a.ok("backup", "verify", "--all", "--from", str(a.backups), "--all-stores")) == 3


def test_verify_all_stores_reports_each_store_under_its_own_heading(
    two: tuple[Store, Store],
) -> None:
    a, b = two
    a.backup()
    b.backup()
    a.backup()  # the stores' backups interleave in time
    results = a.ok("backup", "verify", "--all", "--from", str(a.backups), "--all-stores")
    assert [row["store_id"] for row in results] == [a.store_id(), a.store_id(), b.store_id()]
    assert all(row["ok"] and row["source"].startswith("sqlite:") for row in results)
    table = a.run("backup", "verify", "--all", "--from", str(a.backups), "--all-stores")
    assert table.returncode == 0, table.stderr
    headings = [line for line in table.stdout.splitlines() if line.startswith("store ")]
    assert headings == [
        f"store {str(a.store_id())[:8]} (sqlite:{os.path.realpath(a.path)}):",
        f"store {str(b.store_id())[:8]} (sqlite:{os.path.realpath(b.path)}):",
    ]
    # one store's backups alone: no heading
    mine = a.run("backup", "verify", "--all", "--from", str(a.backups))
    assert not [line for line in mine.stdout.splitlines() if line.startswith("store ")]


def _names(store: Store) -> set[str]:
    return {path.name for path in store.backups.iterdir() if not path.name.endswith(".verified")}


def test_prune_keeps_each_stores_own_policy(two: tuple[Store, Store]) -> None:
    a, b = two
    a_names = [a.backup()["name"] for _ in range(4)]
    b_names = [b.backup()["name"] for _ in range(3)]  # all newer than a's
    plan = a.ok("backup", "prune", "--keep-last", "2", "--from", str(a.backups), "--dry-run")
    assert {row["name"] for row in plan["backups"]} == set(a_names)  # only a's are looked at
    a.ok("backup", "prune", "--keep-last", "2", "--from", str(a.backups), "--yes")
    assert _names(a) == set(a_names[2:]) | set(b_names)  # a keeps 2, b's untouched
    b.ok("backup", "prune", "--keep-last", "1", "--from", str(b.backups), "--yes")
    assert _names(a) == set(a_names[2:]) | {b_names[-1]}  # b keeps 1, a's 2 stay
    # --all-stores: the policy for each store separately, never across them
    extra = [b.backup()["name"] for _ in range(2)]
    b.ok("backup", "prune", "--keep-last", "1", "--from", str(b.backups), "--all-stores", "--yes")
    assert _names(a) == {a_names[-1], extra[-1]}


def test_prune_with_a_missing_store_prunes_only_its_place(two: tuple[Store, Store]) -> None:
    a, b = two
    old = [a.backup()["name"] for _ in range(2)]
    b_names = [b.backup()["name"] for _ in range(2)]
    a.path.unlink()
    a.ok("backup", "prune", "--keep-last", "1", "--from", str(a.backups), "--yes")
    assert _names(a) == {old[-1], *b_names}
