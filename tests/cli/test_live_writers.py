"""Every command that writes, beside a writer like the gateway: no busy timeout, a write
every 5 ms. The write gate must cost it nothing: 0 failed writes, and every one of
its writes is in the store afterwards (issue 13)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers import gateway_writer
from tests.helpers.gateway import memory_record
from triggerfish_cli.demo import build_demo
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.freezer import Freeze
from triggerfish_cli.storage.sqlite.live_writers import SHM_WRITE_LOCK, shm_lock_holder
from triggerfish_cli.storage.sqlite.wal_upkeep import WalUpkeep
from triggerfish_cli.storage.sqlite.write_gate import WriteGate

ANCHOR = datetime(2026, 10, 1, tzinfo=timezone.utc)
ANCHOR_ISO = "2026-10-01T00:00:00.000Z"

CONFIG = "models:\n  primary: claude\nlogging:\n  level: info\n"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo store with work for every command (old sessions, memories, conversations)."""
    path = tmp_path_factory.mktemp("template") / "triggerfish.db"
    store = SqliteStorage(path, create=True)
    build_demo(store, records=4000, seed=3, now=ANCHOR, days=120)
    store.close()
    return path


@pytest.fixture
def live(base_dir: Path, template: Path) -> Path:
    """The default store (a copy of the template) and a config file beside it."""
    db = base_dir / "data" / "triggerfish.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, db)
    (base_dir / "triggerfish.yaml").write_text(CONFIG)
    return db


def rows(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT key, value FROM kv"))


def a_key(db: Path, prefix: str, n: int = 0) -> str:
    with sqlite3.connect(db) as conn:
        return str(
            conn.execute(
                "SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key LIMIT 1 OFFSET ?",
                (prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1), n),
            ).fetchone()[0]
        )


def ok(result: object) -> None:
    assert result.exit_code == 0, (result.stdout, result.stderr)  # type: ignore[attr-defined]


# -- the commands ------------------------------------------------------------------------


def sweep(cli: CliFn, db: Path, base: Path) -> None:
    ok(cli("retention", "sweep", "--yes", "--as-of", ANCHOR_ISO, "-f", "json"))


def kv_set(cli: CliFn, db: Path, base: Path) -> None:
    for n in range(15):
        ok(cli("kv", "set", f"ux:key-{n}", json.dumps({"n": n})))


def kv_delete(cli: CliFn, db: Path, base: Path) -> None:
    for key in [a_key(db, "sessions:", n) for n in range(10)]:
        ok(cli("kv", "delete", key, "--yes"))


def kv_delete_prefix(cli: CliFn, db: Path, base: Path) -> None:
    ok(cli("kv", "delete", "--prefix", "conv:", "--yes", "--pause", "0"))


def kv_import(cli: CliFn, db: Path, base: Path) -> None:
    for round_ in range(3):
        lines = [
            json.dumps({"key": f"imported:{round_}:{n:04d}", "value": json.dumps({"n": n})})
            for n in range(300)
        ]
        lines += [  # memory rows: their index rows are written after them (the gate too)
            json.dumps(
                {
                    "key": f"memory:main-session:PUBLIC:imported-{round_}-{n}",
                    "value": memory_record(f"imported-{round_}-{n}", "PUBLIC", f"fact {n}"),
                }
            )
            for n in range(20)
        ]
        source = base / f"import-{round_}.jsonl"
        source.write_text("\n".join(lines) + "\n")
        ok(cli("kv", "import", str(source)))


def kv_clear(cli: CliFn, db: Path, base: Path) -> None:
    ok(cli("kv", "clear", "--yes"))


def memory_save(cli: CliFn, db: Path, base: Path) -> None:
    for n in range(10):
        ok(cli("memory", "save", f"gate-{n}", f"fact number {n}", "--taint", "INTERNAL"))


def memory_delete(cli: CliFn, db: Path, base: Path) -> None:
    for n in range(5):
        ok(cli("memory", "save", f"doomed-{n}", "to go", "--taint", "CONFIDENTIAL"))
    for n in range(5):
        ok(cli("memory", "delete", f"doomed-{n}", "--taint", "CONFIDENTIAL", "--yes"))


