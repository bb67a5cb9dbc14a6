"""Who the write gate never pauses: an operator's job in the foreground of a terminal,
and a process that has the store open read-only (issue 35).

An interactive ``sqlite3`` on the store, run from a shell with job control in a real
pseudo-terminal: a SIGSTOP would make the shell print ``Stopped``, take the terminal
back, and leave sqlite3 in the background once resumed (the operator's next line going
to the shell). Our writes must leave it the foreground job, answering; a background
writer (the gateway, no terminal) is still paused; a foreground job holding the write
lock is waited for as any busy writer, then refused (exit 6).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import gateway_writer
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.live_writers import Look, LsofTable, ProcessTable, store_files

pexpect = pytest.importorskip("pexpect")

ADMIN = str(Path(sys.executable).parent / "triggerfish-admin")
TABLE = ProcessTable()
PROMPT = "PROMPT> "

needs_sqlite3 = pytest.mark.skipif(
    shutil.which("sqlite3") is None, reason="the sqlite3 command-line shell is not installed"
)


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    until = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < until, f"still not {what} after {seconds} s"
        time.sleep(0.01)


@pytest.fixture
def db(base_dir: Path) -> Path:
    path = base_dir / "data" / "triggerfish.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteStorage(path, create=True)
    store.set("seen", "before")
    store.close()
    return path


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Any]:
    """An interactive bash with job control on a pseudo-terminal of its own."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "TERM": "dumb",
        "PS1": PROMPT,
        "LESS": "",
        "LESSHISTFILE": "-",
    }
    child = pexpect.spawn(
        "bash",
        ["--norc", "--noprofile", "-i"],
        env=env,
        cwd=str(tmp_path),
        encoding="utf-8",
        codec_errors="replace",
        dimensions=(40, 200),
        timeout=60,
    )
    child.expect_exact(PROMPT)
    yield child
    child.sendcontrol("c")
    child.sendcontrol("d")
    child.close(force=True)


def foreground_job(shell_pid: int, name: str) -> int:
    """The pid of ``name``, a child of the shell, once it is the terminal's foreground job."""
    found: list[int] = []

    def there() -> bool:
        for entry in os.listdir("/proc"):
            fields = TABLE._stat(f"/proc/{entry}/stat") if entry.isdigit() else None
            if (
                fields
                and fields[1] == str(shell_pid)
                and TABLE.describe(int(entry))[0].startswith(name)
            ):
                look = TABLE.look(int(entry))
                if look is not None and look.foreground:
                    found.append(int(entry))
                    return True
        return False

    wait_for(there, f"{name} in the foreground")
    return found[0]


def admin(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ADMIN, "--db", str(db), *args], capture_output=True, text=True, timeout=120
    )


def ask(shell: Any, line: str, answer: str) -> str:
    """Type ``line`` at sqlite3's prompt; what came back before the next prompt, which must
    hold ``answer`` (sqlite3 answered it, not the shell)."""
    child = shell
    child.sendline(line)
    child.expect_exact("sqlite> ")
    seen = str(child.before)
    assert answer in seen, seen
    return seen


@needs_sqlite3
def test_an_interactive_sqlite3_stays_the_foreground_job_through_our_writes(
    db: Path, tmp_path: Path, shell: Any
) -> None:
    child = shell
    child.sendline(f"sqlite3 {db}")
    child.expect_exact("sqlite> ")
    ask(shell, "SELECT value FROM kv WHERE key = 'seen';", "before")  # it has the store open
    sqlite3_pid = foreground_job(child.pid, "sqlite3")
    if shutil.which("ps"):  # where there is no /proc, ps's STAT tells the same
        assert (LsofTable().look(sqlite3_pid) or Look("?", 0, False)).foreground

    with gateway_writer.running(db, tmp_path) as gateway:
        store = SqliteStorage(db)
        paused: list[int] = []
        store.gate.on_freeze = lambda seconds, writers: paused.append(writers)
        for n in range(20):
            store.set(f"ours:{n}", str(n))
        stats = store.gate.stats
        store.close()
        assert {sqlite3_pid, gateway.pid} <= stats.writers  # both seen as live writers
        assert paused and set(paused) == {1}  # each freeze paused one: the gateway
        written = admin(db, "kv", "set", "ours:cli", "7")
        assert written.returncode == 0, written.stderr

    seen = ask(shell, "SELECT value FROM kv WHERE key = 'ours:cli';", "7")
    assert "Stopped" not in seen
    look = TABLE.look(sqlite3_pid)
    assert look is not None and look.foreground and look.state != "T"
    assert gateway_writer.report(tmp_path).fail == 0


@needs_sqlite3
def test_a_foreground_sqlite3_holding_the_write_lock_is_waited_for_then_refused(
    db: Path, shell: Any
) -> None:
    child = shell
    child.sendline(f"sqlite3 {db}")
    child.expect_exact("sqlite> ")
    ask(shell, "BEGIN IMMEDIATE; SELECT value FROM kv WHERE key = 'seen';", "before")
    config = Path(str(db) + ".yaml")
    config.write_text("storage:\n  backend: sqlite\n  busy_timeout_ms: 300\n")
    refused = admin(db, "--config", str(config), "kv", "set", "ours", "1")
    assert refused.returncode == 6, refused.stderr
    assert "nothing was written" in refused.stderr
    ask(shell, "COMMIT;", "")
    written = admin(db, "--config", str(config), "kv", "set", "ours", "1")
    assert written.returncode == 0, written.stderr
    seen = ask(shell, "SELECT value FROM kv WHERE key = 'ours';", "1")
    assert "Stopped" not in seen


def test_less_on_the_store_is_never_stopped(db: Path, tmp_path: Path, shell: Any) -> None:
    if shutil.which("less") is None:
        pytest.skip("less is not installed")
    child = shell
    child.sendline(f"less {db}")
    less_pid = foreground_job(child.pid, "less")
    files = store_files(db)
    wait_for(lambda: TABLE.openers([less_pid], files) == [less_pid], "less reading the store")
    with gateway_writer.running(db, tmp_path):
        written = admin(db, "kv", "set", "ours", "1")
        assert written.returncode == 0, written.stderr
    look = TABLE.look(less_pid)
    assert look is not None and look.foreground and look.state != "T"
    child.send("q")
    child.expect_exact(PROMPT)
    assert "Stopped" not in str(child.before)


def test_a_reader_with_the_store_open_read_only_is_not_a_live_writer(
    db: Path, tmp_path: Path
) -> None:
    """No terminal here: read-only descriptors alone keep it out of every freeze."""
    code = (
        "import sqlite3, sys, time\n"
        f"conn = sqlite3.connect('file:{db}?mode=ro', uri=True)\n"
        "conn.execute('SELECT count(*) FROM kv').fetchone()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    reader = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == b"ready\n"
        store = SqliteStorage(db)
        (seen,) = store.live_writers()
        assert seen.pid == reader.pid and seen.reads_only
        if shutil.which("lsof"):  # where there is no /proc, lsof's access modes tell the same
            assert LsofTable().reads_only(reader.pid, os.path.realpath(db))
        assert seen.as_dict()["not_paused"] == "it has the database open read-only"
        assert store.gate.writers() == []
        store.set("ours", "1")
        assert store.gate.stats.freezes == 0
        store.close()
    finally:
        reader.kill()
        reader.wait()
