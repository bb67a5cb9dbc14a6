"""Sweeps: compare-and-delete, guards, the memory index, interruption, the lock, real processes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.helpers import gateway_writer
from tests.helpers import writer as writer_process
from tests.helpers.gateway import GATEWAY_ROWS, SESSION_ID, write_gateway_store
from tests.helpers.records import (
    NOW,
    ago,
    conv,
    conv_session,
    cron_run,
    js,
    lineage,
    memory,
    session,
)
from triggerfish_cli.demo import build_demo
from triggerfish_cli.errors import BusyError, RefusedError
from triggerfish_cli.retention.plan import Plan
from triggerfish_cli.retention.policies import defaults, load_policies
from triggerfish_cli.retention.reading import read_plan
from triggerfish_cli.retention.sweep import (
    Pacing,
    SweepInterrupted,
    apply_plan,
    check_limit,
    sweep_lock,
)
from triggerfish_cli.storage import locks
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

FAST = Pacing(min_pause=0, pause=0)
ROOT = Path(__file__).resolve().parents[2]

EXTRA = dict(
    [
        session("old", ago(40)),
        ("taint:old", "PUBLIC"),
        conv("old", 1, ago(41)),
        conv_session("old", 1),
        session("young", ago(3)),
        ("taint:young", "PUBLIC"),
        lineage("lin-old", ago(100), "h9"),
        ("lineage-hash:h9", "lin-old"),
        ("lineage-session:old:lin-old", "lin-old"),
        ("cron-history:job", js([cron_run("job", ago(50)), cron_run("job", ago(1))])),
        ("custom:untouched", js({"createdAt": "2020-01-01T00:00:00.000Z"})),
    ]
)


def contents(provider: BaseStorage) -> dict[str, str]:
    return dict(provider.scan())


def without_audit(rows: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in rows.items() if not k.startswith("audit:")}


def audits(rows: dict[str, str]) -> list[dict[str, object]]:
    return [json.loads(v) for k, v in sorted(rows.items()) if k.startswith("audit:")]


def expected_after(before: dict[str, str], plan: Plan) -> dict[str, str]:
    after = dict(before)
    for action in plan.actions():
        if action.is_delete:
            del after[action.key]
        else:
            after[action.key] = action.replacement or ""
    return after


@pytest.fixture(params=["memory", "sqlite"])
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStorage]:
    rows = {**GATEWAY_ROWS, **EXTRA}
    if request.param == "memory":
        yield MemoryStorage(rows)
        return
    store = SqliteStorage(write_gateway_store(tmp_path / "t.db", rows))
    yield store
    store.close()


def test_sweep_applies_exactly_the_plan_and_audits_once(provider: BaseStorage) -> None:
    before = contents(provider)
    plan = read_plan(provider, defaults(), NOW)
    assert plan.deletes == 12 and plan.trims == 1
    result = apply_plan(provider, plan, pacing=FAST)
    after = contents(provider)
    assert without_audit(after) == expected_after(before, plan)
    assert after["custom:untouched"] == before["custom:untouched"]
    assert after["cron-history:job"] == js([cron_run("job", ago(1))])
    (record,) = audits(after)
    assert record["action"] == "retention_sweep" and record["hook"] == "admin_retention_sweep"
    assert record["counts"] == result.counts()
    assert record["counts"]["deleted"] == 12 and record["counts"]["trimmed"] == 1  # type: ignore[index]
    assert record["namespaces"]["conv:"] == {  # type: ignore[index]
        "policy": "30d",
        "planned": 3,
        "deleted": 3,
        "bytes": sum(len(before[a.key].encode()) for a in plan.namespaces["conv:"].actions),
    }
    assert result.audit_key in after
    # a second sweep finds nothing more to do
    assert read_plan(provider, defaults(), NOW).deletes == 0


def test_records_rewritten_meanwhile_are_kept(provider: BaseStorage) -> None:
    plan = read_plan(provider, defaults(), NOW)
    revived = session("old", ago(0))[1]
    provider.set("sessions:old", revived)  # the gateway rewrote it after the plan read it
    provider.set(f"conv:{SESSION_ID}:000000000001", "{}")
    runs = js([cron_run("job", ago(50)), cron_run("job", ago(1)), cron_run("job", ago(0))])
    provider.set("cron-history:job", runs)  # a run was appended meanwhile
    result = apply_plan(provider, plan, pacing=FAST)
    after = contents(provider)
    assert after["sessions:old"] == revived
    assert after[f"conv:{SESSION_ID}:000000000001"] == "{}"
    assert after["cron-history:job"] == runs  # the compare-and-swap lost: nothing lost
    assert "taint:old" in after  # its session is still there: the guard kept it
    assert f"conv-session:{SESSION_ID}" in after  # and a message of this session is left
    assert result.counts()["changed"] == 3
    assert result.counts()["guarded"] == 2
    assert result.counts()["deleted"] == plan.deletes - 2 - 2  # changed, guarded
    assert result.counts()["trimmed"] == 0


def test_guards_keep_what_came_back(provider: BaseStorage) -> None:
    plan = read_plan(provider, defaults(), NOW)
    provider.set("conv:old:000000000002", conv("old", 2, ago(0))[1])  # a new message
    result = apply_plan(provider, plan, pacing=FAST)
    after = contents(provider)
    assert "sessions:old" in after  # it got a message during the sweep
    assert "taint:old" in after
    assert "conv-session:old" in after  # a message of its session is left
    assert "conv:old:000000000001" not in after
    by_ns = {entry.namespace: entry for entry in result.namespaces}
    assert by_ns["sessions:"].guarded == 1 and by_ns["conv-session:"].guarded == 1


def test_max_delete_refuses_before_deleting_anything(provider: BaseStorage) -> None:
    before = contents(provider)
    plan = read_plan(provider, defaults(), NOW)
    with pytest.raises(RefusedError) as info:
        check_limit(plan, 11)
    assert info.value.exit_code == 4 and "more than --max-delete 11" in str(info.value)
    check_limit(plan, 12)
    check_limit(plan, None)
    assert contents(provider) == before


def test_memory_sweep_drops_stale_index_rows_in_the_same_transaction(tmp_path: Path) -> None:
    rows = dict(
        [
            memory("gone", "PUBLIC", ago(200), expired=True),
            memory("revived", "PUBLIC", ago(200), expired=True),
            memory("live", "PUBLIC", ago(900), expired=False),
        ]
    )
    db = write_gateway_store(tmp_path / "m.db", rows)
    conn = sqlite3.connect(db)
    for key in ("gone", "revived", "live"):  # index rows, stale for the soft-deleted ones
        conn.execute("INSERT INTO memory_fts VALUES ('main-session', 'PUBLIC', ?, 'c', '')", (key,))
        conn.execute("INSERT INTO memory_meta VALUES ('main-session', 'PUBLIC', ?, '{}')", (key,))
    conn.commit()
    store = SqliteStorage(db)
    policies = load_policies({"memory": "90d"})
    plan = read_plan(store, policies, NOW)
    assert {a.key for a in plan.actions()} == {
        "memory:main-session:PUBLIC:gone",
        "memory:main-session:PUBLIC:revived",
    }
    store.set(
        "memory:main-session:PUBLIC:revived", memory("revived", "PUBLIC", NOW, expired=False)[1]
    )
    result = apply_plan(store, plan, pacing=FAST)
    assert result.counts()["deleted"] == 1 and result.counts()["changed"] == 1
    fts = {r[0] for r in conn.execute("SELECT key FROM memory_fts")}
    meta = {r[0] for r in conn.execute("SELECT key FROM memory_meta")}
    assert fts == meta == {"revived", "live"}
    assert store.get("memory:main-session:PUBLIC:live") == rows["memory:main-session:PUBLIC:live"]
    store.close()


class _InterruptingStore(SqliteStorage):
    """Ctrl-C in the middle of the third write transaction."""

    calls = 0

    def delete_if_unchanged(self, items: Iterable[tuple[str, str]], **kw: object) -> int:
        type(self).calls += 1
        if type(self).calls != 3:
            return super().delete_if_unchanged(items, **kw)  # type: ignore[arg-type]

        def interrupted() -> Iterator[tuple[str, str]]:
            for index, item in enumerate(items):
                if index == 2:
                    raise KeyboardInterrupt
                yield item

        return super().delete_if_unchanged(interrupted(), **kw)  # type: ignore[arg-type]


def _demo_store(path: Path, records: int = 3000) -> Path:
    store = SqliteStorage(path, create=True)
    build_demo(store, records=records, seed=3, now=ANCHOR, days=120)
    store.close()
    return path


ANCHOR = datetime(2026, 10, 1, tzinfo=timezone.utc)
ANCHOR_ISO = "2026-10-01T00:00:00.000Z"


def _reference(db: Path, tmp_path: Path) -> dict[str, str]:
    """The store after one uninterrupted sweep, on a copy."""
    copy = tmp_path / "reference.db"
    shutil.copyfile(db, copy)
    store = SqliteStorage(copy)
    apply_plan(store, read_plan(store, defaults(), ANCHOR), pacing=FAST)
    rows = without_audit(contents(store))
    store.close()
    return rows


def test_ctrl_c_rolls_back_the_batch_and_the_next_sweep_finishes(tmp_path: Path) -> None:
    db = _demo_store(tmp_path / "s.db")
    reference = _reference(db, tmp_path)
    store = _InterruptingStore(db)
    plan = read_plan(store, defaults(), ANCHOR)
    # Batches of exactly 10: the lock and WAL budgets, which size batches by how long
    # they took (a loaded machine made them 10 and 8, or 10 and 3), out of the way.
    pacing = Pacing(batch_size=10, pause=0, min_pause=0, max_lock=3600.0, wal_frames=10**9)
    with pytest.raises(SweepInterrupted) as info:
        apply_plan(store, plan, pacing=pacing)
    assert info.value.exit_code == 130
    assert "next sweep finishes the job" in str(info.value)
    rows = contents(store)
    (record,) = audits(rows)
    assert record["interrupted"] is True
    assert record["counts"]["deleted"] == 20  # type: ignore[index]  # two batches, not 22
    assert len(without_audit(rows)) == 3000 - 20
    store.close()
    again = SqliteStorage(db)
    apply_plan(again, read_plan(again, defaults(), ANCHOR), pacing=FAST)
    assert without_audit(contents(again)) == reference
    again.close()


class _Clock:
    """The lock module's clock, its waits counted (never a measured time in a test)."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.monotonic = time.monotonic

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        time.sleep(seconds)


