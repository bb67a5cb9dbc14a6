"""`triggerfish-admin retention` on a gateway-written store."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import CRON_ID, GATEWAY_ROWS, LINEAGE_ID, SESSION_ID, dump_tables
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

AS_OF = "2026-07-01T00:00:00Z"
GONE = {
    f"conv:{SESSION_ID}:000000000000",
    f"conv:{SESSION_ID}:000000000001",
    f"conv-session:{SESSION_ID}",
    "pairing:telegram:482913",
    f"cron-history:{CRON_ID}",
    f"lineage:{LINEAGE_ID}",
    f"lineage-session:{SESSION_ID}:{LINEAGE_ID}",
    f"lineage-hash:{'ab' * 32}",
}


def kv_rows(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT key, value FROM kv").fetchall())
    finally:
        conn.close()


def write_config(base: Path, text: str) -> Path:
    path = base / "triggerfish.yaml"
    path.write_text(text)
    return path


# -- policies -----------------------------------------------------------------------


def test_policies_show_the_source_of_each(cli: CliFn, base_dir: Path) -> None:
    write_config(base_dir, "retention:\n  sessions: 14d\n  config: {keep: 3}\n  hold: [audit]\n")
    result = cli("retention", "policies", "-f", "json")
    assert result.exit_code == 0, result.stderr
    rows = {row["namespace"]: row for row in result.json()}  # type: ignore[union-attr]
    assert rows["sessions:"] == {
        "namespace": "sessions:",
        "policy": "14d",
        "kind": "age",
        "seconds": 14 * 86400,
        "keep": None,
        "follows": None,
        "held": False,
        "source": "config",
        "basis": "SPEC.md",
        "rule": "sessions idle for 14d (created, last taint change and last message all "
        "older); never the main session, nor a channel's current session (session-id:)",
    }
    assert rows["config:"]["keep"] == 3 and rows["config:"]["source"] == "config"
    assert rows["audit:"]["held"] is True and rows["audit:"]["policy"] == "1y"
    assert rows["lineage:"]["source"] == "default"
    assert rows["taint:"]["kind"] == "follows" and rows["taint:"]["follows"] == "sessions:"
    table = cli("retention", "policies")
    assert "sessions:" in table.stdout and "config" in table.stdout


@pytest.mark.parametrize("command", [["policies"], ["plan"], ["sweep", "--yes"]])
def test_an_invalid_policy_is_exit_8_naming_the_yaml_path(
    cli: CliFn, base_dir: Path, gateway_db: Path, command: list[str]
) -> None:
    before = dump_tables(gateway_db)
    path = write_config(base_dir, "retention:\n  sessions: 0d\n")
    result = cli("retention", *command)
    assert result.exit_code == 8
    assert result.stdout == ""
    assert result.stderr == f"error: {path}: retention.sessions: '0d' is zero " + (
        "(to keep nothing, there is no setting; use 1h)\n"
    )
    write_config(base_dir, "retention:\n  hold: [lineage, bogus]\n")
    result = cli("retention", *command)
    assert result.exit_code == 8 and "retention.hold[1]: unknown namespace 'bogus'" in (
        result.stderr
    )
    assert dump_tables(gateway_db) == before


# -- plan ---------------------------------------------------------------------------------


def test_plan_is_per_namespace_and_writes_nothing(cli: CliFn, gateway_db: Path) -> None:
    before = dump_tables(gateway_db)
    result = cli("retention", "plan", "--as-of", AS_OF, "-f", "json")
    assert result.exit_code == 0, result.stderr
    rows = {row["namespace"]: row for row in result.json()}  # type: ignore[union-attr]
    assert rows["conv:"] == {
        "namespace": "conv:",
        "policy": "30d",
        "source": "default",
        "held": False,
        "records": 2,
        "delete": 2,
        "trim": 0,
        "bytes": sum(len(GATEWAY_ROWS[k].encode()) for k in GONE if k.startswith("conv:")),
        "oldest": "2026-03-28T14:05:41.000Z",
        "unknown_age": 0,
        "deferred": 0,
        "rule": "messages older than 30d",
    }
    assert sum(row["delete"] for row in rows.values()) == len(GONE)
    assert rows["sessions:"]["delete"] == 0  # the main session
    assert "memory:" not in rows and "skills:" not in rows
    assert dump_tables(gateway_db) == before


def test_plan_list_shows_keys_and_ages_unknown(cli: CliFn, gateway_db: Path) -> None:
    conn = sqlite3.connect(gateway_db)
    conn.execute("INSERT INTO kv VALUES ('workflow-runs:r1', '{\"status\":\"running\"}')")
    conn.commit()
    conn.close()
    result = cli("retention", "plan", "--list", "--as-of", AS_OF, "-f", "json")
    assert result.exit_code == 0, result.stderr
    rows = {row["key"]: row for row in result.json()}  # type: ignore[union-attr]
    assert set(rows) == GONE | {"workflow-runs:r1"}
    assert rows["workflow-runs:r1"] == {
        "key": "workflow-runs:r1",
        "namespace": "workflow-runs:",
        "action": "age unknown",
        "time": None,
        "bytes": None,
        "entries": None,
        "reason": "no readable completedAt",
    }
    assert rows[f"lineage-hash:{'ab' * 32}"]["reason"] == "its lineage record goes"
    assert rows["pairing:telegram:482913"]["time"] == "2026-03-28T14:15:00.000Z"
    table = cli("retention", "plan", "--list", "--as-of", AS_OF)
    assert "pairing:telegram:482913" in table.stdout and "age unknown" in table.stdout


def test_plan_namespace_filter_and_future_as_of(cli: CliFn, gateway_db: Path) -> None:
    result = cli(
        "retention", "plan", "-N", "conv", "-N", "pairing:", "--as-of", AS_OF, "-f", "json"
    )
    assert [row["namespace"] for row in result.json()] == ["conv:", "pairing:"]  # type: ignore[union-attr]
    bad = cli("retention", "plan", "-N", "nope")
    assert bad.exit_code == 2 and "unknown namespace 'nope'" in bad.stderr
    future = cli("retention", "plan", "--as-of", "2031-01-01T00:00:00Z", "-f", "json")
    assert future.exit_code == 0  # planning ahead is fine: "what goes by then"
    assert cli("retention", "plan", "--as-of", "soon").exit_code == 2


# -- sweep --------------------------------------------------------------------------------


def test_scheduler_runs_go_by_their_own_times(cli: CliFn, tmp_path: Path) -> None:
    """A cron run has no sessions: record; its keys age by their own times, not as orphans."""
    from tests.helpers.gateway import (
        RUN_AGENT,
        RUN_HASH,
        RUN_ID,
        RUN_LINEAGE_ID,
        SCHEDULER_RUN_ROWS,
        write_gateway_store,
    )

    db = write_gateway_store(tmp_path / "run.db", {**GATEWAY_ROWS, **SCHEDULER_RUN_ROWS})
    run_keys = set(SCHEDULER_RUN_ROWS)

    def planned(as_of: str) -> dict[str, dict[str, object]]:
        result = cli("--db", str(db), "retention", "plan", "--list", "--as-of", as_of, "-f", "json")
        assert result.exit_code == 0, result.stderr
        return {row["key"]: row for row in result.json()}  # type: ignore[union-attr]

    # 14 days after the run: nothing of it goes, nothing of it is of unknown age
    assert not set(planned("2026-04-10T00:00:00Z")) & run_keys
    # 35 days after: its messages, their counter and its todo list go; its lineage
    # (90 days) and the keys that follow it stay, and so does its memory
    later = planned("2026-05-01T00:00:00Z")
    went = {
        f"conv:{RUN_ID}:000000000000",
        f"conv:{RUN_ID}:000000000001",
        f"conv:{RUN_ID}:000000000002",
        f"conv-session:{RUN_ID}",
        f"todos:{RUN_AGENT}",
    }
    assert set(later) & run_keys == went
    assert all(later[key]["action"] == "delete" for key in went)
    assert later[f"todos:{RUN_AGENT}"]["reason"] == "scheduler run idle for more than 30d"
    # 95 days after: the lineage record goes, its index keys with it
    latest = planned("2026-07-01T00:00:00Z")
    assert set(latest) & run_keys == went | {
        f"lineage:{RUN_LINEAGE_ID}",
        f"lineage-session:{RUN_ID}:{RUN_LINEAGE_ID}",
        f"lineage-hash:{RUN_HASH}",
    }
    swept = cli("--db", str(db), "retention", "sweep", "--yes", "--as-of", "2026-05-01T00:00:00Z")
    assert swept.exit_code == 0, swept.stderr
    left = kv_rows(db)
    assert not went & set(left)
    assert f"memory:{RUN_AGENT}:INTERNAL:inbox-summary" in left  # a live memory never goes
    assert f"lineage:{RUN_LINEAGE_ID}" in left and "todos:main-session" in left


def test_sweep_needs_yes_off_a_tty_and_dry_run_is_the_plan(cli: CliFn, gateway_db: Path) -> None:
    before = dump_tables(gateway_db)
    refused = cli("retention", "sweep", "--as-of", AS_OF)
    assert refused.exit_code == 4 and "--yes" in refused.stderr
    dry = cli("retention", "sweep", "--dry-run", "--as-of", AS_OF, "-f", "json")
    plan = cli("retention", "plan", "--as-of", AS_OF, "-f", "json")
    assert dry.exit_code == 0 and dry.stdout == plan.stdout
    assert dump_tables(gateway_db) == before


def test_sweep_deletes_the_plan_and_nothing_else(cli: CliFn, gateway_db: Path) -> None:
    before = dump_tables(gateway_db)
    result = cli("retention", "sweep", "--yes", "--as-of", AS_OF, "-f", "json")
    assert result.exit_code == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict)
    assert list(summary) == [
        "store", "as_of", "started_at", "finished_at", "seconds", "interrupted", "error",
        "planned", "deleted", "trimmed", "entries_removed", "changed", "guarded", "bytes",
        "unknown_age", "audit_key", "gate", "namespaces",
    ]  # fmt: skip
    assert summary["store"] == f"sqlite:{gateway_db}"
    assert summary["gate"]["freezes"] == 0  # nobody else had the store open
    assert summary["gate"]["transactions"] >= 1
    assert summary["as_of"] == "2026-07-01T00:00:00.000Z"
    assert (summary["planned"], summary["deleted"], summary["changed"]) == (8, 8, 0)
    assert summary["interrupted"] is False and summary["error"] is None
    conv_row = next(row for row in summary["namespaces"] if row["namespace"] == "conv:")
    assert conv_row == {
        "namespace": "conv:", "policy": "30d", "planned": 2, "deleted": 2, "trimmed": 0,
        "entries_removed": 0, "changed": 0, "guarded": 0,
        "bytes": sum(len(GATEWAY_ROWS[k].encode()) for k in GONE if k.startswith("conv:")),
        "unknown_age": 0,
    }  # fmt: skip
    after = dump_tables(gateway_db)
    rows = kv_rows(gateway_db)
    audit = {k: v for k, v in rows.items() if k.startswith("audit:")}
    assert list(audit) == [summary["audit_key"]]
    assert {k: v for k, v in rows.items() if k not in audit} == {
        k: v for k, v in GATEWAY_ROWS.items() if k not in GONE
    }
    record = json.loads(audit[summary["audit_key"]])
    assert record["counts"]["deleted"] == 8 and record["namespaces"]["conv:"]["deleted"] == 2
    # the memory search tables are untouched
    assert {t: r for t, r in after.items() if t != "kv"} == {
        t: r for t, r in before.items() if t != "kv"
    }
    again = cli("retention", "sweep", "--yes", "--as-of", AS_OF, "-f", "json")
    assert again.json()["deleted"] == 0  # type: ignore[index]


def test_sweep_table_summary_and_quiet(cli: CliFn, gateway_db: Path) -> None:
    quiet = cli("retention", "sweep", "--yes", "--quiet", "--as-of", "2026-05-01T00:00:00Z")
    assert quiet.exit_code == 0 and quiet.stdout == "" and quiet.stderr == ""
    assert "pairing:telegram:482913" not in kv_rows(gateway_db)
    table = cli("retention", "sweep", "--yes", "--as-of", AS_OF)
    assert table.exit_code == 0
    assert "lineage:" in table.stdout
    assert f"swept sqlite:{gateway_db} as of 2026-07-01T00:00:00.000Z: deleted 3," in (table.stdout)


def test_max_delete_refuses_and_touches_nothing(cli: CliFn, gateway_db: Path) -> None:
    before = dump_tables(gateway_db)
    result = cli("retention", "sweep", "--yes", "--max-delete", "7", "--as-of", AS_OF)
    assert result.exit_code == 4
    assert "the plan deletes 8 records, more than --max-delete 7; nothing was deleted" in (
        result.stderr
    )
    assert dump_tables(gateway_db) == before
    assert cli("retention", "sweep", "--yes", "--max-delete", "8", "--as-of", AS_OF,
               "-q").exit_code == 0  # fmt: skip


class _Clock:
    """The lock module's clock: its waits counted, and announced (never a measured time)."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.waiting = threading.Event()
        self.monotonic = time.monotonic

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.waiting.set()
        time.sleep(seconds)


