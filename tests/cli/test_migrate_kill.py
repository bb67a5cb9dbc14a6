"""A migrate killed (SIGKILL) at any of its finishing steps is finished by the next run.

Issue 15: the progress record went first, so a kill before the memory index was
rebuilt left a target with neither ``memory_meta`` rows nor an audit record,
which the rerun refused as "not empty". Now: verified is recorded, the index
rebuilt, the audit record written under the key recorded first, and the
progress record dropped last; a rerun on a target whose copy was verified
only finishes (no copy, no verification), and never writes a second audit
record. The kills go to the CLI run through tests/helpers/launch.py, which
SIGKILLs it just before (or after) the finishing step named; the reruns are the
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

import pytest

from tests.helpers import launch
from tests.helpers.gateway import write_gateway_store
from triggerfish_cli.migrate.planning import PROGRESS_KEY

RUN = "triggerfish_cli.migrate.run"
#: Where to kill: verified recorded; the index rebuilt; the audit record written;
#: the progress record dropped (the steps of migrate.run.finish).
POINTS = {
    "migrate:verified": ("--kill-before", f"{RUN}:_index"),
    "migrate:indexed": ("--kill-before", f"{RUN}:_audit"),
    "migrate:audited": ("--kill-before", f"{RUN}:_drop_progress"),
    "migrate:done": ("--kill-after", f"{RUN}:_drop_progress"),
}


def script(*args: str, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script; with ``kill_at``, the CLI killed at that point."""
    path = Path(sys.executable).with_name("triggerfish-admin")
    command = launch.command(*POINTS[kill_at]) if kill_at else [str(path)]
    return subprocess.run(
        [*command, *args],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def kv(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT key, value FROM kv"))
    finally:
        conn.close()


def index_rows(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        meta = conn.execute("SELECT * FROM memory_meta ORDER BY 1, 2, 3").fetchall()
        fts = conn.execute("SELECT * FROM memory_fts ORDER BY 1, 2, 3").fetchall()
        return meta + fts
    finally:
        conn.close()


def migrate_audits(rows: dict[str, str]) -> list[dict[str, object]]:
    return [
        json.loads(v) for k, v in sorted(rows.items()) if k.startswith("audit:") and "migrate" in k
    ]


@pytest.fixture
def reference(tmp_path: Path) -> tuple[Path, Path]:
    """A gateway store, and the target an uninterrupted migrate makes of it."""
    source = write_gateway_store(tmp_path / "source.db")
    target = tmp_path / "reference.db"
    done = script("migrate", "--from", str(source), "--to", str(target), "-f", "json")
    assert done.returncode == 0, done.stderr
    return source, target


@pytest.mark.parametrize("point", POINTS)
def test_a_migrate_killed_while_finishing_is_finished_by_the_rerun(
    tmp_path: Path, reference: tuple[Path, Path], point: str
) -> None:
    source, clean = reference
    target = tmp_path / "target.db"
    killed = script(
        "migrate", "--from", str(source), "--to", str(target), "-f", "json", kill_at=point
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    rerun = script("migrate", "--from", str(source), "--to", str(target), "-f", "json")
    if point == "migrate:done":  # it had finished: the target is a full, finished store
        assert rerun.returncode == 4 and "is not empty" in rerun.stderr, rerun.stderr
    else:
        assert rerun.returncode == 0, rerun.stderr
        report = json.loads(rerun.stdout)
        assert report["target_state"] == "finishing" and report["copied"] == 0
        assert report["verified"]
    rows = kv(target)
    assert PROGRESS_KEY not in rows
    # The memory index as an uninterrupted run builds it, and one audit record.
    assert index_rows(target) == index_rows(clean) and index_rows(target)
    assert len(migrate_audits(rows)) == 1
    data = {k: v for k, v in rows.items() if not k.startswith(("audit:", "tfadmin:"))}
    assert data == {k: v for k, v in kv(clean).items() if not k.startswith(("audit:", "tfadmin:"))}


def test_a_rerun_after_a_kill_while_finishing_says_it_finishes(
    tmp_path: Path, reference: tuple[Path, Path]
) -> None:
    source, _ = reference
    target = tmp_path / "target.db"
    killed = script(
        "migrate", "--from", str(source), "--to", str(target), kill_at="migrate:indexed"
    )
    assert killed.returncode == -signal.SIGKILL
    planned = script("migrate", "--from", str(source), "--to", str(target), "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert "copied and verified" in planned.stdout and "would be finished" in planned.stdout
    rerun = script("migrate", "--from", str(source), "--to", str(target))
    assert rerun.returncode == 0, rerun.stderr
    assert "finishing the migration" in rerun.stderr
