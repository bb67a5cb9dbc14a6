"""A second process writing to a store, as the gateway would, while a sweep runs.

    python writer.py DB STOPFILE OUTFILE SESSION_ID...

Until STOPFILE exists it writes every few milliseconds with no busy timeout,
as the gateway does (a write that meets a lock fails at once and is reported):
new young sessions, revivals of the given (old) sessions with a fresh
``createdAt``, and new messages to them with their counter. Then it writes
OUTFILE: ``{"writes": {key: last value written}, "errors": [...], "count": N}``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def script_running(script: str, stop: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """A writer script in a process of its own, once it prints "ready", for the
    block; then stopped (STOPFILE ``stop`` touched) and waited for."""
    process = subprocess.Popen([sys.executable, script, *args], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        yield process
    finally:
        stop.touch()
        process.wait(timeout=60)


def running(db: Path, stop: Path, out: Path, *sessions: str) -> Any:
    """This writer in a process of its own, ready to write, for the block; then stopped."""
    return script_running(__file__, stop, str(db), str(stop), str(out), *sessions)


def now_iso() -> str:
    moment = datetime.now(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def main() -> None:
    db, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    old = sys.argv[4:]
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    conn.execute("SELECT count(*) FROM kv").fetchone()  # open, WAL index built
    writes: dict[str, str] = {}
    errors: list[str] = []
    count = 0
    print("ready", flush=True)
    while not stop.exists():
        count += 1
        items = [(f"sessions:w-{count}", json.dumps({"id": f"w-{count}", "createdAt": now_iso()}))]
        if old:
            sid = old[count % len(old)]
            if count % 3 == 0:  # the gateway revives an old session
                items.append((f"sessions:{sid}", json.dumps({"id": sid, "createdAt": now_iso()})))
            else:  # or the owner writes in an old conversation
                items.append(
                    (
                        f"conv:{sid}:{900000 + count:012d}",
                        json.dumps(
                            {"session_id": sid, "timestamp": now_iso(), "sequence": 900000 + count}
                        ),
                    )
                )
                items.append((f"conv-session:{sid}", json.dumps({"lastSequence": 900000 + count})))
        for key, value in items:
            try:
                conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
                writes[key] = value
            except sqlite3.Error as exc:
                errors.append(f"{key}: {exc}")
        time.sleep(0.004)
    conn.close()
    out.write_text(json.dumps({"writes": writes, "errors": errors, "count": count}))


if __name__ == "__main__":
    main()
