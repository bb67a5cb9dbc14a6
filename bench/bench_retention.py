"""Retention sweep vs one raw DELETE, with a concurrent writer (issues #4 and #13).

    python bench/bench_retention.py [--records 1000000] [--days 38] [--repeat 3]

The store is the demo store with its records spread over ``--days`` days
(38: about 12% of it is expired under the default policies at the anchor
time), built once and cached under bench/data/. Each run works on a fresh
scratch copy, with a second process inserting a conversation message every
10 ms from 1 s before the job until 2 s after it, so the writes just after
the job (which pay for any WAL left behind) count too. The writer is of one
of two kinds, side by side in one run:

- ``gateway``: no busy timeout, as the real gateway and its driver: a write
  that meets our lock fails at once (issue #13's targets: 0 failures, worst
  stall <= 100 ms, p99 <= 30 ms);
- ``patient``: a 5 s busy timeout (what earlier figures used; for reference).

- ours: ``triggerfish-admin retention sweep --yes`` in a subprocess (start-up,
  read, plan, paced compare-and-delete batches, checkpoints, audit);
- raw: the same deletions as raw SQL in one transaction: one
  ``DELETE ... WHERE json_extract(...) < ?`` per namespace (and the counters,
  the scheduler runs' todo lists and the cron-history trim), which is the
  physical limit and what an operator would type into sqlite3.

Prints throughput (records deleted or trimmed per second of wall time) and
its ratio (target >= 0.5x raw, with the gateway's kind of writer), per job
the writer's failures, worst and p99 stall (from when each write was due to
when it ended, so the write gate's pauses count: see gateway_writer.py), the
WAL left behind, the sweep's peak memory, the gateway's share of the sweep's
apply phase (the fraction of it the write gate did not keep it paused), and
whether both removed the same keys.
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
from common import ANCHOR, DATA, ROOT, median, peak_rss_command, peak_rss_mib, scratch_copy, store

# -- the concurrent writer (bench/gateway_writer.py, its own process) ------------------


WRITERS = {"gateway": 0.0, "patient": 5.0}  # busy timeout (s)


# -- the jobs ---------------------------------------------------------------------------


def iso(moment: object) -> str:
    from triggerfish_cli.serialization import to_iso

    return to_iso(moment)  # type: ignore[arg-type]


RAW_SQL = """
BEGIN IMMEDIATE|
DELETE FROM kv WHERE key >= 'sessions:' AND key < 'sessions;'
  AND json_extract(value, '$.createdAt') < :cut30
  AND substr(key, 10) NOT IN (SELECT coalesce(json_extract(value, '$.id'), value)
                              FROM kv WHERE key = 'main-session-id')
  AND substr(key, 10) NOT IN (SELECT json_extract(value, '$.id') FROM kv
                              WHERE key >= 'session-id:' AND key < 'session-id;')
  AND NOT EXISTS (SELECT 1 FROM json_each(kv.value, '$.history') h
                  WHERE json_extract(h.value, '$.timestamp') >= :cut30)
  AND NOT EXISTS (SELECT 1 FROM kv c WHERE c.key > 'conv:' || substr(kv.key, 10) || ':'
                  AND c.key < 'conv:' || substr(kv.key, 10) || ';'
                  AND json_extract(c.value, '$.timestamp') >= :cut30)|
DELETE FROM kv WHERE key >= 'conv:' AND key < 'conv;'
  AND json_extract(value, '$.timestamp') < :cut30|
DELETE FROM kv WHERE key >= 'conv-session:' AND key < 'conv-session;'
  AND NOT EXISTS (SELECT 1 FROM kv c WHERE c.key > 'conv:' || substr(kv.key, 14) || ':'
                  AND c.key < 'conv:' || substr(kv.key, 14) || ';')|
DELETE FROM kv WHERE key >= 'pairing:' AND key < 'pairing;'
  AND NOT (key >= 'pairing:linked:' AND key < 'pairing:linked;')
  AND json_extract(value, '$.expiresAt') < :now|
DELETE FROM kv WHERE key >= 'todos:scheduler-' AND key < 'todos:scheduler.'
  AND CAST(substr(key, -13) AS INTEGER) < :cut30ms
  AND NOT EXISTS (SELECT 1 FROM json_each(kv.value, '$.todos') t
                  WHERE json_extract(t.value, '$.created_at') >= :cut30
                  OR json_extract(t.value, '$.updated_at') >= :cut30)|
DELETE FROM kv WHERE key >= 'workflow-runs:' AND key < 'workflow-runs;'
  AND json_extract(value, '$.completedAt') < :cut30|
DELETE FROM kv WHERE key >= 'cron:' AND key < 'cron;'
  AND json_extract(value, '$.enabled') = 0 AND json_extract(value, '$.createdAt') < :cut30|
