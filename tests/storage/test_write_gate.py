"""The write gate (storage/sqlite/write_gate.py): pausing the live writers around each write.

Every writer here behaves like the gateway: its own process and connection,
no busy timeout (tests/helpers/gateway_writer.py). No outcome depends on this
machine's speed or load: each wait is for a condition (with a generous timeout
that only bounds a hang), and how long a freeze lasts is for bench/bench_gate.py.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers import gateway_writer, launch
from triggerfish_cli.demo import build_demo
from triggerfish_cli.retention.policies import defaults
from triggerfish_cli.retention.reading import read_plan
from triggerfish_cli.storage.sqlite import wal_upkeep, write_gate
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.checkpointer import Checkpointer
from triggerfish_cli.storage.sqlite.freezer import Freeze
from triggerfish_cli.storage.sqlite.gate_ledger import Ledger, lock_path
from triggerfish_cli.storage.sqlite.gate_stats import GateStats
from triggerfish_cli.storage.sqlite.live_writers import (
    SHM_CKPT_LOCK,
    SHM_WRITE_LOCK,
    LiveWriter,
    LsofTable,
    ProcessTable,
    live_writers,
    lock_holders,
    shm_lock_holder,
    shm_readers,
    store_files,
)
from triggerfish_cli.storage.sqlite.wal_index import frames_between, wal_mark
from triggerfish_cli.storage.sqlite.write_gate import FreezeTooLong, WriteGate

ANCHOR = datetime(2026, 10, 1, tzinfo=timezone.utc)
ANCHOR_ISO = "2026-10-01T00:00:00.000Z"
TABLE = ProcessTable()


def state(pid: int) -> str | None:
    return TABLE.state(pid)


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    """Until ``condition()``; the timeout only bounds a hang (never a timed assertion)."""
    until = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < until, f"still not {what} after {seconds} s"
        time.sleep(0.002)


def patient(store: SqliteStorage, *, cap: bool = True) -> SqliteStorage:
    """The freeze cap (with ``cap``) and the watchdog's deadline far beyond any stall of a
    loaded machine, for a test whose subject is neither: a stall of ours inside a freeze
    then never rolls a write back, nor lets the watchdog resume a writer under our lock.
    (A freeze's length is bench/bench_gate.py's to measure.)"""
    if cap:
        store.gate.cap = 3600.0
    store.gate.freezer.deadline = 3600.0
    return store


def writer_commits(db: Path, prefix: str = "sessions:gw-") -> str:
    """The newest key the writer process has committed (its keys grow with each write)."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute(
            "SELECT max(key) FROM kv WHERE key >= ? AND key < ?", (prefix, end)
        ).fetchone()
    return str(row[0] or "")


def writes_again(db: Path, what: str = "the writer writing") -> None:
    """Until the writer process commits a write it had not committed yet."""
    last = writer_commits(db)
    wait_for(lambda: writer_commits(db) > last, what)


def empty_store(path: Path) -> Path:
    SqliteStorage(path, create=True).close()
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return empty_store(tmp_path / "gate.db")


# -- finding them ------------------------------------------------------------------------


def test_live_writers_names_each_process_with_the_store_open(db: Path, tmp_path: Path) -> None:
    assert live_writers(db) == []
    with gateway_writer.running(db, tmp_path) as writer:
        (found,) = live_writers(db)
        assert found.pid == writer.pid and found.may_signal
        assert "gateway_writer.py" in found.command and found.user == "root"
        assert found.start == TABLE.start_time(writer.pid)
        assert set(found.as_dict()) == {
            "pid",
            "command",
            "user",
            "may_signal",
            "why_not",
            "stopped",
            "not_paused",
        }
        assert not found.stopped and found.not_paused() is None
    assert live_writers(db) == []


def test_the_lock_table_shows_every_connection_of_a_wal_store(db: Path, tmp_path: Path) -> None:
    """Used for processes whose descriptors we may not read (another user's, not root)."""
    with gateway_writer.running(db, tmp_path) as writer:
        holders = lock_holders(store_files(db))
        assert holders is not None and writer.pid in holders
    rollback = tmp_path / "rollback.db"
    sqlite3.connect(rollback).execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT)")
    assert lock_holders(store_files(rollback)) is None  # no -shm: cannot tell


