"""Issue 35: the taint is honoured by `retention plan`, `retention sweep` and `kv namespaces`.

With ``TRIGGERFISH_TAINT=PUBLIC`` (or ``--taint``), memory rows above it were named
with their deletion time and size by ``retention plan --list``, without even the
raw read's audit record, and counted by ``kv namespaces``. Now they are neither
named, counted nor sized; unset, ``--list`` names them and audits it as ``kv list``
does. The sweep still deletes what the policies say (retention is not a read).
These run the installed console script.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.memories import MAIN, current_rows, mkey, write_memory_store
from tests.helpers.terminal import SCRIPT
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

AS_OF = "2026-06-01T00:00:00Z"
#: Soft-deleted memories due at AS_OF under `memory: 30d`, by level (tests/helpers/memories.py).
DUE = {
    "PUBLIC": mkey(MAIN, "PUBLIC", "old-fact"),
    "CONFIDENTIAL": mkey(MAIN, "CONFIDENTIAL", "project-plan"),
    "RESTRICTED": mkey(MAIN, "RESTRICTED", "old-secret"),
}
HIDDEN_AT_PUBLIC = [key for key in current_rows() if key.startswith("memory:")]
HIDDEN_AT_PUBLIC = [key for key in HIDDEN_AT_PUBLIC if ":PUBLIC:" not in key]


@pytest.fixture
def db(base_dir: Path) -> Path:
    (base_dir / "triggerfish.yaml").write_text("retention:\n  memory: 30d\n")
    return write_memory_store(base_dir / "data" / "triggerfish.db")


def deletes(text: str) -> list[str]:
    return sorted(row["key"] for row in json.loads(text) if row["action"] == "delete")


def updated(value: str) -> str | None:
    try:
        return str(json.loads(value)["updatedAt"])
    except (ValueError, KeyError):
        return None


def run(*args: str, taint: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRIGGERFISH_TAINT"}
    if taint is not None:
        env["TRIGGERFISH_TAINT"] = taint
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def raw_read_audits(db: Path) -> list[dict[str, Any]]:
    with SqliteStorage(db) as store:
        return [json.loads(v) for k, v in store.scan("audit:") if k.endswith(":admin_kv_raw_read")]


def memory_rows(db: Path) -> dict[str, str]:
    with SqliteStorage(db) as store:
        return dict(store.scan("memory:"))


def test_plan_list_at_a_set_taint_names_nothing_above_it(db: Path) -> None:
    listed = run("retention", "plan", "--list", "--as-of", AS_OF, "-f", "json", taint="PUBLIC")
    assert listed.returncode == 0, listed.stderr
    keys = [row["key"] for row in json.loads(listed.stdout)]
    assert DUE["PUBLIC"] in keys
    for hidden in HIDDEN_AT_PUBLIC:
        assert hidden not in listed.stdout + listed.stderr
    assert "memory rows above PUBLIC left out (--taint)" in listed.stderr
    assert raw_read_audits(db) == []  # it named nothing above PUBLIC

    table = run("retention", "plan", "-N", "memory", "--as-of", AS_OF, "--taint", "PUBLIC")
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith("memory:"))
    assert row.split()[3] == "1"  # delete: the PUBLIC one only
    assert "delete 1 record(s)" in table.stderr

    inside = run("retention", "plan", "--list", "-N", "memory", "--as-of", AS_OF, "-f", "json",
                 taint="CONFIDENTIAL")  # fmt: skip
    assert deletes(inside.stdout) == [DUE["CONFIDENTIAL"], DUE["PUBLIC"]]
    (record,) = raw_read_audits(db)  # the CONFIDENTIAL key it named, audited as kv list does
    assert record["keys"] == [DUE["CONFIDENTIAL"]] and record["taint"] == "CONFIDENTIAL"
    assert record["command"] == "retention plan --list"


def test_plan_list_without_a_taint_names_every_row_and_audits_it(db: Path) -> None:
    listed = run("retention", "plan", "--list", "-N", "memory", "--as-of", AS_OF, "-f", "json")
    assert listed.returncode == 0, listed.stderr
    assert deletes(listed.stdout) == sorted(DUE.values())
    (record,) = raw_read_audits(db)
    broken = mkey(MAIN, "RESTRICTED", "broken-secret")  # listed too: of unknown age
    assert record["keys"] == [DUE["CONFIDENTIAL"], broken, DUE["RESTRICTED"]]
    assert record["counts"] == {"memory_rows": 3, "CONFIDENTIAL": 1, "RESTRICTED": 2}
    assert "Old vault" not in json.dumps(record)  # keys, never content
    counts = run("retention", "plan", "-N", "memory", "--as-of", AS_OF)
    assert counts.returncode == 0 and len(raw_read_audits(db)) == 1  # counts name nothing


def test_kv_namespaces_counts_no_memory_row_above_the_taint(db: Path) -> None:
    def memory_row(*args: str, taint: str | None = None) -> dict[str, Any]:
        done = run("kv", "namespaces", "-f", "json", *args, taint=taint)
        assert done.returncode == 0, done.stderr
        return next(r for r in json.loads(done.stdout) if r["namespace"] == "memory:")

    rows = memory_rows(db)
    public = {k: v for k, v in rows.items() if k not in HIDDEN_AT_PUBLIC}
    assert memory_row()["keys"] == len(rows)  # unset: the raw view counts every row
    for args, taint in (((), "PUBLIC"), (("--taint", "PUBLIC"), None)):
        seen = memory_row("--ages", *args, taint=taint)
        assert seen["keys"] == len(public)
        assert seen["bytes"] == sum(len(v.encode()) for v in public.values())
        assert seen["newest"] == max(filter(None, map(updated, public.values())))
    every = memory_row("--taint", "RESTRICTED")
    assert every["keys"] == len(rows)
    assert raw_read_audits(db) == []


def test_a_sweep_at_a_set_taint_deletes_by_policy_and_reports_only_what_it_may_name(
    db: Path,
) -> None:
    refused = run("retention", "sweep", "-N", "memory", "--as-of", AS_OF, "--max-delete", "1",
                  "--yes", taint="PUBLIC")  # fmt: skip
    assert refused.returncode == 4
    assert "more than --max-delete 1 records (memory rows above PUBLIC)" in refused.stderr
    assert " 3 " not in refused.stderr  # no count that holds the hidden rows

    swept = run("retention", "sweep", "--yes", "--as-of", AS_OF, "-f", "json", taint="PUBLIC")
    assert swept.returncode == 0, swept.stderr
    summary = json.loads(swept.stdout)
    assert summary["taint"] == "PUBLIC"
    memory = next(r for r in summary["namespaces"] if r["namespace"] == "memory:")
    assert memory["planned"] == memory["deleted"] == 1
    assert memory["bytes"] == len(current_rows()[DUE["PUBLIC"]].encode())
    for hidden in HIDDEN_AT_PUBLIC:
        assert hidden not in swept.stdout + swept.stderr
    left = memory_rows(db)
    assert not set(DUE.values()) & set(left)  # every level's due memory is gone
    with SqliteStorage(db) as store:
        (audit,) = [json.loads(v) for k, v in store.scan("audit:") if "retention_sweep" in k]
    assert audit["namespaces"]["memory:"]["deleted"] == 3  # the audit record counts all


def test_a_sweep_with_memory_rows_hidden_cannot_say_there_is_nothing_to_do(db: Path) -> None:
    """Only hidden memories due: it still asks for --yes (else the answer would tell)."""
    with SqliteStorage(db) as store:
        store.delete(DUE["PUBLIC"])
    asked = run("retention", "sweep", "-N", "memory", "--as-of", AS_OF, taint="PUBLIC")
    assert asked.returncode == 4 and "needs confirmation" in asked.stderr
    assert DUE["RESTRICTED"] in memory_rows(db)
