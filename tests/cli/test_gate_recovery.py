"""A run of ours killed together with its watchdog in the middle of a freeze (``kill -9``
of both; what ``systemctl kill -s KILL`` of a cron job's cgroup does) leaves the writer
stopped. The next run of any command resumes it and says so on stderr; ``status``
shows a writer in state T, and ``status --check`` is CRITICAL for it (issue 35).

The installed console script, in subprocesses; the writer behaves like the gateway
(tests/helpers/gateway_writer.py). No timed assertion: each wait is for a condition,
with a generous timeout.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import gateway_writer, launch
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.gate_ledger import Ledger, lock_path
from triggerfish_cli.storage.sqlite.live_writers import (
    SHM_WRITE_LOCK,
    ProcessTable,
    shm_lock_holder,
)

ADMIN = str(Path(sys.executable).parent / "triggerfish-admin")
TABLE = ProcessTable()
RESUMED = "left stopped by an earlier run of triggerfish-admin that died; resumed"


def paused_in_a_freeze(db: Path, work: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``kv set`` held for ever inside its first freeze (after its COMMIT, before the
    thaw), the watchdog's deadline pushed as far: (the process, its watchdog's pid)."""
    there = work / "in-the-freeze"
    command = launch.command(
        "--set",
        "triggerfish_cli.storage.sqlite.write_gate:DEADLINE=3600",
        "--hang-before",
        f"triggerfish_cli.storage.sqlite.write_gate:frames_between={there}",
    )
    tool = subprocess.Popen(
        [*command, "--db", str(db), "kv", "set", "ours", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(there.exists, "inside the freeze")
    (watchdog,) = children(tool.pid)
    return tool, watchdog


def killed_together(tool: subprocess.Popen[bytes], watchdog: int) -> None:
    """A cgroup kill: both at once (the watchdog first, so that it cannot act)."""
    os.kill(watchdog, signal.SIGKILL)
    tool.kill()
    tool.wait(timeout=60)
    wait_for(lambda: TABLE.state(watchdog) is None, "the watchdog gone")


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    until = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < until, f"still not {what} after {seconds} s"
        time.sleep(0.005)


def admin(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ADMIN, "--db", str(db), *args], capture_output=True, text=True, timeout=120
    )


def children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        fields = TABLE._stat(f"/proc/{name}/stat") if name.isdigit() else None
        if fields and fields[1] == str(pid):
            found.append(int(name))
    return found


@contextlib.contextmanager
def gate_lock_held(db: Path) -> Iterator[None]:
    """The gate's lock, as a live run of ours holds it during each of its freezes."""
    fd = os.open(lock_path(db), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@pytest.fixture
def db(base_dir: Path) -> Path:
    path = base_dir / "data" / "triggerfish.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    SqliteStorage(path, create=True).close()
    return path


def written(db: Path, key: str) -> bool:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT 1 FROM kv WHERE key = ?", (key,)).fetchone() is not None


def status_of(db: Path, pid: int) -> dict[str, object]:
    result = admin(db, "status", "--format", "json")
    assert result.returncode == 0, result.stderr
    (found,) = [w for w in json.loads(result.stdout)["live_writers"] if w["pid"] == pid]
    return dict(found)


def live_writers_finding(db: Path) -> tuple[int, dict[str, object] | None]:
    result = admin(db, "status", "--check", "--format", "json")
    document = json.loads(result.stdout)
    found = [f for f in document["findings"] if f["check"] == "live_writers"]
    return result.returncode, (found[0] if found else None)


def test_a_freeze_killed_with_its_watchdog_is_resumed_by_the_next_run(
    db: Path, tmp_path: Path
) -> None:
    with gateway_writer.running(db, tmp_path) as writer:
        # its first write, read back below, is in before the freeze (on a loaded machine
        # the writer may not have run before the tool froze it)
        wait_for(lambda: written(db, "sessions:gw-0000001"), "the writer's first write")
        tool, watchdog = paused_in_a_freeze(db, tmp_path)
        try:
            assert TABLE.state(writer.pid) == "T"
            ledger = Ledger.parse(Path(lock_path(db)).read_bytes())
            assert ledger is not None and ledger.frozen
            assert ledger.owner == (tool.pid, TABLE.start_time(tool.pid))
            assert ledger.stopped == ((writer.pid, TABLE.start_time(writer.pid)),)
            killed_together(tool, watchdog)
        finally:
            tool.kill()
        assert TABLE.state(writer.pid) == "T"  # nobody left to resume it

        with gate_lock_held(db):  # as if a live run of ours were freezing: hands off
            shown = status_of(db, writer.pid)
            assert shown["stopped"] is True
            code, finding = live_writers_finding(db)
            assert code == 2 and finding is not None and finding["state"] == "CRITICAL"
            assert f"pid {writer.pid} (" in str(finding["message"])
            assert TABLE.state(writer.pid) == "T"

        read = admin(db, "kv", "get", "--raw", "sessions:gw-0000001")
        assert read.returncode == 0, read.stderr
        (line,) = read.stderr.splitlines()
        assert line.startswith(f"warning: pid {writer.pid} (") and line.endswith(RESUMED)
        wait_for(lambda: TABLE.state(writer.pid) not in ("T", None), "running again")
        again = admin(db, "kv", "get", "--raw", "sessions:gw-0000001")
        assert again.returncode == 0 and again.stderr == ""
        assert status_of(db, writer.pid)["stopped"] is False
        assert live_writers_finding(db)[1] is None
    report = gateway_writer.report(tmp_path)
    assert report.fail == 0 and report.ok > 0


def test_status_check_warns_when_it_is_the_run_that_resumed_one(db: Path, tmp_path: Path) -> None:
    with gateway_writer.running(db, tmp_path) as writer:
        tool, watchdog = paused_in_a_freeze(db, tmp_path)
        try:
            killed_together(tool, watchdog)
        finally:
            tool.kill()
        assert TABLE.state(writer.pid) == "T"
        result = admin(db, "status", "--check", "--format", "json")
        found = [f for f in json.loads(result.stdout)["findings"] if f["check"] == "live_writers"]
        assert found and found[0]["state"] == "WARNING" and RESUMED in found[0]["message"]
        assert RESUMED in result.stderr
        wait_for(lambda: TABLE.state(writer.pid) not in ("T", None), "running again")


def test_a_process_someone_else_stopped_stays_stopped_and_status_says_so(
    db: Path, tmp_path: Path
) -> None:
    """Someone's Ctrl-Z (not in the ledger): never resumed by us, however we look."""
    with gateway_writer.running(db, tmp_path) as writer:
        while True:  # stopped between two of its writes (not holding the write lock)
            os.kill(writer.pid, signal.SIGSTOP)
            wait_for(lambda: TABLE.stopped(writer.pid), "stopped")
            if shm_lock_holder(db, SHM_WRITE_LOCK) is None:
                break
            os.kill(writer.pid, signal.SIGCONT)
            time.sleep(0.002)
        try:
            assert status_of(db, writer.pid)["stopped"] is True
            code, finding = live_writers_finding(db)
            assert code == 2 and finding is not None and finding["state"] == "CRITICAL"
            table = admin(db, "status")
            assert f"pid {writer.pid} (" in table.stdout and "STOPPED (state T" in table.stdout
            write = admin(db, "kv", "set", "ours", "1")
            assert write.returncode == 0 and RESUMED not in write.stderr
            read = admin(db, "kv", "get", "--raw", "ours")
            assert read.stdout == "1" and read.stderr == ""
            assert TABLE.state(writer.pid) == "T"
        finally:
            os.kill(writer.pid, signal.SIGCONT)


def test_a_process_someone_else_stopped_inside_its_write_is_waited_for_then_refused(
    db: Path, tmp_path: Path
) -> None:
    """Stopped (not by us) while it holds the write lock: the write waits as for any busy
    writer, then exit 6; the process is still left stopped."""
    config = tmp_path / "triggerfish.yaml"
    config.write_text("storage:\n  backend: sqlite\n  busy_timeout_ms: 300\n")
    with gateway_writer.running(db, tmp_path, hold=0.05) as writer:
        while True:  # stopped inside one of its write transactions
            os.kill(writer.pid, signal.SIGSTOP)
            wait_for(lambda: TABLE.stopped(writer.pid), "stopped")
            if shm_lock_holder(db, SHM_WRITE_LOCK) == writer.pid:
                break
            os.kill(writer.pid, signal.SIGCONT)
            time.sleep(0.01)
        try:
            write = admin(db, "--config", str(config), "kv", "set", "ours", "1")
            assert write.returncode == 6, write.stderr
            assert "nothing was written" in write.stderr and RESUMED not in write.stderr
            assert TABLE.state(writer.pid) == "T"
        finally:
            os.kill(writer.pid, signal.SIGCONT)
