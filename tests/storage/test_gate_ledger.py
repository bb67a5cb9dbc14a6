"""The write gate's ledger (storage/sqlite/gate_ledger.py): what each freeze stopped, kept
in the gate's lock file beside the store for a next run, should ours die with its
watchdog.

Every writer here behaves like the gateway (tests/helpers/gateway_writer.py).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import gateway_writer
from triggerfish_cli.errors import RefusedError
from triggerfish_cli.storage.sqlite import gate_ledger
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.gate_ledger import Ledger, lock_path, recover
from triggerfish_cli.storage.sqlite.live_writers import (
    SHM_WRITE_LOCK,
    ProcessTable,
    shm_lock_holder,
)

TABLE = ProcessTable()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "gate.db"
    SqliteStorage(path, create=True).close()
    return path


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    """Until ``condition()``; generous, for a loaded machine (never a timed assertion)."""
    until = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < until, f"still not {what} after {seconds} s"
        time.sleep(0.005)


def patient(store: SqliteStorage) -> SqliteStorage:
    """The freeze cap and the watchdog's deadline far beyond any stall of a loaded machine
    (neither is what these tests are about)."""
    store.gate.cap, store.gate.freezer.deadline = 3600.0, 3600.0
    return store


def me() -> tuple[int, int]:
    return os.getpid(), TABLE.start_time(os.getpid()) or 0


def stopped_between_writes(db: Path, pid: int) -> None:
    """SIGSTOP ``pid`` at a moment it holds no write lock (as someone's Ctrl-Z would)."""
    while True:
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: TABLE.stopped(pid), "stopped")
        if shm_lock_holder(db, SHM_WRITE_LOCK) is None:
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.002)


def test_the_ledger_line_reads_back_and_a_longer_old_line_after_it_is_ignored() -> None:
    ledger = Ledger(True, "boot-1", (10, 20), ((30, 40), (50, 60)))
    assert Ledger.parse(ledger.line()) == ledger
    older = Ledger(False, "boot-1", (10, 20), ((30, 40), (50, 60), (123456, 7890123))).line()
    shorter = Ledger(True, "boot-1", (11, 21), ((31, 41),)).line()
    written_over = shorter + older[len(shorter) :]
    assert Ledger.parse(written_over) == Ledger(True, "boot-1", (11, 21), ((31, 41),))
    resumed = b"-" + shorter[1:]
    assert Ledger.parse(resumed) == Ledger(False, "boot-1", (11, 21), ((31, 41),))
    for junk in (b"", b"F nothing\n", b"F tfadmin-gate/1 boot=x owner=1 stopped=\n", b"\x00" * 64):
        assert Ledger.parse(junk) is None


def test_a_freeze_names_what_it_stops_before_stopping_it_and_marks_it_resumed_after(
    db: Path, tmp_path: Path
) -> None:
    store = patient(SqliteStorage(db))  # still stopped when looked at, however slow we are
    with gateway_writer.running(db, tmp_path) as writer:
        start = TABLE.start_time(writer.pid)
        with store.transaction("test") as conn:
            assert TABLE.state(writer.pid) == "T"
            during = Path(lock_path(db)).read_bytes()
            conn.execute("INSERT INTO kv VALUES ('ours', '1')")
        after = Path(lock_path(db)).read_bytes()
    store.close()
    expected = Ledger(True, gate_ledger.boot_id(), me(), ((writer.pid, start or 0),))
    assert Ledger.parse(during) == expected
    assert Ledger.parse(after) == Ledger(False, expected.boot, expected.owner, expected.stopped)
    assert os.stat(lock_path(db)).st_mode & 0o777 == 0o600