def memory_purge(cli: CliFn, db: Path, base: Path) -> None:
    ok(cli("memory", "purge", "--older-than", "1d", "-A", "--taint", "RESTRICTED", "--yes"))


def memory_reindex(cli: CliFn, db: Path, base: Path) -> None:
    ok(cli("memory", "reindex", "--taint", "RESTRICTED"))


def audited_reads(cli: CliFn, db: Path, base: Path) -> None:
    """Reads above PUBLIC write an audit record each."""
    key = a_key(db, "memory:main-session:RESTRICTED:").split(":", 3)[3]
    for _ in range(8):
        ok(cli("memory", "get", key, "--taint", "RESTRICTED"))
        ok(cli("memory", "search", "project", "--taint", "RESTRICTED"))


def config_snapshot(cli: CliFn, db: Path, base: Path) -> None:
    for n in range(4):
        (base / "triggerfish.yaml").write_text(CONFIG + f"debug: {n % 2 == 0}\n# {n}\n")
        ok(cli("config", "snapshot", "-m", f"change {n}"))


def config_rollback(cli: CliFn, db: Path, base: Path) -> None:
    ok(cli("config", "snapshot", "-m", "first"))
    (base / "triggerfish.yaml").write_text(CONFIG + "debug: true\n")
    ok(cli("config", "snapshot", "-m", "second"))
    ok(cli("config", "rollback", "v1", "--yes"))


def config_import_backups(cli: CliFn, db: Path, base: Path) -> None:
    backups = base / "backups"
    backups.mkdir(exist_ok=True)
    for n in range(4):
        stamp = f"2026-11-0{n + 1}T10-00-00.000Z"
        (backups / f"triggerfish.yaml.{stamp}").write_text(CONFIG + f"# version {n}\n")
    ok(cli("config", "import-backups"))


def logical_restore(cli: CliFn, db: Path, base: Path) -> None:
    ok(cli("backup", "restore", "--latest", "--from", str(base / "bk"), "--merge", "--yes"))


def migrate_into(cli: CliFn, db: Path, base: Path) -> None:
    ok(cli("migrate", "--from", str(base / "source.db"), "--to", str(db), "--merge", "--yes"))


def _prepare_restore(cli: CliFn, db: Path, base: Path) -> None:
    ok(cli("backup", "create", "--logical", "--to", str(base / "bk")))


def _prepare_migrate(cli: CliFn, db: Path, base: Path) -> None:
    source = SqliteStorage(base / "source.db", create=True)
    source.set_many([(f"migrated:{n:05d}", json.dumps({"n": n})) for n in range(3000)])
    source.close()


def _prepare_reindex(cli: CliFn, db: Path, base: Path) -> None:
    with sqlite3.connect(db) as conn:  # drift for the reindex to repair
        conn.execute("DELETE FROM memory_meta WHERE rowid % 2 = 0")


Command = Callable[[CliFn, Path, Path], None]
COMMANDS: dict[str, tuple[Command, Command | None]] = {
    "retention sweep": (sweep, None),
    "kv set": (kv_set, None),
    "kv delete": (kv_delete, None),
    "kv delete --prefix": (kv_delete_prefix, None),
    "kv import": (kv_import, None),
    "kv clear": (kv_clear, None),
    "memory save": (memory_save, None),
    "memory delete": (memory_delete, None),
    "memory purge": (memory_purge, None),
    "memory reindex": (memory_reindex, _prepare_reindex),
    "audit records of reads": (audited_reads, None),
    "config snapshot": (config_snapshot, None),
    "config rollback": (config_rollback, None),
    "config import-backups": (config_import_backups, None),
    "backup restore --logical --merge": (logical_restore, _prepare_restore),
    "migrate into SQLite": (migrate_into, _prepare_migrate),
}


