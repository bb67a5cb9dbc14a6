"""A writer that behaves like the gateway: its own connection, WAL, NO busy timeout.

    python gateway_writer.py DB STOPFILE OUTFILE [--period S] [--hold S] [--prefix P]

Until STOPFILE exists it writes one key every ``--period`` seconds (default
0.005) with an autocommitted ``INSERT OR REPLACE``, as the gateway does; with
``--hold`` each write is its own ``BEGIN IMMEDIATE`` transaction held that long
(a gateway busy inside a write); with ``--read-first`` each write is a
deferred transaction that reads, waits that long, then writes (the moment of
an autocommitted write between taking its read snapshot and the write lock,
widened: a commit of ours in between makes its write fail). A write that
meets a lock fails at once, like the gateway's; its first failure also creates
OUTFILE + ``.failed`` (:func:`failed`), for a test to wait for. Then it writes OUTFILE:
``{"ok", "fail", "errors", "written": {key: value}, "times": [wall time of
each successful write], "worst_s", "peak_frames"}``: ``peak_frames`` is the
most WAL frames it saw right after one of its commits (read from the -shm
header; -1: unknown), what decides whether that commit ran SQLite's automatic
checkpoint inside itself (at 1000 frames, its default ``wal_autocheckpoint``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__)


@dataclass
class Report:
    ok: int
    fail: int
    errors: list[str]
    written: dict[str, str]
    times: list[float]
    worst_s: float
    peak_frames: int = -1

    @classmethod
    def read(cls, path: Path) -> Report:
        data: dict[str, Any] = json.loads(path.read_text())
        return cls(**data)

    def missing_from(self, rows: dict[str, str]) -> dict[str, str]:
        """The writes of ours that the store does not hold (as written) afterwards."""
        return {key: value for key, value in self.written.items() if rows.get(key) != value}


@contextlib.contextmanager
def running(
    db: Path,
    work: Path,
    *,
    period: float = 0.005,
    hold: float = 0.0,
    read_first: float = 0.0,
    prefix: str = "sessions:gw-",
    python: str = sys.executable,
    user: int | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """The writer in a process of its own, writing, for the block; then stopped.

    Its report is in ``work / "writer.json"`` (see :func:`report`).
    """
    stop, out = work / "writer.stop", work / "writer.json"
    stop.unlink(missing_ok=True)
    command = [python, str(SCRIPT), str(db), str(stop), str(out), "--period", str(period)]
    command += ["--hold", str(hold), "--read-first", str(read_first), "--prefix", prefix]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, user=user)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        yield process
    finally:
        stop.touch()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise


def report(work: Path) -> Report:
    return Report.read(work / "writer.json")


def failed(work: Path) -> bool:
    """Whether the writer has had a write fail yet (while it runs)."""
    return (work / "writer.json.failed").exists()


def wal_frames(shm: int | None) -> int:
    """mxFrame of the wal-index header at the start of the -shm file (-1: unknown);
    both copies must agree (a header not being written)."""
    if shm is None:
        return -1
    try:
        raw = os.pread(shm, 96, 0)
    except OSError:
        return -1
    if len(raw) < 96 or raw[:48] != raw[48:96]:
        return -1
    return int(struct.unpack_from("=I", raw, 16)[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("stop")
    parser.add_argument("out")
    parser.add_argument("--period", type=float, default=0.005)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--read-first", type=float, default=0.0)
    parser.add_argument("--prefix", default="sessions:gw-")
    args = parser.parse_args()
    conn = sqlite3.connect(args.db, timeout=0, isolation_level=None)
    stop = Path(args.stop)
    ok = fail = 0
    errors: list[str] = []
    written: dict[str, str] = {}
    times: list[float] = []
    worst = 0.0
    count = 0
    # Like the gateway at start-up: its connection is open and the WAL index built
    # before anyone else arrives (the first opener of a store builds it, briefly
    # locking out others: not something our commands cause).
    for _ in range(200):
        try:
            conn.execute("SELECT count(*) FROM kv").fetchone()
            break
        except sqlite3.OperationalError:
            time.sleep(0.01)
    try:
        shm: int | None = os.open(args.db + "-shm", os.O_RDONLY)
    except OSError:
        shm = None
    peak = -1
    print("ready", flush=True)
    parent = os.getppid()
    # Until told to stop, or until the test that started it is gone (a killed
    # pytest never touches STOPFILE: an orphan writer would write on for ever).
    while not stop.exists() and os.getppid() == parent:
        count += 1
        key = f"{args.prefix}{count:07d}"
        value = json.dumps({"id": key, "createdAt": "2026-12-01T00:00:00.000Z", "n": count})
        began = time.perf_counter()
        try:
            if args.read_first:
                conn.execute("BEGIN")
                conn.execute("SELECT count(*) FROM kv WHERE key >= ?", (args.prefix,)).fetchone()
                time.sleep(args.read_first)
                conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
                conn.execute("COMMIT")
            elif args.hold:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
                time.sleep(args.hold)
                conn.execute("COMMIT")
            else:
                conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
            ok += 1
            written[key] = value
            times.append(time.time())
            peak = max(peak, wal_frames(shm))
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            fail += 1
            errors.append(f"{key}: {exc}")
            if fail == 1:
                Path(args.out + ".failed").touch()
        worst = max(worst, time.perf_counter() - began)
        time.sleep(args.period)
    conn.close()
    Path(args.out).write_text(
        json.dumps(
            {
                "ok": ok,
                "fail": fail,
                "errors": errors[:20],
                "written": written,
                "times": times,
                "worst_s": worst,
                "peak_frames": peak,
            }
        )
    )


if __name__ == "__main__":
    main()
