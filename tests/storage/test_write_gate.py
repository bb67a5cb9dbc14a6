"""The write gate (storage/sqlite/write_gate.py): pausing the live writers around each write.

Every writer here behaves like the gateway: its own process and connection,
no busy timeout (tests/helpers/gateway_writer.py).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers import gateway_writer
from triggerfish_cli.demo import build_demo
from triggerfish_cli.retention.policies import defaults
from triggerfish_cli.retention.reading import read_plan
from triggerfish_cli.storage.sqlite import wal_upkeep
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.checkpointer import Checkpointer
from triggerfish_cli.storage.sqlite.freezer import Freeze
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
            deadline = time.monotonic() + 2
            while not table.stopped(writer.pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert table.stopped(writer.pid)
        finally:
            os.kill(writer.pid, signal.SIGCONT)


# -- pausing them ------------------------------------------------------------------------


def test_a_write_pauses_the_writer_and_resumes_it(db: Path, tmp_path: Path) -> None:
    store = SqliteStorage(db)
    seen: list[str | None] = []
    with gateway_writer.running(db, tmp_path) as writer:
        time.sleep(0.05)
        with store.transaction("test") as conn:
            seen.append(state(writer.pid))  # while we hold the lock
            conn.execute("INSERT INTO kv VALUES ('ours', '1')")
        seen.append(state(writer.pid))
        time.sleep(0.05)
    stats = store.gate.stats.as_dict()
    store.close()
    assert seen[0] == "T" and seen[1] != "T"
    assert stats["freezes"] == 1 and stats["live_writers"] == 1
    assert stats["longest_freeze_ms"] < 300
    assert gateway_writer.report(tmp_path).fail == 0


def test_our_checkpoint_holds_its_lock_before_the_writer_runs_again(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else the writer's next commit runs the automatic checkpoint of all our pages
    (its wal_autocheckpoint) inside itself: 30-40 ms of a chat message's write."""
    store = SqliteStorage(db)
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
        time.sleep(0.05)
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
    store = SqliteStorage(db)
    gate = store.gate
    grabs: list[float] = []
    start = Checkpointer.start

    def grab(self: Checkpointer, timeout: float) -> None:
        grabs.append(timeout)
        start(self, timeout)

    monkeypatch.setattr(Checkpointer, "start", grab)
    with gateway_writer.running(db, tmp_path):
        time.sleep(0.05)
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
    store = SqliteStorage(db)
    with gateway_writer.running(db, tmp_path):
        time.sleep(0.05)
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


def test_a_writer_inside_its_own_transactions_is_waited_for(db: Path, tmp_path: Path) -> None:
    """It holds each write transaction 50 ms: the gate backs off; both sides finish."""
    store = SqliteStorage(db)
    with gateway_writer.running(db, tmp_path, hold=0.05, period=0.005):
        time.sleep(0.1)
        for n in range(10):
            store.set(f"ours:{n}", "x")
        store.delete_many([f"ours:{n}" for n in range(5)])
    stats = store.gate.stats
    report = gateway_writer.report(tmp_path)
    assert report.fail == 0 and report.ok > 5
    assert stats.busy_retries > 0  # it really was caught inside its own writes
    assert store.list("ours:") == [f"ours:{n}" for n in range(5, 10)]
    assert report.missing_from(dict(store.scan())) == {}
    store.close()