def test_a_read_snapshot_shows_in_that_process_own_lock_list(db: Path) -> None:
    """The gate asks each paused writer's /proc/<pid>/fdinfo whether it holds a read
    mark (a snapshot it may write from), not the machine-wide /proc/locks, whose
    listing took 6-15 ms inside each freeze; both must agree."""
    shm = store_files(db)[2]
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
            "c.execute('SELECT count(*) FROM kv').fetchone()\n"
            "print('open', flush=True); sys.stdin.readline()\n"
            "c.execute('BEGIN'); c.execute('SELECT count(*) FROM kv').fetchone()\n"
            "print('reading', flush=True); sys.stdin.readline()\n"
            "c.execute('COMMIT'); print('done', flush=True); sys.stdin.readline()\n",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdin is not None and reader.stdout is not None
    try:
        seen = []
        for step in ("open", "reading", "done"):
            assert reader.stdout.readline().strip() == step
            holds = TABLE.holds_read_mark(reader.pid, shm)
            everyone = shm_readers(db)
            seen.append((holds, everyone is not None and reader.pid in everyone))
            reader.stdin.write("\n")
            reader.stdin.flush()
        assert seen == [(False, False), (True, True), (False, False)]
        assert TABLE.holds_read_mark(os.getpid() + 10**7, shm) is None  # no such process
    finally:
        reader.kill()
        reader.wait()


@pytest.mark.skipif(
    shutil.which("lsof") is None and not os.environ.get("CI"), reason="lsof is not installed"
)
def test_without_proc_lsof_and_ps_find_the_same_writer(db: Path, tmp_path: Path) -> None:
    """The macOS/BSD way (lsof, ps), checked here on Linux."""
    table = LsofTable()
    with gateway_writer.running(db, tmp_path) as writer:
        (found,) = live_writers(db, table)
        assert found.pid == writer.pid and "gateway_writer.py" in found.command
        assert table.state(writer.pid) in ("S", "R", "D")  # sleeping, running, in fsync
        os.kill(writer.pid, signal.SIGSTOP)
        try:
            # ps says T once every thread is stopped (it was: within 2 s)
            wait_for(lambda: table.stopped(writer.pid), "stopped, by ps")
        finally:
            os.kill(writer.pid, signal.SIGCONT)


# -- pausing them ------------------------------------------------------------------------


def test_a_write_pauses_the_writer_and_resumes_it(db: Path, tmp_path: Path) -> None:
    store = patient(SqliteStorage(db))  # only our thaw can resume it (no watchdog, no cap)
    seen: list[str | None] = []
    with gateway_writer.running(db, tmp_path) as writer:
        writes_again(db)
        with store.transaction("test") as conn:
            seen.append(state(writer.pid))  # while we hold the lock
            conn.execute("INSERT INTO kv VALUES ('ours', '1')")
        seen.append(state(writer.pid))  # resumed by us, at once
        writes_again(db, "the writer writing after us")
    stats = store.gate.stats
    shown = stats.as_dict()
    store.close()
    assert seen[0] == "T" and seen[1] != "T"
    assert shown["freezes"] == 1 and shown["live_writers"] == 1
    # the freeze was measured (it was: under 300 ms, bench/bench_gate.py's to measure now)
    assert 0 < stats.longest_freeze == stats.frozen_seconds
    assert shown["watchdog_resumes"] == 0 and shown["cut_short"] == 0
    assert gateway_writer.report(tmp_path).fail == 0


