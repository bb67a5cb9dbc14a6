"""A writer like the gateway, for the benches that run a job beside it (issue #13).

    python bench/gateway_writer.py DB OUT.json STOP_FILE BUSY_TIMEOUT_S [PREFIX]

One write (``INSERT OR REPLACE`` into ``kv``, autocommitted) is due every
``TICK`` seconds, on its own connection opened in WAL mode; with a busy
timeout of 0 (the gateway's, which sets none) a write that meets our lock
fails at once. Prints ``ready`` once the store is open, writes until
STOP_FILE exists, then writes OUT.json.

Each write is due at its tick. A write that could not start on time (the
process was paused by the write gate, or the previous write was slow) runs
as soon as the writer runs again, so every due write happens: that is a
message the gateway received meanwhile and had to store. Per write the
result holds ``[due (epoch s), call (s), stall (s), error]``:

- ``call``: how long the ``execute`` itself took (it never counts a pause
  that fell between two writes);
- ``stall``: from when the write was due to when it ended, which counts the
  pauses too: this is what a chat message or a cron result waits.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

TICK = 0.010


def main(db: str, out: str, stop: str, timeout: str, prefix: str = "conv:bench-writer:") -> None:
    conn = sqlite3.connect(db, timeout=float(timeout), isolation_level=None)
    conn.execute("SELECT count(*) FROM kv").fetchone()  # open, WAL index built
    body = "x" * 300
    results: list[tuple[float, float, float, str | None]] = []
    epoch = time.time() - time.perf_counter()
    start = time.perf_counter()
    n = 0
    print("ready", flush=True)
    parent = os.getppid()
    # Until told to stop, or until the bench that started it is gone (a killed
    # bench never writes the stop file: an orphan would write beside later runs).
    while not os.path.exists(stop) and os.getppid() == parent:
        n += 1
        due = start + n * TICK
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        value = json.dumps(
            {
                "session_id": "bench-writer",
                "timestamp": "2026-11-01T00:00:00.000Z",
                "sequence": n,
                "content": body,
            }
        )
        began = time.perf_counter()
        error = None
        try:
            conn.execute(
                "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (f"{prefix}{n:012d}", value)
            )
        except sqlite3.Error as exc:
            error = str(exc)
        ended = time.perf_counter()
        results.append((epoch + due, ended - began, ended - due, error))
    conn.close()
    with open(out, "w") as handle:
        json.dump(results, handle)


def summary(results: list[list[object]], since: float, until: float) -> dict[str, float]:
    """Failures, stalls and call times of the writes due in ``[since, until]`` (epoch s)."""
    window = [r for r in results if since <= float(r[0]) <= until]  # type: ignore[arg-type]
    stalls = sorted(float(r[2]) for r in window)  # type: ignore[arg-type]
    calls = sorted(float(r[1]) for r in window)  # type: ignore[arg-type]

    def pick(values: list[float], q: float) -> float:
        return values[int(q * (len(values) - 1))] * 1000 if values else 0.0

    return {
        "writes": len(window),
        "failures": sum(1 for r in window if r[3]),
        "worst_ms": pick(stalls, 1.0),
        "p99_ms": pick(stalls, 0.99),
        "median_ms": pick(stalls, 0.5),
        "call_worst_ms": pick(calls, 1.0),
        "call_p99_ms": pick(calls, 0.99),
    }


if __name__ == "__main__":
    main(*sys.argv[1:6])