def test_the_same_freeze_again_writes_one_byte_before_and_one_after(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = patient(SqliteStorage(db))  # no stall of ours cuts a transaction short
    written: list[bytes] = []
    pwrite = os.pwrite

    def counted(fd: int, data: bytes, offset: int) -> int:
        written.append(bytes(data))
        return pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", counted)
    with gateway_writer.running(db, tmp_path):
        for n in range(3):
            with store.transaction("test") as conn:
                conn.execute("INSERT OR REPLACE INTO kv VALUES ('ours', ?)", (str(n),))
    monkeypatch.undo()
    store.close()
    ledger_writes = [data for data in written if data[:1] in (b"F", b"-")]
    assert ledger_writes[0].startswith(b"F tfadmin-gate/1 ")  # the first: the whole line
    # then one byte each: "-" after each freeze, "F" before the next (a try given up
    # because the writer was inside its own write is one more pair)
    rest = ledger_writes[1:]
    assert len(rest) >= 5 and rest == [b"-", b"F"] * (len(rest) // 2) + [b"-"]


def test_the_next_opening_resumes_what_a_dead_run_left_stopped(db: Path, tmp_path: Path) -> None:
    """A ledger whose owner is gone, naming a process still stopped: resumed, and said."""
    with gateway_writer.running(db, tmp_path) as writer:
        stopped_between_writes(db, writer.pid)
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        start = TABLE.start_time(writer.pid) or 0
        ledger = Ledger(True, gate_ledger.boot_id(), (dead.pid, 1), ((writer.pid, start),))
        Path(lock_path(db)).write_bytes(ledger.line())
        command, _, user = TABLE.describe(writer.pid)
        try:
            store = SqliteStorage(db)
            notices = store.notices()
            store.close()
            wait_for(lambda: TABLE.state(writer.pid) != "T", "running again")
        finally:
            os.kill(writer.pid, signal.SIGCONT)
    assert notices == [
        f"pid {writer.pid} ({user}: {command[:300]}) left stopped by an earlier run of "
        "triggerfish-admin that died; resumed"
    ]
    assert Path(lock_path(db)).read_bytes()[:1] == b"-"
    assert gateway_writer.report(tmp_path).fail == 0


@pytest.mark.parametrize(
    "why",
    ["its owner is alive", "another boot", "another start time", "not in the ledger"],
)
def test_a_stopped_process_is_left_alone_unless_a_dead_run_of_ours_stopped_it(
    why: str, db: Path, tmp_path: Path
) -> None:
    with gateway_writer.running(db, tmp_path) as writer:
        stopped_between_writes(db, writer.pid)
        start = TABLE.start_time(writer.pid) or 0
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        owner, boot, named = (dead.pid, 1), gate_ledger.boot_id(), (writer.pid, start)
        if why == "its owner is alive":
            owner = me()
        elif why == "another boot":
            boot = "another-boot"
        elif why == "another start time":
            named = (writer.pid, start + 1)
        else:
            named = (dead.pid, 1)
        Path(lock_path(db)).write_bytes(Ledger(True, boot, owner, (named,)).line())
        try:
            assert recover(db) == []
            assert TABLE.state(writer.pid) == "T"
        finally:
            os.kill(writer.pid, signal.SIGCONT)


def test_a_live_run_of_ours_holding_the_gate_lock_is_never_second_guessed(
    db: Path, tmp_path: Path
) -> None:
    """With the gate's lock held (a freeze of a live run going on), nothing is resumed."""
    import fcntl

    with gateway_writer.running(db, tmp_path) as writer:
        stopped_between_writes(db, writer.pid)
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        named = (writer.pid, TABLE.start_time(writer.pid) or 0)
        Path(lock_path(db)).write_bytes(
            Ledger(True, gate_ledger.boot_id(), (dead.pid, 1), (named,)).line()
        )
        holder = os.open(lock_path(db), os.O_RDONLY)
        fcntl.flock(holder, fcntl.LOCK_EX)
        try:
            assert recover(db) == []
            assert TABLE.state(writer.pid) == "T"
            os.close(holder)
            assert len(recover(db)) == 1
            wait_for(lambda: TABLE.state(writer.pid) != "T", "running again")
        finally:
            os.kill(writer.pid, signal.SIGCONT)


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_lock_file_that_is_a_link_is_refused_and_what_it_names_is_untouched(
    link: str, db: Path, tmp_path: Path
) -> None:
    precious = tmp_path / "precious"
    precious.write_text("do not write here\n")
    if link == "symbolic":
        os.symlink(precious, lock_path(db))
    else:
        os.link(precious, lock_path(db))
    store = SqliteStorage(db)
    with gateway_writer.running(db, tmp_path) as writer:
        with pytest.raises(RefusedError) as info:
            store.set("ours", "1")
        assert info.value.exit_code == 4 and "link" in str(info.value)
        assert TABLE.state(writer.pid) != "T"
    store.close()
    assert precious.read_text() == "do not write here\n"
    assert recover(db) == []  # the next run reads no ledger through it either
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM kv WHERE key = 'ours'").fetchone()[0] == 0


def test_a_run_already_going_resumes_what_a_dead_run_left_at_its_next_freeze(
    db: Path, tmp_path: Path
) -> None:
    """A sweep running while another run of ours dies with its watchdog: the sweep's next
    freeze resumes what that one left stopped (and writes beside a running writer)."""
    store = SqliteStorage(db)
    with gateway_writer.running(db, tmp_path) as writer:
        store.set("before", "1")  # the gate's lock file exists, the freezes work
        stopped_between_writes(db, writer.pid)
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        named = (writer.pid, TABLE.start_time(writer.pid) or 0)
        Path(lock_path(db)).write_bytes(
            Ledger(True, gate_ledger.boot_id(), (dead.pid, 1), (named,)).line()
        )
        try:
            store.set("after", "1")
            wait_for(lambda: TABLE.state(writer.pid) != "T", "running again")
        finally:
            os.kill(writer.pid, signal.SIGCONT)
        notices = store.notices()
        store.close()
    assert len(notices) == 1 and notices[0].startswith(f"pid {writer.pid} (")
    assert notices[0].endswith(
        "left stopped by an earlier run of triggerfish-admin that died; resumed"
    )
    assert store.notices() == notices  # kept after close, for the CLI's last look
    assert gateway_writer.report(tmp_path).fail == 0