def test_our_checkpoint_holds_its_lock_before_the_writer_runs_again(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else the writer's next commit runs the automatic checkpoint of all our pages
    (its wal_autocheckpoint) inside itself: 30-40 ms of a chat message's write."""
    store = patient(SqliteStorage(db))  # no stall of ours cuts or fails a write
    at_resume: list[tuple[int | None, bool, tuple[int, int, int]]] = []
    thaw = WriteGate._thaw
    gate = store.gate

    def look(self: WriteGate, freeze: Freeze) -> None:
        # the thaw after a transaction (a freeze given up before one resumes its
        # writers without a checkpoint of ours to wait for)
        checkpointer = gate.wal.checkpointer
        assert checkpointer is not None
        # read before the lock: a checkpoint that ends in between has its result in
        # `last` by the time it stops being active
        active = checkpointer.active
        at_resume.append((shm_lock_holder(db, SHM_CKPT_LOCK), active, gate.last_checkpoint))
        thaw(self, freeze)

    monkeypatch.setattr(WriteGate, "_thaw", look)
    # the mechanism, not this machine's scheduling: a thread woken within a second
    monkeypatch.setattr(wal_upkeep, "CHECKPOINT_GRAB", 1.0)
    # ~1,000 pages a commit: a WAL long enough for the writer's next commit to
    # run its automatic checkpoint (GRAB_FROM_FRAMES)
    big = "x" * 4_000_000
    with gateway_writer.running(db, tmp_path):
        writes_again(db)
        store.set("warm-up", "1")  # the checkpoint thread's first run (CI: it once failed)
        store.gate.settle()
        at_resume.clear()
        for n in range(5):
            store.set(f"ours:{n}", big)
        store.gate.settle()
    store.close()
    assert gateway_writer.report(tmp_path).fail == 0
    assert len(at_resume) >= 5
    for holder, active, (busy, frames, done) in at_resume:
        # ours holds the checkpoint lock (it may be ending: still active), or it ran
        # to its end
        ours = holder == os.getpid() or active
        assert ours or (frames and frames == done and not busy), (holder, active, frames)


def test_a_short_wal_is_checkpointed_after_the_thaw_without_holding_the_writer(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under GRAB_FROM_FRAMES frames, the writer's next commits cannot reach their
    automatic checkpoint: the freeze does not wait for our checkpoint's lock, and
    the checkpoint still runs once everyone runs again."""
    store = patient(SqliteStorage(db))  # no stall of ours cuts or fails a write
    gate = store.gate
    grabs: list[float] = []
    start = Checkpointer.start

    def grab(self: Checkpointer, timeout: float) -> None:
        grabs.append(timeout)
        start(self, timeout)

    monkeypatch.setattr(Checkpointer, "start", grab)
    with gateway_writer.running(db, tmp_path):
        writes_again(db)
        for n in range(5):
            store.set(f"ours:{n}", "y" * 40_000)  # ~10 pages a commit
            assert wal_mark(db) is not None
        gate.settle()
        short = list(grabs)
        store.set("ours:big", "x" * 4_000_000)  # ~1,000 pages: the lock is taken first
        gate.settle()
    assert gate.stats.freezes >= 6
    assert short == []  # no short commit waited for the checkpoint's lock
    assert grabs  # the long one did
    busy, frames, done = gate.last_checkpoint
    assert not busy and frames == done > 0  # and each commit was checkpointed after
    assert gateway_writer.report(tmp_path).fail == 0
    store.close()


def test_wal_mark_reads_where_the_wal_ends_from_its_index(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE IF NOT EXISTS grow (x)")
    before = wal_mark(db)
    assert before is not None
    conn.execute("INSERT INTO grow VALUES (?)", ("z" * 20_000,))  # 5+ pages
    after = wal_mark(db)
    assert after is not None and frames_between(before, after) >= 5
    busy, total, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert not busy and total == done == after[0]
    # checkpointed in full, the WAL starts again from its beginning at the next write
    conn.execute("INSERT INTO grow VALUES ('a')")
    restarted = wal_mark(db)
    assert restarted is not None and restarted[1] != after[1]
    assert frames_between(after, restarted) == restarted[0] < after[0]
    conn.close()
    assert wal_mark(db.with_name("absent.db")) is None
    assert frames_between(None, after) == -1


def test_the_gate_counts_the_wal_frames_of_its_own_commit(db: Path, tmp_path: Path) -> None:
    """What the sweep's pacer sizes batches by: ours alone, whatever the WAL held before."""
    store = patient(SqliteStorage(db))  # no stall of ours cuts or fails a write
    with gateway_writer.running(db, tmp_path):
        writes_again(db)
        for size in (4_000, 40_000, 400_000):
            store.set(f"ours:{size}", "v" * size)
            pages = size // 4096
            assert pages <= store.gate.last_frames <= pages + 12, (size, store.gate.last_frames)
    assert gateway_writer.report(tmp_path).fail == 0
    store.close()


def test_no_live_writer_means_no_freeze_and_no_watchdog(db: Path) -> None:
    store = SqliteStorage(db)
    store.set("a", "1")
    assert store.gate.stats.freezes == 0 and store.gate.freezer.watchdog is None
    store.close()


def keep_writing(store: SqliteStorage, db: Path, at_least: int) -> int:
    """Write ``ours:<n>`` keys, at least ``at_least`` of them, until the gate has met the
    writer inside its own write and the writer has committed more than 5 writes since we
    began (a count of conditions, not of what happens in a fixed time: it was 10 or 20
    writes after a 0.1 s sleep); how many were written."""
    stats, first = store.gate.stats, writer_commits(db)
    number = int(first.rsplit("-", 1)[-1] or 0)
    hang = time.monotonic() + 60  # a guard against a hang, not a measure
    written = 0
    more = f"sessions:gw-{number + 5:07d}"  # more than 5 writes of the writer since
    while written < at_least or stats.busy_retries == 0 or writer_commits(db) <= more:
        assert time.monotonic() < hang, ("never caught inside its writes", stats.as_dict())
        store.set(f"ours:{written:04d}", "x")
        written += 1
    return written


def test_a_writer_inside_its_own_transactions_is_waited_for(db: Path, tmp_path: Path) -> None:
    """It holds each write transaction 50 ms: the gate backs off; both sides finish."""
    store = patient(SqliteStorage(db))  # no stall of ours lets it meet our lock
    with gateway_writer.running(db, tmp_path, hold=0.05, period=0.005):
        written = keep_writing(store, db, at_least=10)
        store.delete_many([f"ours:{n:04d}" for n in range(5)])
    stats = store.gate.stats
    report = gateway_writer.report(tmp_path)
    assert report.fail == 0 and report.ok > 5
    assert stats.busy_retries > 0  # it really was caught inside its own writes
    assert store.list("ours:") == [f"ours:{n:04d}" for n in range(5, written)]
    assert report.missing_from(dict(store.scan())) == {}
    store.close()


def test_a_writer_between_its_snapshot_and_its_write_lock_is_let_run_first(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after taking its read snapshot, a writer would find our commit past it
    and fail at once (SQLITE_BUSY_SNAPSHOT): the gate lets it take its lock first.

    Its snapshot is held 3 ms here (a gateway's, microseconds): under load that sleep
    outlasted READ_GRACE, after which the gate takes a snapshot for a reader's and
    writes anyway (tested below); the grace is made long enough for any load."""
    monkeypatch.setattr(write_gate, "READ_GRACE", 60.0)
    store = patient(SqliteStorage(db))
    with gateway_writer.running(db, tmp_path, read_first=0.003, period=0.003):
        written = keep_writing(store, db, at_least=20)
    report = gateway_writer.report(tmp_path)
    assert report.fail == 0 and report.ok > 5, report.errors[:3]
    assert store.gate.stats.busy_retries > 0  # it really was caught holding its snapshot
    assert report.missing_from(dict(store.scan())) == {}
    assert store.list("ours:") == [f"ours:{n:04d}" for n in range(written)]
    store.close()


def test_a_readers_long_snapshot_does_not_hold_the_gate_up(db: Path, tmp_path: Path) -> None:
    """A live process reading for a long time (a backup, a search) never writes from
    that snapshot: after READ_GRACE the gate writes anyway."""
    store = SqliteStorage(db)
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
            "c.execute('BEGIN'); c.execute('SELECT count(*) FROM kv').fetchone()\n"
            "print('ready', flush=True); time.sleep(30)\n",
            str(db),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == b"ready\n"
        store.set("ours:1", "x")
        assert store.gate.stats.freezes >= 1 and store.gate.stats.busy_retries > 0
        assert store.get("ours:1") == "x"
    finally:
        reader.kill()
        reader.wait()
    store.close()


def test_a_process_someone_else_stopped_is_left_stopped(db: Path, tmp_path: Path) -> None:
    """Never SIGCONT what we did not stop (Ctrl-Z, a debugger)."""
    store = SqliteStorage(db)
    with gateway_writer.running(db, tmp_path) as writer:
        while True:  # stopped between two of its writes (not holding the write lock)
            os.kill(writer.pid, signal.SIGSTOP)
            while not TABLE.stopped(writer.pid):
                time.sleep(0.001)
            if shm_lock_holder(db, SHM_WRITE_LOCK) is None:
                break
            os.kill(writer.pid, signal.SIGCONT)
            time.sleep(0.002)
        try:
            store.set("a", "1")
            assert store.gate.stats.freezes == 0  # nobody stopped: the watchdog told of none
            time.sleep(0.5)  # past the watchdog's deadline too
            assert state(writer.pid) == "T"
        finally:
            os.kill(writer.pid, signal.SIGCONT)
    store.close()


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    """A writer whose start time no longer matches is another process: left alone."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        gate = WriteGate(tmp_path / "x.db")
        impostor = LiveWriter(sleeper.pid, 12345, "gone", "root", True)
        freeze = Freeze(time.monotonic(), 1.0)
        assert gate.freezer.stop(freeze, [impostor])
        assert freeze.stopped == [] and state(sleeper.pid) != "T"
        gate.close()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_late_opener_is_paused_too(db: Path, tmp_path: Path) -> None:
    """A process that opened the store after the scan is found while we are frozen."""
    store = patient(SqliteStorage(db))  # no stall of ours cuts or fails a write
    gate = store.gate
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    with gateway_writer.running(db, first_dir) as first:
        scanned = gate.writers()
        late = gateway_writer.running(db, second_dir, prefix="sessions:late-", period=5)
        with late as second:
            conn = store.connection
            hang = time.monotonic() + 60  # a guard against a hang, not a measure
            freeze = gate._freeze(conn, scanned)
            # None: a writer was inside its own write, or slow to stop; try again (it
            # was: at most 100 tries 3 ms apart, which a loaded machine could use up)
            while freeze is None:
                assert time.monotonic() < hang, "never a freeze"
                time.sleep(0.003)
                freeze = gate._freeze(conn, scanned)
            try:
                assert {w.pid for w in freeze.stopped} == {first.pid, second.pid}
                assert state(first.pid) == "T" and state(second.pid) == "T"
                conn.execute("INSERT INTO kv VALUES ('ours', '1')")
                conn.execute("COMMIT")
            finally:
                gate._thaw(freeze)
            assert state(first.pid) != "T" and state(second.pid) != "T"
    assert store.get("ours") == "1"
    store.close()


def test_a_transaction_too_long_to_pause_for_is_rolled_back(db: Path, tmp_path: Path) -> None:
    # the default cap (the subject), the watchdog out of the way: a stall of a loaded
    # machine past its deadline would let the writer meet our lock
    store = patient(SqliteStorage(db), cap=False)
    with gateway_writer.running(db, tmp_path):
        with pytest.raises(FreezeTooLong) as info, store.transaction("test") as conn:
            conn.execute("INSERT INTO kv VALUES ('never', '1')")
            time.sleep(store.gate.cap + 0.05)
        assert info.value.exit_code == 6 and "nothing was written" in str(info.value)
    assert store.get("never") is None
    assert store.gate.stats.cut_short == 1
    assert gateway_writer.report(tmp_path).fail == 0
    store.close()


def test_a_statement_too_long_to_pause_for_is_interrupted(db: Path, tmp_path: Path) -> None:
    """SQLite's progress handler stops a long statement at the cap; all of it rolls back."""
    store = patient(SqliteStorage(db), cap=False)  # the default cap; no watchdog meanwhile
    stopped: list[str] = []
    with (
        gateway_writer.running(db, tmp_path),
        pytest.raises(FreezeTooLong),
        store.transaction("test") as conn,
    ):
        try:
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 50000000) "
                "INSERT INTO kv SELECT 'big:' || i, 'x' FROM n"
            )
        except sqlite3.OperationalError as exc:
            stopped.append(str(exc))
            raise
    # cut in the middle by the handler (it was: the freeze under 0.3 s; without the
    # handler the statement runs to its end, minutes later, and the cut comes after it)
    assert stopped == ["interrupted"]
    assert store.count("big:") == 0
    assert store.gate.stats.cut_short == 1 and store.gate.stats.freezes == 1
    assert gateway_writer.report(tmp_path).fail == 0
    store.close()


def test_the_watchdog_resumes_a_writer_when_a_freeze_outlasts_its_deadline(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteStorage(db)
    # the freezer's deadline (the gate's own attribute is only read when it is built)
    store.gate.cap, store.gate.freezer.deadline = 3600.0, 0.2
    freezes: list[Freeze] = []
    thaw = WriteGate._thaw

    def kept(self: WriteGate, freeze: Freeze) -> None:
        freezes.append(freeze)
        thaw(self, freeze)

    monkeypatch.setattr(WriteGate, "_thaw", kept)
    with gateway_writer.running(db, tmp_path) as writer, store.transaction("stalled") as conn:
        conn.execute("INSERT INTO kv VALUES ('ours', '1')")
        # we stall (a stopped process, a slow disk) until the watchdog has let it go
        # and said so (it was: a 0.5 s sleep, then a look)
        wait_for(lambda: state(writer.pid) != "T", "resumed by the watchdog")
        watchdog = store.gate.freezer.watchdog
        assert watchdog is not None and watchdog.proc.stdout is not None
        # poll, not select: select refuses a descriptor above 1023, which a long suite reaches
        poller = select.poll()
        poller.register(watchdog.proc.stdout, select.POLLIN)
        assert poller.poll(60_000), "the watchdog never said it resumed a freeze"
    # the gate saw every thread of it stopped (it was: a look at its state here, which
    # a stall of ours past the 0.2 s could make after the watchdog let it go)
    (freeze,) = freezes
    assert [w.pid for w in freeze.stopped] == [writer.pid] and freeze.all_stopped is not None
    assert store.gate.stats.watchdog_resumes == 1  # its own record: the deadline passed
    assert store.get("ours") == "1"
    store.close()


def test_ctrl_c_during_a_freeze_lands_after_the_writer_runs_again(
    db: Path, tmp_path: Path
) -> None:
    # This test is about the signal, not the cap: a loaded machine (2 cores, other suites)
    # made the 10 ms sleep below outlast the default 80 ms cap; and with the watchdog out
    # of the way, only our thaw resumes the writer before the signal lands.
    store = patient(SqliteStorage(db))
    at_delivery: list[str | None] = []
    with gateway_writer.running(db, tmp_path) as writer:

        def handler(signum: int, frame: object) -> None:
            at_delivery.append(state(writer.pid))

        previous = signal.signal(signal.SIGINT, handler)
        try:
            with store.transaction("test") as conn:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.01)
                conn.execute("INSERT INTO kv VALUES ('ours', '1')")
                assert at_delivery == []  # held back while the writer is paused
            time.sleep(0.01)
        finally:
            signal.signal(signal.SIGINT, previous)
    assert at_delivery and at_delivery[0] != "T"
    assert store.get("ours") == "1"
    store.close()


# -- the operator's choices --------------------------------------------------------------


def test_refuse_names_each_live_writer_and_writes_nothing(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    with gateway_writer.running(gateway_db, tmp_path) as writer:
        run = cli("--live-writers", "refuse", "kv", "set", "ux:x", "1")
        env_run = cli("kv", "set", "ux:x", "1", env={"TRIGGERFISH_LIVE_WRITERS": "refuse"})
    assert run.exit_code == 6 and env_run.exit_code == 6
    assert f"pid {writer.pid} (root: " in run.stderr and "gateway_writer.py" in run.stderr
    assert SqliteStorage(gateway_db).get("ux:x") is None
    assert gateway_writer.report(tmp_path).fail == 0


def test_the_storage_setting_chooses_and_the_option_overrides_it(
    cli: CliFn, gateway_db: Path, base_dir: Path, tmp_path: Path
) -> None:
    (base_dir / "triggerfish.yaml").write_text("storage:\n  live_writers: refuse\n")
    with gateway_writer.running(gateway_db, tmp_path):
        refused = cli("kv", "set", "ux:x", "1")
        frozen = cli("--live-writers", "freeze", "kv", "set", "ux:y", "1")
    assert refused.exit_code == 6, refused.stderr
    assert frozen.exit_code == 0, frozen.stderr
    assert gateway_writer.report(tmp_path).fail == 0
    (base_dir / "triggerfish.yaml").write_text("storage:\n  live_writers: pause\n")
    bad = cli("kv", "get", "ux:y")
    assert bad.exit_code == 8 and "storage.live_writers" in bad.stderr
    assert cli("--live-writers", "pause", "kv", "get", "ux:y").exit_code == 2


def test_ignore_writes_without_the_gate_and_says_what_it_costs(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    assert "may fail" in " ".join(cli("--help").stdout.split())
    with gateway_writer.running(gateway_db, tmp_path):
        run = cli("--live-writers", "ignore", "kv", "set", "ux:x", "1")
    assert run.exit_code == 0 and SqliteStorage(gateway_db).get("ux:x") == "1"


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other users may use (pytest's own temp dirs are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="tfgate-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _foreign_writer(shared: Path) -> Path:
    db = empty_store(shared / "s.db")
    db.chmod(0o666)
    script = shared / "gateway_writer.py"
    shutil.copyfile(gateway_writer.SCRIPT, script)
    script.chmod(0o755)
    return db


ROOT_TOOLS = os.geteuid() == 0 and shutil.which("setpriv") and os.path.exists("/usr/bin/python3")


@pytest.mark.skipif(not ROOT_TOOLS, reason="needs root, setpriv and /usr/bin/python3")
def test_a_writer_we_may_not_signal_is_refused_with_what_to_do(shared_dir: Path) -> None:
    """Another user's gateway: we run without CAP_KILL (as a non-root operator would)."""
    db = _foreign_writer(shared_dir)
    command = [sys.executable, "-m", "triggerfish_cli", "--db", str(db), "kv", "set", "a", "1"]
    with gateway_writer.running(
        db, shared_dir, python="/usr/bin/python3", user=65534
    ) as writer:
        run = subprocess.run(
            ["setpriv", "--bounding-set=-kill", "--inh-caps=-kill", *command],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == 6, run.stderr
    assert f"pid {writer.pid} (nobody: " in run.stderr and "as its user" in run.stderr
    assert SqliteStorage(db).get("a") is None
    assert gateway_writer.report(shared_dir).fail == 0


@pytest.mark.skipif(
    not ROOT_TOOLS or not shutil.which("unshare"), reason="needs root and unshare"
)
def test_a_writer_in_another_pid_namespace_is_refused(shared_dir: Path) -> None:
    """We run in a PID namespace of our own (as in a second container): the writer is
    invisible there, but the lock its connection holds on the -shm file is not."""
    db = _foreign_writer(shared_dir)
    command = [sys.executable, "-m", "triggerfish_cli", "--db", str(db), "kv", "set", "a", "1"]
    with gateway_writer.running(db, shared_dir):
        run = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", *command],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        )
    assert run.returncode == 6, run.stderr
    assert "another PID namespace" in run.stderr
    assert SqliteStorage(db).get("a") is None


# -- the cron history while the gateway runs ----------------------------------------------


def test_cron_history_trims_are_deferred_while_the_gateway_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "demo.db"
    store = SqliteStorage(path, create=True)
    build_demo(store, records=2000, seed=3, now=ANCHOR, days=120)
    idle = read_plan(store, defaults(), ANCHOR).namespaces["cron-history:"]
    assert idle.trims > 0 and idle.deferred == 0
    with gateway_writer.running(path, tmp_path):
        live = read_plan(store, defaults(), ANCHOR).namespaces["cron-history:"]
    store.close()
    assert live.actions == [] and live.deferred == idle.trims + idle.deletes
    assert "gateway runs" in live.as_row()["rule"]


# -- kill -9 and SIGSTOP of our own process -------------------------------------------------


@pytest.fixture(scope="module")
def sweep_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "store.db"
    store = SqliteStorage(path, create=True)
    build_demo(store, records=12000, seed=5, now=ANCHOR, days=200)
    store.close()
    return path


def _sweeping(db: Path, *hooks: str) -> subprocess.Popen[bytes]:
    """The sweep, in a process of its own; with ``hooks``, through tests/helpers/launch.py."""
    command = launch.command(*hooks) if hooks else [sys.executable, "-m", "triggerfish_cli"]
    return subprocess.Popen(
        [*command, "--db", str(db), "retention", "sweep",
         "--yes", "--as-of", ANCHOR_ISO, "-q", "--pause", "0.01"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _inside_a_freeze(db: Path, how: str, at: int, marker: Path) -> subprocess.Popen[bytes]:
    """The sweep held inside its ``at``-th freeze (after its COMMIT, before the thaw), once
    ``marker`` exists; for kill -9, with the watchdog's deadline pushed far away, so that
    only our death can end the freeze."""
    hooks = ["--hang-before", f"{GATE}:frames_between@{at}={marker}"]
    if how == "kill -9":
        hooks += ["--set", f"{GATE}:DEADLINE=3600"]
    sweep = _sweeping(db, *hooks)
    wait_for(lambda: marker.exists() or sweep.poll() is not None, "inside a freeze")
    assert sweep.poll() is None, f"the sweep ended before its freeze number {at}"
    return sweep


GATE = "triggerfish_cli.storage.sqlite.write_gate"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill -9", "SIGSTOP"])
def test_killing_or_stopping_us_mid_sweep_never_leaves_the_writer_stopped(
    how: str, sweep_template: Path, tmp_path: Path
) -> None:
    """Half the runs at a random moment; the other half inside a freeze (held there, not
    caught by looking at the writer's state every 0.5 ms, which a loaded machine could
    miss). The writer runs and writes again afterwards: waited for (it was: within 1 s,
    which bench/bench_gate.py measures now)."""
    rng = random.Random(13)
    for run in range(20):
        work = tmp_path / f"run-{run}"
        work.mkdir()
        db = work / "store.db"
        shutil.copyfile(sweep_template, db)
        with gateway_writer.running(db, work) as writer:
            if run % 2 == 0:  # at a random moment
                sweep = _sweeping(db)
                time.sleep(rng.uniform(0.3, 2.5))
            else:  # in the middle of a freeze, of a random batch
                sweep = _inside_a_freeze(db, how, rng.randint(2, 10), work / "frozen")
            try:
                if run % 2:
                    ledger = Ledger.parse(Path(lock_path(db)).read_bytes())
                    assert ledger is not None and ledger.frozen and ledger.owner[0] == sweep.pid
                    if how == "kill -9":  # nothing but our death can resume it now
                        assert state(writer.pid) == "T"
                killed_at = time.time()
                sweep.send_signal(signal.SIGKILL if how == "kill -9" else signal.SIGSTOP)
                if how == "kill -9":
                    sweep.wait(timeout=60)
                # before the stopped sweep is killed: only the watchdog can resume it
                wait_for(lambda: state(writer.pid) not in ("T", None), f"run {run}: running")
            finally:
                sweep.kill()
                sweep.wait(timeout=60)
            # a stopped sweep may have held the write lock until it was killed
            writes_again(db, f"run {run}: writing again")
        report = gateway_writer.report(work)
        assert [at for at in report.times if at > killed_at], f"run {run}: no write after"
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_checkpoint_that_fails_is_counted_with_its_error(tmp_path: Path) -> None:
    """A checkpoint error is not lost: the gate's stats say how many and the newest."""
    broken = tmp_path / "not-a-store.db"
    broken.write_bytes(b"this is no SQLite database at all" * 200)
    stats = GateStats()
    checkpointer = Checkpointer(broken, stats)
    try:
        checkpointer.ready(5.0)
        for _ in range(2):
            checkpointer.poke()
            checkpointer.wait(5.0)
    finally:
        checkpointer.close()
    assert stats.checkpoint_errors == 2
    assert stats.checkpoint_error is not None and "not a database" in stats.checkpoint_error
    shown = stats.as_dict()
    assert shown["checkpoint_errors"] == 2 and shown["checkpoint_error"] == stats.checkpoint_error
