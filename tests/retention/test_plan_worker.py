"""A big store's ``conv:`` messages planned by a worker process (retention/plan_worker.py).

The plan must be the same, key for key, as when one process reads everything;
a worker that fails in any way only costs time.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway import GATEWAY_ROWS, write_gateway_store
from triggerfish_cli.demo import build_demo
from triggerfish_cli.retention import plan_worker
from triggerfish_cli.retention.plan import Plan
from triggerfish_cli.retention.policies import defaults
from triggerfish_cli.retention.reading import read_plan
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

ANCHOR = datetime(2026, 10, 1, tzinfo=timezone.utc)
GATEWAY_NOW = datetime(2026, 5, 1, tzinfo=timezone.utc)


def digest(plan: Plan) -> dict[str, Any]:
    return {
        "namespaces": {
            prefix: (
                [
                    (a.key, a.expected, a.replacement, a.time, a.reason, a.guard, a.removed)
                    for a in ns.actions
                ],
                [(u.key, u.reason) for u in ns.unknown],
                ns.records,
                ns.deferred,
            )
            for prefix, ns in plan.namespaces.items()
        },
        "unknown": plan.unknown_namespaces,
    }


class Spy:
    """The workers read_plan started, and how each ended."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.workers: list[plan_worker.Worker] = []
        start = plan_worker.start

        def spy(*args: Any, **kwargs: Any) -> plan_worker.Worker | None:
            worker = start(*args, **kwargs)
            if worker is not None:
                self.workers.append(worker)
            return worker

        monkeypatch.setattr(plan_worker, "start", spy)


def odd_messages() -> dict[str, str]:
    """Messages the worker's share must handle too: session ids that are not lowercase
    hex UUIDs, an empty one, times in other forms or unreadable, a bare string."""
    rows = dict(GATEWAY_ROWS)

    def message(sid: str, seq: int, when: Any) -> tuple[str, str]:
        value = {"session_id": sid, "role": "user", "content": "hi", "timestamp": when}
        return f"conv:{sid}:{seq:012d}", json.dumps(value, separators=(",", ":"))

    for sid in ("sess_abc", "F0E1D2C3-UPPER", "e9-ours", "0a-theirs", "", "zz:colon"):
        for seq, when in enumerate(
            ["2026-01-01T00:00:00.000Z", "2026-04-30T10:00:00+02:00", None, 17]
        ):
            key, value = message(sid, seq, when)
            rows[key] = value
    rows["conv:bare:000000000000"] = "not json"
    rows["conv:"] = "{}"
    return rows


@pytest.mark.parametrize("only", [None, {"sessions:"}, {"conv:", "lineage-hash:"}])
@pytest.mark.parametrize("kind", ["demo", "gateway"])
def test_the_plan_is_the_same_with_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, only: set[str] | None
) -> None:
    if kind == "demo":
        store = SqliteStorage(tmp_path / "d.db", create=True)
        build_demo(store, records=6000, seed=5, now=ANCHOR, days=120)
        now = ANCHOR
    else:
        store = SqliteStorage(write_gateway_store(tmp_path / "g.db", odd_messages()))
        now = GATEWAY_NOW
    single = read_plan(store, defaults(), now, only=only)
    spy = Spy(monkeypatch)
    monkeypatch.setattr(plan_worker, "MIN_MESSAGES", 1)
    for ours in [(), ("conv:e", "conv:f"), tuple(f"conv:{d}" for d in "3456789abcdef")]:
        monkeypatch.setattr(plan_worker, "share", lambda *counts, ours=ours: ours)
        split = read_plan(store, defaults(), now, only=only)
        assert digest(split) == digest(single), ours
    store.close()
    assert len(spy.workers) == 3
    assert all(worker.error is None for worker in spy.workers), [w.error for w in spy.workers]
    assert all(worker.process.returncode == 0 for worker in spy.workers)
    if only is None:  # the worker's part of it was there to plan
        assert single.namespaces["conv:"].actions or single.namespaces["conv:"].unknown
        assert single.namespaces["lineage:"].records and single.namespaces["lineage-hash:"].records
        assert kind == "gateway" or single.namespaces["lineage-hash:"].actions


