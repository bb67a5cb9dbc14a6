"""``backup restore --include PREFIX...``: only those namespaces, nothing else touched (#18)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from tests.cli.backup.test_backup import ROWS, contents, create
from tests.conftest import CliFn, StoreHandle
from tests.helpers.memories import MAIN, mkey, write_memory_store

INCLUDED = ("sessions:", "cron")  # a prefix, and a namespace by its name


def _outside(rows: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in rows.items() if not k.startswith(("sessions:", "cron:"))}


def test_include_restores_only_those_prefixes_on_every_backend(
    cli: CliFn, store: StoreHandle, tmp_path: Path
) -> None:
    store.seed(dict(ROWS))
    archive, _ = create(cli, store, "--logical", "--to", str(tmp_path / "b"))
    provider: Any = store.open()
    provider.set("sessions:new-one", '"only in the store"')
    provider.set("extra:key", "1")
    for key in [k for k in ROWS if k.startswith(("sessions:", "cron:", "conv:"))][:4]:
        provider.set(key, '"changed"')
    provider.delete(next(k for k in ROWS if k.startswith("cron:")))
    provider.close()
    before = contents(store)
    include = [arg for prefix in INCLUDED for arg in ("--include", prefix)]
    restore = (*store.args, "backup", "restore", str(archive), *include)

    refused = cli(*restore, "--yes")  # the store holds keys under them: --replace or --merge
    assert refused.exit_code == 4 and "--replace" in refused.stderr
    assert contents(store) == before

    dry = cli(*restore, "--replace", "--dry-run", "-f", "json")
    assert dry.exit_code == 0, dry.stderr
    plan = dry.json()
    assert isinstance(plan, dict) and plan["dry_run"] is True
    assert plan["include"] == ["cron:", "sessions:"]
    in_backup = {ns: sum(1 for k in ROWS if k.startswith(ns)) for ns in ("cron:", "sessions:")}
    assert {ns: c["write"] for ns, c in plan["namespaces"].items()} == in_backup
    in_store = {ns: sum(1 for k in before if k.startswith(ns)) for ns in ("cron:", "sessions:")}
    assert {ns: c["delete"] for ns, c in plan["namespaces"].items()} == in_store
    assert contents(store) == before
    table = cli(*restore, "--replace", "--dry-run")
    assert "sessions:: " in table.stdout and "to write" in table.stdout

    run = cli(*restore, "--replace", "--yes", "-f", "json")
    assert run.exit_code == 0, run.stderr
    done = run.json()
    assert isinstance(done, dict) and done["mode"] == "replace"
    assert done["written"] == sum(in_backup.values())
    after = contents(store)
    assert _outside(after) == _outside(before)  # nothing outside the prefixes touched
    assert {k: v for k, v in after.items() if k not in _outside(after)} == {
        k: v for k, v in ROWS.items() if k.startswith(("sessions:", "cron:"))
    }  # and under them exactly the backup's: sessions:new-one is gone

    # --merge: the backup's keys under the prefixes written over, the rest stays
    provider = store.open()
    provider.set("sessions:new-two", '"kept by merge"')
    provider.close()
    before = contents(store)
    run = cli(*restore, "--merge", "--yes")
    assert run.exit_code == 0, run.stderr
    assert contents(store) == before


def test_include_into_a_store_without_those_keys_needs_no_flag(
    cli: CliFn, store: StoreHandle, tmp_path: Path
) -> None:
    store.seed(dict(ROWS))
    archive, _ = create(cli, store, "--logical", "--to", str(tmp_path / "b"))
    provider: Any = store.open()
    for key in list(provider.scan_keys("cron:")):
        provider.delete(key)
    provider.set("extra:key", "1")
    provider.close()
    before = contents(store)
    run = cli(*store.args, "backup", "restore", str(archive), "--include", "cron:", "--yes")
    assert run.exit_code == 0, run.stderr
    after = contents(store)
    assert {k: v for k, v in after.items() if not k.startswith("cron:")} == before
    assert {k for k in after if k.startswith("cron:")} == {k for k in ROWS if k.startswith("cron:")}


def _dump(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return {
            table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall())
            for table in ("kv", "memory_meta", "memory_fts")
        }


def test_included_memories_are_brought_into_the_index_and_nothing_else_moves(
    cli: CliFn, base_dir: Path, tmp_path: Path
) -> None:
    """A physical backup, restored in part (--include implies key by key) into a gateway store."""
    db = write_memory_store(base_dir / "data" / "triggerfish.db")
    backup = cli("backup", "create", "--to", str(tmp_path / "b"), "-f", "json").json()
    assert isinstance(backup, dict) and backup["manifest"]["kind"] == "physical"
    archive = Path(backup["destination"]) / backup["name"]
    internal = mkey(MAIN, "INTERNAL", "project-plan")
    public = mkey(MAIN, "PUBLIC", "user-name")
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("DELETE FROM kv WHERE key = ?", (internal,))
        conn.execute("DELETE FROM memory_fts WHERE key = 'project-plan'")
        conn.execute("DELETE FROM memory_meta WHERE key = 'project-plan'")
        conn.execute("UPDATE kv SET value = '\"changed\"' WHERE key LIKE 'sessions:%'")
    before = _dump(db)
    prefix = f"memory:{MAIN}:INTERNAL:"
    run = cli("backup", "restore", str(archive), "--include", prefix, "--merge", "--yes")
    assert run.exit_code == 0, run.stderr
    after = _dump(db)

    def outside(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [
            row for row in rows
            if not str(row[0]).startswith(prefix) and ":admin_backup_" not in str(row[0])
        ]  # fmt: skip

    assert outside(after["kv"]) == outside(before["kv"])  # the restore's audit record aside
    assert internal in dict(after["kv"]) and public in dict(after["kv"])
    assert '"changed"' in dict(after["kv"]).values()  # the sessions stay as they were
    assert ("main-session", "INTERNAL", "project-plan") in {row[:3] for row in after["memory_meta"]}
    # index rows of other levels were not rewritten
    other = [row for row in before["memory_meta"] if row[1] != "INTERNAL"]
    assert [row for row in after["memory_meta"] if row[1] != "INTERNAL"] == other
    found = cli("memory", "search", "postgres", "cluster", "--taint", "INTERNAL", "-f", "json")
    assert [hit["key"] for hit in found.json()] == ["project-plan"]  # type: ignore[union-attr]


def test_include_refuses_an_empty_prefix_and_undo(cli: CliFn, gateway_db: Path) -> None:
    create_run = cli("backup", "create", "-f", "json")
    assert create_run.exit_code == 0, create_run.stderr
    assert cli("backup", "restore", "--latest", "--include", "", "--yes").exit_code == 2
    assert cli("backup", "restore", "--undo", "--include", "cron:").exit_code == 2
