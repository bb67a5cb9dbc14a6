"""Writing commands beside a writer like the gateway: failed writes and stalls (issue #13).

    python bench/bench_gate.py [--records 1000000] [--repeat 3]

On scratch copies of the 1M-key demo store (the one bench_retention.py and
bench_kv.py use), each job runs as a process while a second process writes
a key every 10 ms with NO busy timeout, as the gateway does (a write that
meets our lock fails at once), from 1 s before the job until 1 s after:

- ``kv delete --prefix conv: --yes``;
- ``memory reindex --taint RESTRICTED`` after half the memory_meta rows were
  dropped (so it has real work);
- each once with the write gate (the default) and once with
  ``--live-writers ignore`` (what it costs the gateway without it).

Prints, per job, the median time, the writer's failures (target 0 with the
gate), its worst and p99 stall (from when each write was due to when it
ended, so the gate's pauses count: gateway_writer.py), and the gateway's share
of the job's wall time (1 - the time the gate kept it paused).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateway_writer
from common import DATA, ROOT, median, scratch_copy, store


def damage_index(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM memory_meta WHERE rowid % 2 = 0")


JOBS = {
    "kv delete --prefix conv:": (["kv", "delete", "--prefix", "conv:", "--yes", "-q"], None),
    "memory reindex": (["memory", "reindex", "--taint", "RESTRICTED", "-q"], damage_index),
}


def run(source: Path, args: list[str], prepare: object, gate: bool) -> dict[str, float]:
    db = scratch_copy(source, "bench-gate.db")
    if callable(prepare):
        prepare(db)
    os.sync()
    stop, out = DATA / "gate-writer.stop", DATA / "gate-writer.json"
    stop.unlink(missing_ok=True)
    writer = subprocess.Popen(
        [
            sys.executable,
            gateway_writer.__file__,
            str(db),
            str(out),
            str(stop),
            "0",
            "sessions:bench-gw-",
        ],
        stdout=subprocess.PIPE,
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == b"ready"
    time.sleep(1.0)
    command = [sys.executable, "-m", "triggerfish_cli", "--db", str(db)]
    if not gate:
        command += ["--live-writers", "ignore"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    began_wall = time.time()
    started = time.perf_counter()
    job = subprocess.run([*command, *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    ended_wall = time.time()
    time.sleep(1.0)
    stop.touch()
    writer.wait()
    if job.returncode != 0:
        raise SystemExit(f"{args}: {job.stderr}")
    seen = gateway_writer.summary(json.loads(out.read_text()), began_wall, ended_wall + 0.2)
    gate_stats = _gate_of_last_audit(db)
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    frozen = float(gate_stats.get("frozen_seconds", 0.0))
    return {
        "seconds": seconds,
        **seen,
        "share": 1 - frozen / seconds,
        "freezes": float(gate_stats.get("freezes", 0)),
    }


def _gate_of_last_audit(db: Path) -> dict[str, float]:
    """What the job's writes cost the writer, from its audit record (``gate``)."""
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT value FROM kv WHERE key >= 'audit:' AND key < 'audit;' "
            "AND key LIKE '%admin_%' ORDER BY key DESC LIMIT 1"
        ).fetchone()
    return dict(json.loads(row[0]).get("gate", {})) if row else {}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    source = store(args.records, seed=1, days=400)
    for name, (command, prepare) in JOBS.items():
        for gate in (True, False):
            runs = [run(source, command, prepare, gate) for _ in range(args.repeat)]
            label = f"{name} ({'gate' if gate else 'ignore'})"
            fails = sum(r["failures"] for r in runs)
            worst = max(r["worst_ms"] for r in runs)
            p99 = median([r["p99_ms"] for r in runs])
            verdict = ""
            if gate:  # the target here is failures; the stalls are for reference
                verdict = f"target 0 failures  {'OK' if fails == 0 else 'MISSED'}"
            print(
                f"{label:<40} {median([r['seconds'] for r in runs]):6.2f} s  writer: "
                f"{fails:.0f} failed of {sum(r['writes'] for r in runs):.0f}, "
                f"stall worst {worst:5.0f} ms, p99 {p99:4.0f} ms; gateway ran "
                f"{median([r['share'] for r in runs]):.0%} of the time "
                f"({median([r['freezes'] for r in runs]):.0f} freezes)  {verdict}",
                flush=True,
            )


if __name__ == "__main__":
    main()