@pytest.mark.parametrize(
    "script",
    [
        "import sys; sys.exit(3)",  # dies at once
        "import sys, time; sys.stdin.buffer.read(8); sys.stdout.buffer.write(b'x' * 50)",
        "import pickle, struct, sys; b = pickle.dumps(('error', 'no store'));"
        " sys.stdout.buffer.write(struct.pack('<Q', len(b)) + b)",
        "import pickle, struct, sys; b = pickle.dumps(('state', ({}, {}, set(), 42)));"
        " sys.stdout.buffer.write(struct.pack('<Q', len(b)) + b)",
    ],
    ids=["exits", "garbage", "error", "not-a-state"],
)
def test_a_worker_that_fails_costs_only_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str
) -> None:
    store = SqliteStorage(tmp_path / "f.db", create=True)
    build_demo(store, records=3000, seed=6, now=ANCHOR, days=120)
    single = read_plan(store, defaults(), ANCHOR)
    spy = Spy(monkeypatch)
    monkeypatch.setattr(plan_worker, "MIN_MESSAGES", 1)
    monkeypatch.setattr(plan_worker, "COMMAND", [sys.executable, "-c", script])
    assert digest(read_plan(store, defaults(), ANCHOR)) == digest(single)
    store.close()
    [worker] = spy.workers
    assert worker.error  # it failed, and says how
    assert worker.process.returncode is not None  # and was reaped


def test_no_worker_where_it_would_not_pay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteStorage(tmp_path / "n.db", create=True)
    build_demo(store, records=3000, seed=7, now=ANCHOR, days=120)
    policies = defaults()
    prefixes = ["conv:", "sessions:"]
    assert plan_worker.start(store, policies, ANCHOR, None, prefixes) is None  # few messages
    monkeypatch.setattr(plan_worker, "MIN_MESSAGES", 1)
    assert plan_worker.start(MemoryStorage(), policies, ANCHOR, None, prefixes) is None
    assert plan_worker.start(store, policies, ANCHOR, None, ["pairing:"]) is None
    monkeypatch.setattr(plan_worker, "_cores", lambda: 1)
    assert plan_worker.start(store, policies, ANCHOR, None, prefixes) is None
    store.close()


def test_the_share_follows_the_store() -> None:
    """This process takes more of the messages the fewer other records it has to plan
    beside them, and the more the worker has of the lineage family."""
    bench = plan_worker.share(461_605, 148_000, 308_000)  # the 1M-key bench store
    assert len(bench) == 11
    assert bench == tuple(f"conv:{digit}" for digit in "0123456789abcdef"[16 - len(bench) :])
    assert len(plan_worker.share(461_605, 300_000, 308_000)) < len(bench)  # more others
    assert len(plan_worker.share(461_605, 148_000, 400_000)) > len(bench)  # more family
    assert plan_worker.share(100_000, 900_000, 0) == ()  # never below nothing
    assert len(plan_worker.share(100_000, 0, 5_000_000)) == 15  # the worker keeps some


def test_the_worker_ends_when_we_go_away(tmp_path: Path) -> None:
    """Its stdin, held open by us, is its lifeline: at its end (we exited, or were
    killed) it ends too, whatever it was doing."""
    code = (
        "import sys, time\n"
        "from triggerfish_cli.retention.plan_worker import _lifeline\n"
        "_lifeline(sys.stdin.buffer)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    assert process.poll() is None  # its lifeline holds
    assert process.stdin is not None
    process.stdin.close()
    # 3: ended by its lifeline, not by the end of its sleep (0); no measured time (it
    # was: within 5 s), the wait's timeout is a guard against a hang, far below 600 s
    assert process.wait(timeout=120) == 3


def test_the_worker_only_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It opens the store read-only: the file is byte for byte as it was."""
    path = tmp_path / "r.db"
    store = SqliteStorage(path, create=True)
    build_demo(store, records=3000, seed=8, now=ANCHOR, days=120)
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = path.read_bytes()
    config = SqliteStorage(path).reader_config()
    assert config.options["read_only"] is True
    spy = Spy(monkeypatch)
    monkeypatch.setattr(plan_worker, "MIN_MESSAGES", 1)
    reader = SqliteStorage(path, read_only=True)
    read_plan(reader, defaults(), ANCHOR)
    reader.close()
    assert spy.workers and spy.workers[0].error is None
    assert path.read_bytes() == before