def newest_of_the_writer(db: Path) -> str:
    """The newest key the writer has committed (its keys grow with each write)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute(
            "SELECT max(key) FROM kv WHERE key >= 'sessions:gw-' AND key < 'sessions:gw.'"
        ).fetchone()
    return str(row[0] or "")


def writer_between_freezes(
    db: Path, monkeypatch: pytest.MonkeyPatch, freezes: int = 5
) -> list[str]:
    """After each of the first ``freezes`` freezes of the command, wait until the writer
    has committed again: its newest key each time. The writer really wrote while the
    command ran (it was: more than 5 writes in all, up to how fast each side ran)."""
    seen: list[str] = []
    thaw = WriteGate._thaw

    def then_the_writer(self: WriteGate, freeze: Freeze) -> None:
        thaw(self, freeze)
        if freeze.stopped and len(seen) < freezes:
            last = newest_of_the_writer(db)
            hang = time.monotonic() + 60  # a guard against a hang, not a measure
            while newest_of_the_writer(db) <= last:
                assert time.monotonic() < hang, "the writer stopped writing"
                time.sleep(0.002)
            seen.append(newest_of_the_writer(db))

    monkeypatch.setattr(WriteGate, "_thaw", then_the_writer)
    return seen


@pytest.mark.parametrize("name", COMMANDS)
def test_a_writing_command_costs_the_gateway_no_write(
    name: str,
    cli: CliFn,
    live: Path,
    base_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    command, prepare = COMMANDS[name]
    if prepare is not None:
        prepare(cli, live, base_dir)
    before = rows(live)
    with gateway_writer.running(live, tmp_path, period=0.005):
        between = writer_between_freezes(live, monkeypatch)
        command(cli, live, base_dir)
    report = gateway_writer.report(tmp_path)
    # the writer really wrote during the command, between its freezes
    assert between and set(between) <= set(report.written), between
    assert report.fail == 0, report.errors
    after = rows(live)
    missing = report.missing_from(after)
    if name == "kv clear":  # the clear takes what the writer wrote before it: only later ones
        missing = {key: value for key, value in missing.items() if key in after}
    assert missing == {}
    assert after != before, "the command must have written something"
    with sqlite3.connect(live) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_writer_test_sees_failures_when_the_gate_is_off(
    cli: CliFn, live: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same writer fails without the gate (--live-writers ignore): the test above can fail.

    The first transaction holds its lock until a write of the writer's has met it and
    failed (it was: up to the scheduler whether one of them met our lock at all)."""
    end, held = WalUpkeep.end, []

    def end_once_it_failed(self: WalUpkeep) -> tuple[int, bytes] | None:
        if not held and shm_lock_holder(self.db, SHM_WRITE_LOCK) == os.getpid():
            held.append(True)  # inside our first transaction, holding the write lock
            hang = time.monotonic() + 60  # a guard against a hang, not a measure
            while not gateway_writer.failed(tmp_path):
                assert time.monotonic() < hang, "the writer never met our lock"
                time.sleep(0.002)
        return end(self)

    monkeypatch.setattr(WalUpkeep, "end", end_once_it_failed)
    with gateway_writer.running(live, tmp_path, period=0.002):
        ok(cli("--live-writers", "ignore", "retention", "sweep", "--yes", "--as-of", ANCHOR_ISO))
        ok(cli("--live-writers", "ignore", "kv", "delete", "--prefix", "conv:", "--yes"))
        _prepare_reindex(cli, live, live.parent)
        ok(cli("--live-writers", "ignore", "memory", "reindex", "--taint", "RESTRICTED"))
    report = gateway_writer.report(tmp_path)
    assert held and report.fail > 0
    assert "database is locked" in report.errors[0]


def test_a_replacing_restore_is_refused_while_the_gateway_writes(
    cli: CliFn, live: Path, base_dir: Path, tmp_path: Path
) -> None:
    """It would lose what the gateway writes meanwhile; --force does it, in batches, with a
    safety backup of the store first (the gate keeps every transaction short)."""
    _prepare_restore(cli, live, base_dir)
    ok(cli("kv", "set", "ux:after-the-backup", "1"))
    args = ("backup", "restore", "--latest", "--from", str(base_dir / "bk"), "--replace", "--yes")
    with gateway_writer.running(live, tmp_path):
        refused = cli(*args)
        assert refused.exit_code == 6 and "--replace while live writers" in refused.stderr
        assert SqliteStorage(live).get("ux:after-the-backup") == "1"  # nothing was restored
        forced = cli(*args, "--force")
    assert forced.exit_code == 0, forced.stderr
    assert "saved in" in forced.stderr  # the way back
    assert SqliteStorage(live).get("ux:after-the-backup") is None
    assert gateway_writer.report(tmp_path).fail == 0
