"""A second process writing numbered keys to a store, checkpointing as it goes.

    python wal_writer.py DB STOPFILE OUTFILE

Until STOPFILE exists it commits ``conv:wal-writer:<n>`` (n = 1, 2, 3, ...)
every couple of milliseconds with no busy timeout, as the gateway writes (a
write that meets a lock fails at once and is reported); every few writes it
runs a PASSIVE checkpoint, now and then a TRUNCATE one (which restarts the
WAL when no reader holds it). Its own auto-checkpoint is off, so frames stay
in the WAL between its checkpoints. Then it writes OUTFILE:
``{"count": N, "errors": [...], "restarts": R}`` (R: TRUNCATE checkpoints
that were not busy).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

PREFIX = "conv:wal-writer:"


def key(n: int) -> str:
    return f"{PREFIX}{n:08d}"


def running(db: Path, stop: Path, out: Path) -> Any:
    """This writer in a process of its own, ready to write, for the block; then stopped."""
    from tests.helpers.writer import script_running

    return script_running(__file__, stop, str(db), str(stop), str(out))


def main() -> None:
    db, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("SELECT count(*) FROM kv").fetchone()
    errors: list[str] = []
    restarts = 0
    n = 0
    print("ready", flush=True)
    while not stop.exists():
        n += 1
        try:
            conn.execute(
                "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)",
                (key(n), json.dumps({"n": n, "pad": "w" * 200})),
            )
        except sqlite3.Error as exc:
            errors.append(f"write {n}: {exc}")
            n -= 1  # the numbers stay consecutive: the next write takes this one again
        try:
            if n % 41 == 0:
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                restarts += not busy
            elif n % 7 == 0:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            errors.append(f"checkpoint after {n}: {exc}")
        time.sleep(0.002)
    conn.close()
    out.write_text(json.dumps({"count": n, "errors": errors, "restarts": restarts}))


if __name__ == "__main__":
    main()