DELETE FROM kv WHERE key >= 'cron-history:' AND key < 'cron-history;'
  AND NOT EXISTS (SELECT 1 FROM json_each(kv.value) e
                  WHERE json_extract(e.value, '$.executedAt') >= :cut30)|
UPDATE kv SET value = (SELECT json_group_array(json(e.value)) FROM json_each(kv.value) e
                       WHERE json_extract(e.value, '$.executedAt') >= :cut30)
  WHERE key >= 'cron-history:' AND key < 'cron-history;'
  AND EXISTS (SELECT 1 FROM json_each(kv.value) e
              WHERE json_extract(e.value, '$.executedAt') < :cut30)|
COMMIT|
"""


def raw_job(db: Path) -> tuple[float, int, float]:
    from datetime import timedelta

    cut30 = ANCHOR - timedelta(days=30)
    params = {"now": iso(ANCHOR), "cut30": iso(cut30), "cut30ms": int(cut30.timestamp() * 1000)}
    conn = sqlite3.connect(db, timeout=5.0, isolation_level=None)
    before = conn.total_changes
    started = time.perf_counter()
    for statement in RAW_SQL.split("|\n"):
        if statement.strip():
            conn.execute(statement, params)
    seconds = time.perf_counter() - started
    changed = conn.total_changes - before
    conn.close()
    return seconds, changed, 0.0


def our_job(db: Path, extra: list[str]) -> tuple[float, int, float]:
    command = [
        sys.executable,
        "-m",
        "triggerfish_cli",
        "--db",
        str(db),
        "retention",
        "sweep",
        "--yes",
        "--as-of",
        iso(ANCHOR),
        "--format",
        "json",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    peak = DATA / "sweep-peak-rss"
    proc = subprocess.run(peak_rss_command(command, peak), capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    rss = peak_rss_mib(peak)  # the sweep's own peak (its plan worker's, if larger)
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed: {proc.stderr}")
    summary = json.loads(proc.stdout)
    PHASES.append((summary["started_at"], summary["finished_at"]))
    GATES.append(summary.get("gate") or {})
    return seconds, int(summary["deleted"]) + int(summary["trimmed"]), rss


#: (apply started, finished) of each sweep, from its summary.
PHASES: list[tuple[str, str]] = []
#: The write gate's figures of each sweep.
GATES: list[dict[str, float]] = []


def _epoch(text: str) -> float:
    from triggerfish_cli.serialization import parse_iso

    moment = parse_iso(text)
    assert moment is not None
    return moment.timestamp()


def run(kind: str, source: Path, extra: list[str], writer_kind: str) -> dict[str, object]:
    db = scratch_copy(source, f"bench-retention-{kind}.db")
    os.sync()  # else the writer's fsyncs queue behind the copy's writeback
    time.sleep(1.0)
    stop, out = DATA / f"writer-{kind}.stop", DATA / f"writer-{kind}.json"
    stop.unlink(missing_ok=True)
    timeout = str(WRITERS[writer_kind])
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("gateway_writer.py")),
            str(db),
            str(out),
            str(stop),
            timeout,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(1.0)
        job_start = time.time()
        seconds, changed, rss = raw_job(db) if kind == "raw" else our_job(db, extra)
        wal = Path(str(db) + "-wal")
        wal_size = wal.stat().st_size if wal.exists() else 0
        time.sleep(2.0)
    finally:
        stop.touch()
        proc.wait()
    results = json.loads(out.read_text())
    ended = job_start + seconds
    seen = gateway_writer.summary(results, job_start, ended + 2.0)
    idle = gateway_writer.summary(results, 0.0, job_start)
    slow = [
        (round(float(due) - job_start, 1), round(float(stall) * 1000))
        for due, _, stall, _ in results
        if due >= job_start and stall > 0.1
    ]
    phase = ""
    share = None
    if kind == "ours" and PHASES:
        began, ended = PHASES[-1]
        apply_seconds = max(_epoch(ended) - _epoch(began), 1e-9)
        gate = GATES[-1]
        share = 1 - float(gate.get("frozen_seconds", 0.0)) / apply_seconds
        phase = (
            f"read+plan 0-{_epoch(began) - job_start:.1f} s, apply until "
            f"{_epoch(ended) - job_start:.1f} s; gate: {gate.get('freezes', 0)} freezes, "
            f"{gate.get('frozen_seconds', 0.0):.2f} s paused "
            f"({gate.get('held_seconds', 0.0):.2f} s of it between BEGIN and COMMIT), longest "
            f"{gate.get('longest_freeze_ms', 0.0):.0f} ms, busy retries "
            f"{gate.get('busy_retries', 0)}; gateway ran {share:.0%} of the apply phase"
        )
    keys = {row[0] for row in sqlite3.connect(db).execute("SELECT key FROM kv")}
    for suffix in ("", "-wal", "-shm", "-tfadmin-retention-sweep.lock"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    stop.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    return {
        "kind": kind,
        "writer": writer_kind,
        "share": share,
        "seconds": seconds,
        "changed": changed,
        "rate": changed / seconds,
        "rss_mib": rss,
        **seen,
        "idle_p99_ms": idle["p99_ms"],
        "wal_mib": wal_size / 2**20,
        "keys": {k for k in keys if not k.startswith(("audit:", "conv:bench-writer:"))},
        "slow": slow,
        "phase": phase,
        "idle_worst_ms": idle["worst_ms"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=38)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sweep-args", default="", help="extra options for the sweep")
    args = parser.parse_args()
    source = store(args.records, seed=1, days=args.days)
    extra = args.sweep_args.split()
    total = sqlite3.connect(source).execute("SELECT count(*) FROM kv").fetchone()[0]
    kinds = [(job, who) for who in ("gateway", "patient") for job in ("raw", "ours")]
    runs: dict[tuple[str, str], list[dict[str, object]]] = {kind: [] for kind in kinds}
    for index in range(args.repeat):
        for job, who in kinds if index % 2 == 0 else list(reversed(kinds)):
            result = run(job, source, extra, who)
            runs[(job, who)].append(result)
            print(
                f"# {job:<4} {who:<7} {result['seconds']:7.2f} s  {result['changed']:>7} records"
                f"  {result['rate']:8.0f}/s  writer: {result['failures']} failed of "
                f"{result['writes']}, stall worst {result['worst_ms']:6.0f} ms, p99 "
                f"{result['p99_ms']:5.0f} ms, median {result['median_ms']:4.1f} ms (the "
                f"write calls alone: p99 {result['call_p99_ms']:4.0f}, worst "
                f"{result['call_worst_ms']:4.0f} ms) "
                f"(before the job: p99 {result['idle_p99_ms']:4.1f}, "
                f"worst {result['idle_worst_ms']:4.0f} ms); WAL left "
                f"{result['wal_mib']:.1f} MiB; peak RSS {result['rss_mib']:.0f} MiB",
                flush=True,
            )
            if result["phase"] or result["slow"]:
                print(
                    f"#              {result['phase']}; writes over 100 ms (s after start, ms): "
                    f"{result['slow'][:10]}",
                    flush=True,
                )
    everything = [r for kind in kinds for r in runs[kind]]
    first = runs[("raw", "gateway")][0]
    same = all(r["keys"] == first["keys"] for r in everything)
    diff = len(first["keys"] ^ runs[("ours", "gateway")][0]["keys"])  # type: ignore[operator]
    print(
        f"\nstore: {total} keys, {args.days} days; ours removed "
        f"{runs[('ours', 'gateway')][0]['changed']} records, raw {first['changed']}; same keys "
        f"left: {same} ({diff} differ between ours and raw; the writer's own keys excluded)"
    )

    def col(kind: list[dict[str, object]], name: str) -> list[float]:
        return [float(r[name]) for r in kind]  # type: ignore[arg-type]

    for who in ("gateway", "patient"):
        ours, raw = runs[("ours", who)], runs[("raw", who)]
        ratio = median(col(ours, "rate")) / median(col(raw, "rate"))
        pairs = [o / r for o, r in zip(col(ours, "rate"), col(raw, "rate"), strict=True)]
        target = "(reference)"
        if who == "gateway":
            target = "target >= 0.5x  " + ("OK" if ratio >= 0.5 else "MISSED")
        print(
            f"{'throughput, ' + who + ' writer':<30} ours median {median(col(ours, 'rate')):8.0f}/s"
            f"  raw median {median(col(raw, 'rate')):8.0f}/s  ratio {ratio:4.2f}x (runs "
            f"{min(pairs):.2f}-{max(pairs):.2f}x)  {target}"
        )
    for (job, who), kind in runs.items():
        fails = sum(col(kind, "failures"))
        worst = max(col(kind, "worst_ms"))
        p99 = median(col(kind, "p99_ms"))
        verdict = ""
        if (job, who) == ("ours", "gateway"):
            ok = fails == 0 and worst <= 100 and p99 <= 30
            verdict = f"targets 0 / 100 / 30  {'OK' if ok else 'MISSED'}"
        print(
            f"writer ({who}) during {job:<5} failures {fails:4.0f}  worst stall {worst:6.0f} ms  "
            f"p99 (median of runs) {p99:5.0f} ms  p99 worst run {max(col(kind, 'p99_ms')):5.0f}"
            f" ms  {verdict}"
        )
    shares = [float(r["share"]) for r in runs[("ours", "gateway")] if r["share"] is not None]
    if shares:
        print(
            f"gateway's share of the sweep's apply phase (not paused): median "
            f"{median(shares):.0%} (runs {min(shares):.0%}-{max(shares):.0%})"
        )


if __name__ == "__main__":
    main()