def test_a_second_sweep_exits_6_at_once_or_waits(
    cli: CliFn, gateway_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.storage import locks

    clock = _Clock()
    monkeypatch.setattr(locks, "time", clock)
    before = dump_tables(gateway_db)
    holder = SqliteStorage(gateway_db)
    with holder.lock("retention-sweep"):
        busy = cli("retention", "sweep", "--yes", "--as-of", AS_OF)
        assert clock.waits == []  # at once, without a wait (it was: elapsed < 5 s)
        assert busy.exit_code == 6
        assert "retention-sweep" in busy.stderr and "is held by another process" in busy.stderr
        waited = cli("retention", "sweep", "--yes", "--wait", "0.3", "--as-of", AS_OF)
        assert waited.exit_code == 6 and "after waiting 0.3 s" in waited.stderr
    assert dump_tables(gateway_db) == before

    held, clock.waiting = threading.Event(), threading.Event()

    def hold_until_the_sweep_waits() -> None:
        with holder.lock("retention-sweep"):
            held.set()
            clock.waiting.wait(60)  # released once the sweep has met it and waits

    thread = threading.Thread(target=hold_until_the_sweep_waits)
    thread.start()
    assert held.wait(60)  # held before the sweep starts (it was: a 0.1 s sleep)
    ok = cli("retention", "sweep", "--yes", "--wait", "30", "--as-of", AS_OF, "-f", "json")
    thread.join(60)
    assert clock.waiting.is_set()  # it did wait, then ran
    assert ok.exit_code == 0 and ok.json()["deleted"] == 8  # type: ignore[index]
    holder.close()


def test_sweep_as_of_cannot_be_in_the_future(cli: CliFn, gateway_db: Path) -> None:
    result = cli("retention", "sweep", "--yes", "--as-of", "2099-01-01T00:00:00Z")
    assert result.exit_code == 2 and "in the future" in result.stderr


def test_sweep_confirmation_and_progress_on_a_tty(
    cli: CliFn, gateway_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.cli import output
    from triggerfish_cli.cli.output import base, results, table

    monkeypatch.setattr(output.Output, "stdin_is_tty", property(lambda self: True))
    for module in (base, results, table):  # every stream is a terminal
        monkeypatch.setattr(module, "isatty", lambda stream: True)
    before = dump_tables(gateway_db)
    no = cli("retention", "sweep", "--as-of", AS_OF, input="n\n")
    assert no.exit_code == 4 and "Delete 8 and trim 0 record(s)" in no.stderr
    assert "  conv:  delete 2" in no.stderr  # what it would do, before asking
    assert dump_tables(gateway_db) == before
    yes = cli("retention", "sweep", "--as-of", AS_OF, input="y\n")
    assert yes.exit_code == 0
    assert "sweeping" in yes.stderr  # the progress bar
    assert not set(kv_rows(gateway_db)) & GONE


def test_sweep_on_the_memory_backend_and_held_namespaces(
    cli: CliFn, base_dir: Path, gateway_db: Path
) -> None:
    write_config(base_dir, "retention:\n  hold: [conv, lineage]\n")
    result = cli("retention", "sweep", "--yes", "--as-of", AS_OF, "-f", "json")
    assert result.exit_code == 0, result.stderr
    rows = kv_rows(gateway_db)
    assert {k for k in GONE if k not in rows} == {
        "pairing:telegram:482913",
        f"cron-history:{CRON_ID}",
    }
    memory = cli("--backend", "memory", "retention", "sweep", "--yes", "-f", "json")
    assert memory.exit_code == 0 and memory.json()["deleted"] == 0  # type: ignore[index]
