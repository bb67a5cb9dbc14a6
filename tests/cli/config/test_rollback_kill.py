"""A config rollback killed or failing between writing the file and recording it is finished.

Issue 15: a rollback killed between writing triggerfish.yaml and recording the
version left the file at v1 with no version or audit record, and the rerun
said "already is v1". Now the rollback's journal (``tfadmin:config-rollback``)
is written before the file, and the next config command finishes it: it
records the version when the file holds the rollback's text, drops the
journal when the write never happened. SIGKILL goes to the CLI run through
tests/helpers/launch.py, just before the step named; the other runs are the
installed console script.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn
from tests.helpers import launch
from triggerfish_cli.config.rollback import PENDING_KEY

ROLLBACK = "triggerfish_cli.config.rollback"
#: Where to kill: the journal written, not the file; the file written, not recorded;
#: recorded, the journal not yet dropped.
POINTS = {
    "rollback:pending": f"{ROLLBACK}:_write_file",
    "rollback:written": f"{ROLLBACK}:_record",
    "rollback:recorded": f"{ROLLBACK}:_drop_journal",
}

V1 = "gateway:\n  port: 18789\nlogging:\n  level: info\n"
V2 = "gateway:\n  port: 18790\nlogging:\n  level: debug\n"


@pytest.fixture
def setup(base_dir: Path) -> tuple[Path, Path]:
    """v1 stored, the file changed since (v2 text, not yet a version)."""
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    db = base_dir / "data" / "triggerfish.db"
    SqliteStorage(db, create=True).close()
    config = base_dir / "triggerfish.yaml"
    config.write_text(V1)
    done = script(db, config, "snapshot", "-m", "good")
    assert done.returncode == 0, done.stderr
    config.write_text(V2)
    return db, config


def script(db: Path, config: Path, *args: str, kill_at: str | None = None) -> Any:
    """The installed console script; with ``kill_at``, the CLI killed at that point."""
    path = Path(sys.executable).with_name("triggerfish-admin")
    command = launch.command("--kill-before", POINTS[kill_at]) if kill_at else [str(path)]
    return subprocess.run(
        [*command, "--db", str(db), "--config", str(config), "config", *args],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def kv(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT key, value FROM kv"))
    finally:
        conn.close()


def rollbacks(db: Path) -> list[dict[str, Any]]:
    rows = kv(db)
    found = [json.loads(v) for k, v in rows.items() if k.startswith("config:v")]
    return [v for v in found if v["source"] == "rollback"]


def rollback_audits(db: Path) -> int:
    return sum(1 for k in kv(db) if k.startswith("audit:") and k.endswith("config_rollback"))


@pytest.mark.parametrize("point", ["rollback:pending", "rollback:written", "rollback:recorded"])
def test_a_killed_rollback_is_finished_by_the_next_config_command(
    setup: tuple[Path, Path], point: str
) -> None:
    db, config = setup
    killed = script(db, config, "rollback", "1", "--yes", kill_at=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert PENDING_KEY in kv(db)  # the journal was written before the file
    assert config.read_text() == (V2 if point == "rollback:pending" else V1)
    rerun = script(db, config, "rollback", "1", "--yes", "-f", "json")
    assert rerun.returncode == 0, rerun.stderr
    assert config.read_text() == V1
    assert PENDING_KEY not in kv(db)
    recorded = rollbacks(db)
    assert len(recorded) == 1 and recorded[0]["restoredFrom"] == 1, recorded
    assert rollback_audits(db) == 1
    if point == "rollback:pending":  # nothing was written: the rerun rolls back itself
        assert "had not written the file" in rerun.stderr
        assert json.loads(rerun.stdout)["written"] is True
    else:  # written: the rerun records it first, then finds the file already v1
        assert "finished an interrupted rollback" in rerun.stderr
        assert json.loads(rerun.stdout)["changed"] is False


def test_any_config_command_finishes_it_and_a_dry_run_only_says_so(
    setup: tuple[Path, Path],
) -> None:
    db, config = setup
    killed = script(db, config, "rollback", "1", "--yes", kill_at="rollback:written")
    assert killed.returncode == -signal.SIGKILL
    dry = script(db, config, "snapshot", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "is pending" in dry.stderr and PENDING_KEY in kv(db) and not rollbacks(db)
    history = script(db, config, "history")
    assert history.returncode == 0, history.stderr
    assert "finished an interrupted rollback" in history.stderr
    assert PENDING_KEY not in kv(db) and len(rollbacks(db)) == 1


def test_a_failed_file_write_leaves_no_journal_and_the_file_unchanged(
    cli: CliFn, setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk full while writing the file: one error line, the file as it was, no journal."""
    import errno

    from triggerfish_cli.config import rollback
    from triggerfish_cli.errors import write_error

    db, config = setup
    real = rollback.atomic_writer

    def disk_full(*args: Any, **kwargs: Any) -> Any:
        raise write_error(args[0], OSError(errno.ENOSPC, "No space left on device"))

    monkeypatch.setattr(rollback, "atomic_writer", disk_full)  # the rollback's file write
    failed = cli("--db", str(db), "--config", str(config), "config", "rollback", "1", "--yes")
    assert failed.exit_code != 0, (failed.exit_code, failed.stderr)
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left" in errors[0], failed.stderr
    assert config.read_text() == V2
    assert PENDING_KEY not in kv(db) and not rollbacks(db)
    monkeypatch.setattr(rollback, "atomic_writer", real)
    done = cli("--db", str(db), "--config", str(config), "config", "rollback", "1", "--yes")
    assert done.exit_code == 0, done.stderr
    assert config.read_text() == V1 and len(rollbacks(db)) == 1


def test_a_failed_version_record_is_finished_by_the_next_command(
    cli: CliFn, setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file written, the store failing when the version is recorded (disk full)."""
    from triggerfish_cli.config import rollback as config_rollback
    from triggerfish_cli.errors import WriteError

    db, config = setup
    real = config_rollback.store_version

    def store_full(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("source") == "rollback":  # the snapshot taken first goes in
            raise WriteError(f"{db}: database or disk is full")
        return real(*args, **kwargs)

    monkeypatch.setattr(config_rollback, "store_version", store_full)
    failed = cli("--db", str(db), "--config", str(config), "config", "rollback", "1", "--yes")
    assert failed.exit_code == 9, (failed.exit_code, failed.stderr)
    assert "recording it as a version failed" in failed.stderr
    assert config.read_text() == V1 and PENDING_KEY in kv(db)
    monkeypatch.undo()
    history = cli("--db", str(db), "--config", str(config), "config", "history")
    assert history.exit_code == 0, history.stderr
    assert "finished an interrupted rollback" in history.stderr
    assert PENDING_KEY not in kv(db) and len(rollbacks(db)) == 1
