"""Out of open files, memory or threads: exit 10 and one line, never "unexpected" (issue 35).

Through the installed console script under real limits, set in the child
before it starts (``setrlimit``, as ``ulimit -n`` / ``-v`` / ``-s`` would).
Where a limit bites depends on how many files or how much memory the
interpreter takes on this machine, so the open-file test runs every command
under each limit from the lowest at which Python itself starts to one at
which most succeed; the memory and thread tests set limits far from the
edge on either side (a thread's stack larger than all the room left, a
value several times that room).
"""

from __future__ import annotations

import contextlib
import os
import resource
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.memories import write_memory_store
from tests.helpers.terminal import SCRIPT

MIB = 1 << 20

#: Commands that succeed on the test store when nothing runs out.
COMMANDS = [
    ["kv", "namespaces"],
    ["kv", "set", "new:key", '"v"'],
    ["memory", "search", "alice", "--all-agents"],
    ["memory", "reindex"],
    ["retention", "plan"],
    ["retention", "sweep", "--yes"],
    ["backup", "create", "--to", "{backups}"],
    ["backup", "verify", "--latest", "--from", "{backups}"],
    ["status"],
    ["config", "history"],
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    (tmp_path / "store").mkdir()
    db = write_memory_store(tmp_path / "store" / "triggerfish.db")
    assert run(db, ["backup", "create", "--to", str(tmp_path / "backups")]).returncode == 0
    return db


def run(
    db: Path, args: list[str], limit: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env["TRIGGERFISH_DATA_DIR"] = str(db.parent.parent / "base")
    backups = str(db.parent.parent / "backups")
    return subprocess.run(
        [SCRIPT, "--db", str(db), *(arg.format(backups=backups) for arg in args)],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        preexec_fn=limit,
        timeout=300,
        check=False,
    )


def files(count: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


def memory(address_space: int, stack: int | None = None) -> Callable[[], None]:
    def limit() -> None:
        if stack is not None:
            resource.setrlimit(resource.RLIMIT_STACK, (stack, stack))
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return limit


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_out_of_open_files_is_exit_10_and_one_line(store: Path, command: list[str]) -> None:
    """From 5 descriptors (below that the interpreter itself cannot start) to 12
    (the issue's ``ulimit -n 12``): success, or one line and exit 10, never 1. A
    store that cannot be opened for want of files is not called read-only (9), a
    backup that cannot be opened is not called damaged (5); exit 7, "cannot open",
    stays possible where a file's opening failed and the files were back by the
    time it was looked into (the integrity check's threads)."""
    codes = []
    for count in range(5, 13):
        done = run(store, command, files(count))
        codes.append(done.returncode)
        if done.returncode == 0:
            continue
        line = one_error_line(done)
        assert done.returncode in (7, 10), (count, line)
        if done.returncode == 10:
            assert "too many open files" in line.lower(), (count, line)
        else:
            assert "cannot open" in line, (count, line)
    assert 10 in codes  # the sweep reached the shortage
    assert run(store, ["kv", "namespaces"]).returncode == 0  # and left a working store


#: Commands under a limit that lets no thread start, and their exit: work that needs
#: worker threads stops before it starts (10); the write gate's checkpoint thread, an
#: upkeep after a commit, is tried again after the next one, never failing a write.
THREADED = [
    (["kv", "set", "new:key", '"v"'], 0),
    (["memory", "reindex"], 0),
    (["retention", "sweep", "--yes"], 0),
    (["backup", "create", "--to", "{backups}"], 10),
    (["backup", "verify", "--latest", "--from", "{backups}"], 10),
]


@pytest.mark.parametrize(("command", "code"), THREADED, ids=[" ".join(c[:2]) for c, _ in THREADED])
def test_a_thread_that_cannot_start_is_exit_10(store: Path, command: list[str], code: int) -> None:
    """A thread's stack is the stack limit (1 GiB here): more than the 512 MiB of
    address space allowed, which the command itself needs a tenth of."""
    done = run(store, command, memory(512 * MIB, stack=1024 * MIB))
    assert done.returncode == code, done.stderr[-2000:]
    if code:
        assert "cannot start a thread" in one_error_line(done)
    else:
        assert done.stderr == ""
    written = run(store, ["kv", "get", "new:key"]).returncode == 0
    assert written == (command[:2] == ["kv", "set"])  # done, or nothing done


def test_out_of_memory_is_exit_10(store: Path) -> None:
    """The least address space in which ``kv get`` of a small value runs, found here;
    with 32 MiB more, a value of 128 MiB cannot be read: exit 10, one line."""
    with contextlib.closing(sqlite3.connect(store)) as conn:
        conn.execute("INSERT INTO kv VALUES ('big:value', ?)", ("x" * (128 * MIB),))
        conn.commit()
    floor = next(
        space
        for space in range(32 * MIB, 1024 * MIB, 16 * MIB)
        if run(store, ["kv", "get", "main-session-id", "--raw"], memory(space)).returncode == 0
    )
    done = run(store, ["kv", "get", "big:value", "--raw"], memory(floor + 32 * MIB))
    assert done.returncode == 10, done.stderr[-2000:]
    assert one_error_line(done).startswith("error: out of memory (")
    assert done.stdout == ""