def test_a_writer_between_its_snapshot_and_its_write_lock_is_let_run_first(
    db: Path, tmp_path: Path
) -> None:
    """Stopped after taking its read snapshot, a writer would find our commit past it
    and fail at once (SQLITE_BUSY_SNAPSHOT): the gate lets it take its lock first."""
    store = SqliteStorage(db)
    with gateway_writer.running(db, tmp_path, read_first=0.003, period=0.003):
        time.sleep(0.1)
        for n in range(20):
            store.set(f"ours:{n}", "x")
    report = gateway_writer.report(tmp_path)
    assert report.fail == 0 and report.ok > 5, report.errors[:3]
    assert store.gate.stats.busy_retries > 0  # it really was caught holding its snapshot
    assert report.missing_from(dict(store.scan())) == {}
    assert store.list("ours:") == sorted(f"ours:{n}" for n in range(20))
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
    store = SqliteStorage(db)
    gate = store.gate
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    with gateway_writer.running(db, first_dir) as first:
        scanned = gate.writers()
        late = gateway_writer.running(db, second_dir, prefix="sessions:late-", period=5)
        with late as second:
            time.sleep(0.05)
            conn = store.connection
            for _ in range(100):  # None: a writer was inside its own write; try again
                freeze = gate._freeze(conn, scanned)
                if freeze is not None:
                    break
                time.sleep(0.003)
            assert freeze is not None
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
    store = SqliteStorage(db)
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
    store = SqliteStorage(db)
    with (
        gateway_writer.running(db, tmp_path),
        pytest.raises(FreezeTooLong),
        store.transaction("test") as conn,
    ):
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 50000000) "
            "INSERT INTO kv SELECT 'big:' || i, 'x' FROM n"
        )
    assert store.count("big:") == 0
    assert store.gate.stats.longest_freeze < 0.3
    assert gateway_writer.report(tmp_path).fail == 0
    store.close()


def test_the_watchdog_resumes_a_writer_when_a_freeze_outlasts_its_deadline(
    db: Path, tmp_path: Path
) -> None:
    store = SqliteStorage(db)
    store.gate.cap, store.gate.deadline = 10.0, 0.2
    with gateway_writer.running(db, tmp_path) as writer:
        time.sleep(0.05)
        with store.transaction("stalled") as conn:
            conn.execute("INSERT INTO kv VALUES ('ours', '1')")
            assert state(writer.pid) == "T"
            time.sleep(0.5)  # we stall (a stopped process, a slow disk)
            assert state(writer.pid) != "T"  # the watchdog let it go at 0.2 s
    assert store.gate.stats.watchdog_resumes == 1
    store.close()


def test_ctrl_c_during_a_freeze_lands_after_the_writer_runs_again(
    db: Path, tmp_path: Path
) -> None:
    store = SqliteStorage(db)
    # This test is about the signal, not the cap: a loaded machine (2 cores, other suites)
    # made the 10 ms sleep below outlast the default 80 ms cap; stay below the watchdog's.
    store.gate.cap = 0.25
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


def _sweeping(db: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "triggerfish_cli", "--db", str(db), "retention", "sweep",
         "--yes", "--as-of", ANCHOR_ISO, "-q", "--pause", "0.01"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_until_frozen(pid: int, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if state(pid) == "T":
            return True
        time.sleep(0.0005)
    return False


def _running_again_within(pid: int, seconds: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if state(pid) not in ("T", None):
            return time.monotonic() - began
        time.sleep(0.002)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill -9", "SIGSTOP"])
def test_killing_or_stopping_us_mid_sweep_never_leaves_the_writer_stopped(
    how: str, sweep_template: Path, tmp_path: Path
) -> None:
    rng = random.Random(13)
    hits = 0
    for run in range(20):
        work = tmp_path / f"run-{run}"
        work.mkdir()
        db = work / "store.db"
        shutil.copyfile(sweep_template, db)
        with gateway_writer.running(db, work) as writer:
            sweep = _sweeping(db)
            try:
                if run % 2 == 0:  # at a random moment
                    time.sleep(rng.uniform(0.3, 2.5))
                elif _wait_until_frozen(writer.pid, 10):  # in the middle of a freeze
                    hits += 1
                killed_at = time.time()
                sweep.send_signal(signal.SIGKILL if how == "kill -9" else signal.SIGSTOP)
                if how == "kill -9":
                    sweep.wait(timeout=10)
                back = _running_again_within(writer.pid, 1.0)
                assert back is not None, f"run {run}: the writer is still stopped after 1 s"
            finally:
                sweep.kill()
                sweep.wait(timeout=10)
            time.sleep(0.1)
        report = gateway_writer.report(work)
        later = [at for at in report.times if at > killed_at]
        assert later and later[0] - killed_at < 1.0 + 0.1, f"run {run}: no write within 1 s"
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert hits >= 5, "too few kills landed inside a freeze to mean anything"


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