def test_a_second_sweep_is_busy_at_once_or_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = write_gateway_store(tmp_path / "l.db")
    first, second = SqliteStorage(db), SqliteStorage(db)
    clock = _Clock()
    monkeypatch.setattr(locks, "time", clock)
    with sweep_lock(first):
        with pytest.raises(BusyError) as info, sweep_lock(second):
            pass
        assert info.value.exit_code == 6
        assert f"pid {os.getpid()}" in str(info.value)
        assert clock.waits == []  # at once, not after a wait (it was: elapsed < 5 s)
    with sweep_lock(second, wait=1):
        pass
    assert (tmp_path / "l.db-tfadmin-retention-sweep.lock").exists()
    first.close()
    second.close()


def _sweep_command(db: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "triggerfish_cli",
        "--db",
        str(db),
        "retention",
        "sweep",
        "--yes",
        "--as-of",
        ANCHOR_ISO,
        *extra,
    ]


def _wait_for_deletions(db: Path, before: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        conn = sqlite3.connect(db, timeout=5)
        count = conn.execute("SELECT count(*) FROM kv").fetchone()[0]
        conn.close()
        if count < before - 50:
            return
        time.sleep(0.05)
    pytest.fail("the sweep never started deleting")


#: Runs argv[1:] with SIGINT and SIGTERM at their defaults and unblocked.
_AS_FROM_A_TERMINAL = (
    "import os, signal, sys; "
    "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)]; "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM}); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@pytest.mark.parametrize(
    "how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["kill-9", "kill", "ctrl-c"]
)
def test_a_killed_sweep_leaves_a_consistent_store_and_the_next_one_finishes(
    tmp_path: Path, how: signal.Signals
) -> None:
    db = _demo_store(tmp_path / "k.db")
    reference = _reference(db, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sweep = _sweep_command(db, "--batch-size", "5", "--pause", "0.05", "--format", "json")
    process = subprocess.Popen(
        # As a terminal starts it: Ctrl-C at its default, nothing blocked. A suite run
        # as a background job of a non-interactive shell (CI) has SIGINT ignored, as
        # POSIX says, and a child inherits that: the sweep would rightly ignore it too.
        [sys.executable, "-c", _AS_FROM_A_TERMINAL, *sweep],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _wait_for_deletions(db, 3000, process)
    process.send_signal(how)
    _out, err = process.communicate(timeout=60)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = dict(conn.execute("SELECT key, value FROM kv").fetchall())
    conn.close()
    # stopped midway
    assert len(without_audit(rows)) > len(reference), (process.returncode, err[-2000:])
    if how == signal.SIGKILL:
        assert process.returncode == -signal.SIGKILL
        assert audits(rows) == []
    else:  # stopped between batches, wrote the partial audit record, exit 130
        assert process.returncode == 130, err
        assert b"next sweep finishes the job" in err
        (record,) = audits(rows)
        assert record["interrupted"] is True
        assert 0 < record["counts"]["deleted"] == 3000 - len(without_audit(rows))  # type: ignore[index]
    finish = subprocess.run(
        _sweep_command(db, "--format", "json"), env=env, capture_output=True, timeout=120
    )
    assert finish.returncode == 0, finish.stderr
    store = SqliteStorage(db)
    assert without_audit(contents(store)) == reference
    store.close()


def test_a_second_process_writing_during_a_sweep_loses_nothing(tmp_path: Path) -> None:
    db = _demo_store(tmp_path / "w.db")
    store = SqliteStorage(db)
    plan = read_plan(store, defaults(), ANCHOR)
    old = sorted(a.key.removeprefix("sessions:") for a in plan.namespaces["sessions:"].actions)
    stop, out = tmp_path / "stop", tmp_path / "writes.json"
    interleaved: list[int] = []

    def between_batches(_size: int) -> None:
        if len(interleaved) < 20:  # the writer commits between the first 20 batches
            interleaved.append(_writer_commits(db, after=_writer_commits(db)))

    with writer_process.running(db, stop, out, *old[:40]):
        _writer_commits(db, after=0)
        plan = read_plan(store, defaults(), ANCHOR)  # read while the writer writes
        expected = {action.key: action.expected for action in plan.namespaces["sessions:"].actions}
        planned = [key for key in (f"sessions:{sid}" for sid in old[:40]) if key in expected]
        assert planned
        # the writer revives a planned session after the plan read it
        _wait_until(lambda: any(store.get(key) != expected[key] for key in planned))
        result = apply_plan(
            store, plan, pacing=Pacing(batch_size=25, pause=0.005), on_progress=between_batches
        )
    report = json.loads(out.read_text())
    assert report["errors"] == []
    # it really wrote during the sweep: seen between batches, never a count of writes
    # made in a fixed time (it was: more than 50, which a loaded machine may not give)
    assert len(interleaved) == 20 and report["count"] > max(interleaved)
    after = contents(store)
    lost = {k: v for k, v in report["writes"].items() if after.get(k) != v}
    assert lost == {}
    assert result.counts()["deleted"] > 1000
    assert result.counts()["changed"] + result.counts()["guarded"] > 0
    store.close()


def _wait_until(condition: Callable[[], bool]) -> None:
    """Until ``condition`` holds (60 s: a guard against a hang, not a measure)."""
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("the writer stopped writing")
        time.sleep(0.002)


def _writer_commits(db: Path, after: int | None = None) -> int:
    """How many new sessions the writer process has committed (its loops); with
    ``after``, once it has committed more than that."""

    def count() -> int:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            row = conn.execute(
                "SELECT count(*) FROM kv WHERE key >= 'sessions:w-' AND key < 'sessions:w.'"
            ).fetchone()
        return int(row[0])

    if after is not None:
        _wait_until(lambda: count() > after)
    return count()


def test_batches_respect_the_batch_size(provider: BaseStorage) -> None:
    plan = read_plan(provider, defaults(), NOW)
    sizes: list[int] = []
    apply_plan(provider, plan, pacing=Pacing(batch_size=3, pause=0), on_progress=sizes.append)
    assert max(sizes) <= 3 and sum(sizes) == plan.deletes + plan.trims


def test_bulk_writes_skip_the_fsync_after_each_commit_and_restore_it(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "b.db", create=True)
    conn = store.connection
    store.set("a", "1")  # the write gate prepared our connection: no sync inside a freeze
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0  # ours, after
    assert store.gate.durable
    with store.bulk_writes():
        assert not store.gate.durable
        store.set("b", "2")
    assert store.gate.durable
    store.close()


@pytest.mark.parametrize("cap", [12, 60])
def test_batches_keep_their_own_wal_frames_under_the_cap(tmp_path: Path, cap: int) -> None:
    """The pacer sizes batches by the frames each commit itself wrote (the gate counts
    them across the transaction), not by the WAL's total, which grows past a batch
    whenever a checkpoint lags."""
    store = SqliteStorage(_demo_store(tmp_path / "f.db"))
    gate = store.write_gate
    assert gate is not None
    plan = read_plan(store, defaults(), ANCHOR)
    frames: list[int] = []
    sizes: list[int] = []

    def batch(size: int) -> None:
        sizes.append(size)
        frames.append(gate.last_frames)

    pacing = Pacing(wal_frames=cap, pause=0, min_pause=0)
    result = apply_plan(store, plan, pacing=pacing, on_progress=batch)
    store.close()
    assert result.counts()["deleted"] > 1000 and len(frames) > 5
    assert all(count > 0 for count in frames)  # each commit's own frames, always known
    settled = sorted(frames[3:])  # after the first batches have measured a record's cost
    assert settled[len(settled) // 2] <= cap * 1.5, (cap, frames)
    assert max(sizes) >= 2  # sized by frames, not collapsed to single records


def test_batches_are_measured_over_every_transaction_the_backend_cuts_them_into(
    tmp_path: Path,
) -> None:
    """The backend may cut a sweep batch into several gated transactions (its own
    sizer, here held to 40 frames by the gate while a writer runs): the pacer sizes
    the next batch by all of them, not by the last one, whose frames divided by the
    whole batch's records made batches grow far past their cap."""
    db = _demo_store(tmp_path / "m.db", records=6000)
    store = SqliteStorage(db)
    gate = store.write_gate
    assert gate is not None
    gate.frame_budget = 40  # the backend's transactions: ~40 frames each
    plan = read_plan(store, defaults(), ANCHOR)
    sizes: list[int] = []
    with gateway_writer.running(db, tmp_path, period=0.01):
        time.sleep(0.05)
        before = gate.stats.transactions
        pacing = Pacing(wal_frames=200, pause=0, min_pause=0)
        result = apply_plan(store, plan, pacing=pacing, on_progress=sizes.append)
        transactions = gate.stats.transactions - before
    store.close()
    assert gateway_writer.report(tmp_path).fail == 0
    records = result.counts()["deleted"] + result.counts()["trimmed"]
    assert records > 1000 and transactions > len(sizes)  # the backend did cut batches
    per_record = gate.total_frames / records
    # after the first two, each batch within its 200-frame cap (2x for the estimate's
    # smoothing), measured over all its transactions (by the last alone: 800, 1,303)
    assert max(sizes[2:]) <= 2 * 200 / per_record, (per_record, sizes)
