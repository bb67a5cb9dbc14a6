"""Looking at a backup in a scratch file, and destinations that are not there (issue 36).

Through the installed console script: ``backup restore --latest --to NEW.db``
restores the newest backup of the store of ``--db`` (the target, new or
empty, has none of its own); a store with no backups there is named in the
error (exit 3). A ``--from`` that does not exist (a typo in a cron job) is
exit 3 naming it, for every command that reads backups, and a missing S3
bucket too. ``--undo --dry-run`` says which file it puts back and what the
current store would be kept as.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.script import run_on_store
from tests.helpers.services import S3


def run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script on the store ``db`` (its base directory beside it)."""
    return run_on_store(db, db.parent / "base", *args)


def ok(db: Path, *args: str) -> Any:
    result = run(db, *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if result.stdout.strip() else None


def records(db: Path) -> dict[str, str]:
    """The store's records, without the tool's own audit and identity."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = dict(conn.execute("SELECT key, value FROM kv"))
    return {key: value for key, value in rows.items() if ":admin_" not in key}


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, Path, str]:
    """A demo store backed up into a directory: (store, directory, the backup's name)."""
    store, backups = tmp_path / "demo.db", tmp_path / "backups"
    ok(store, "demo", "create", "--records", "60", "--now", "2026-05-01")
    made = ok(store, "backup", "create", "--to", str(backups))
    return store, backups, made["name"]


@pytest.mark.parametrize("target", ["new", "empty"])
def test_latest_into_a_new_or_empty_file_is_the_source_stores_newest(
    demo: tuple[Path, Path, str], tmp_path: Path, target: str
) -> None:
    store, backups, name = demo
    scratch = tmp_path / "look.db"
    if target == "empty":
        scratch.touch()
    latest = ("backup", "restore", "--latest", "--from", str(backups), "--to", str(scratch))
    dry = ok(store, *latest, "--dry-run")
    assert dry["backup"] == name and dry["backup_store"]["source"] == f"sqlite:{store}"
    done = ok(store, *latest, "--yes")
    assert done["backup"] == name
    assert records(scratch) == records(store) and len(records(store)) >= 60
    # the copy is another store: the source's --latest is still its own, untouched
    assert (
        ok(store, "backup", "restore", "--latest", "--from", str(backups), "--dry-run")["backup"]
        == name
    )


def test_latest_of_a_source_without_backups_names_it(
    demo: tuple[Path, Path, str], tmp_path: Path
) -> None:
    _, backups, _ = demo
    other = tmp_path / "other.db"
    ok(other, "demo", "create", "--records", "20", "--now", "2026-05-01")
    scratch = tmp_path / "look.db"
    result = run(
        other, "backup", "restore", "--latest", "--from", str(backups), "--to", str(scratch),
        "--yes",
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"no backups of sqlite:{other}" in lines[0]
    assert "--all-stores to" not in lines[0] and "`backup list --all-stores`" in lines[0]
    assert not scratch.exists()


def test_a_target_with_keys_still_takes_only_its_own(
    demo: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """--latest over a store holding keys is that store's newest, as before: never the
    source's silently put over another store."""
    store, backups, _ = demo
    busy = tmp_path / "busy.db"
    ok(busy, "demo", "create", "--records", "20", "--now", "2026-05-01")
    before = records(busy)
    result = run(
        store, "backup", "restore", "--latest", "--from", str(backups), "--to", str(busy), "--yes"
    )
    assert result.returncode == 3 and f"no backups of sqlite:{busy}" in result.stderr
    assert records(busy) == before


READERS = [
    ("list",),
    ("verify", "--all"),
    ("verify", "--latest"),
    ("diff", "--latest"),
    ("restore", "--latest", "--yes"),
    ("prune", "--keep-last", "3", "--yes"),
    ("prune", "--keep-last", "3", "--dry-run"),
]


@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_a_missing_from_directory_is_not_found(
    demo: tuple[Path, Path, str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    store, backups, _ = demo
    typo = tmp_path / "no-such-dir"
    result = run(store, "backup", *command, "--from", str(typo))
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [f"error: {typo}: no such directory of backups"]
    assert result.stdout == ""
    assert not typo.exists()
    assert len(list(backups.glob("*.zst"))) == 1  # nothing pruned anywhere


def test_an_empty_from_directory_is_no_backups_yet(
    demo: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """A directory that exists but holds none of this store's backups is not an error
    for list and prune (nothing to show or delete); restore names what it looked for."""
    store, _, _ = demo
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    assert ok(store, "backup", "list", "--from", str(empty)) == []
    assert (
        run(store, "backup", "prune", "--keep-last", "1", "--from", str(empty), "--yes").returncode
        == 0
    )
    assert run(store, "backup", "restore", "--latest", "--from", str(empty)).returncode == 3


def test_a_missing_bucket_is_not_found(demo: tuple[Path, Path, str], s3: S3) -> None:
    store, _, _ = demo
    where = "s3://tftest-no-such-bucket/backups/"
    for command in READERS:
        result = run(store, "backup", *command, "--from", where, "--endpoint-url", s3.endpoint_url)
        assert result.returncode == 3, (command, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "tftest-no-such-bucket" in lines[0] and "not found" in lines[0]
    # an existing bucket with nothing under the prefix: no backups yet, not an error
    bucket = s3.new_bucket()
    listed = ok(
        store, "backup", "list", "--from", f"s3://{bucket}/x/", "--endpoint-url", s3.endpoint_url
    )
    assert listed == []


def test_undo_dry_run_names_the_file_put_back_and_the_one_kept(
    demo: tuple[Path, Path, str],
) -> None:
    store, backups, _ = demo
    ok(store, "backup", "restore", "--latest", "--from", str(backups), "--yes")
    (pre,) = store.parent.glob("demo.db.pre-restore-*")
    dry = run(store, "backup", "restore", "--undo", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"would put back {pre} as {store}",
        "the current store would be kept as demo.db.undone-<time>",
    ]
    document = ok(store, "backup", "restore", "--undo", "--dry-run")
    assert document["put_back"] == str(pre) and document["kept"] == "demo.db.undone-<time>"
    assert pre.exists() and not list(store.parent.glob("demo.db.undone-*"))  # a dry run

    done = run(store, "backup", "restore", "--undo", "--yes")
    assert done.returncode == 0, done.stderr
    (undone,) = store.parent.glob("demo.db.undone-*")
    assert done.stdout.splitlines() == [
        f"put back {pre} as {store}",
        f"the current store is kept as {undone}",
    ]
    assert not pre.exists()
