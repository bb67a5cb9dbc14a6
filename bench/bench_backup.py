"""`backup create` and `backup verify` against `cp` of the same file (issue #5).

On the 1M-key store (a private copy, page cache warm), side by side, RUNS
rounds each, medians:

- ``cp`` of the database file (the physical limit; it does not fsync, we do:
  ``cp`` plus an fsync of the copy is printed for reference);
- ``backup create -c none`` (the online backup API in one step, then the
  archive): target >= 0.3x the throughput of cp;
- ``backup create`` (zstd level 1, threads): target <= 1.6x the time of the
  uncompressed create; the compression ratio;
- ``backup verify`` of the zstd archive: target <= 2x the time of its create;
- for reference, the compression alone: the same zstd frames of the same
  file from the page cache, as a process, with no snapshot (what a zstd
  create could at best cost on these cores);
- then ``backup create`` while a second process inserts a row every 10 ms with
  NO busy timeout (as the gateway): its failures (target 0) and worst wait.

Each command runs as the installed CLI would (a process).

    python bench/bench_backup.py [RUNS] [--records N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from common import DATA, median, report, scratch_copy, store

TICK = 0.010


def writer(db: str, out: str, stop: str) -> None:
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)  # the gateway sets none
    waits: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    n = 0
    print("ready", flush=True)
    while not os.path.exists(stop):
        n += 1
        began = time.perf_counter()
        try:
            conn.execute(
                "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)",
                (f"conv:bench-writer:{n:012d}", json.dumps({"n": n, "pad": "x" * 300})),
            )
        except sqlite3.Error as exc:
            errors.append(str(exc))
        waits.append(time.perf_counter() - began)
        next_tick = start + n * TICK
        now = time.perf_counter()
        if next_tick > now:
            time.sleep(next_tick - now)
    conn.close()
    Path(out).write_text(json.dumps({"waits": waits, "errors": errors, "count": n}))


def cli(db: Path, *args: str) -> tuple[float, dict[str, object]]:
    command = [sys.executable, "-m", "triggerfish_cli", "--db", str(db), "backup", *args]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr}")
    return seconds, json.loads(done.stdout) if done.stdout.strip() else {}


def create(db: Path, out: Path, compression: str) -> tuple[float, Path, dict[str, object]]:
    seconds, document = cli(db, "create", "-c", compression, "--to", str(out), "-f", "json")
    manifest = document["manifest"]
    assert isinstance(manifest, dict)
    return seconds, out / str(document["name"]), manifest


COMPRESS_ALONE = """
import sys
from triggerfish_cli.backup_archive import HashingWriter, compress_stream, read_chunks
class Null:
    def write(self, data): return len(data)
    def flush(self): pass
with open(sys.argv[1], "rb") as handle:
    compress_stream(read_chunks(handle), HashingWriter(Null()), "zstd", threads=int(sys.argv[2]))
"""


def compress_alone(db: Path) -> float:
    """The zstd frames of the file alone, as a process (startup included, as for create)."""
    threads = str(min(4, os.cpu_count() or 1))
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", COMPRESS_ALONE, str(db), threads], check=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", type=int, nargs="?", default=3)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    runs = args.runs
    db = scratch_copy(store(args.records), "backup-bench.db")
    out = DATA / "backup-bench-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    size = db.stat().st_size
    print(f"# store {db.name}: {size / 2**20:.0f} MiB, {runs} runs each, medians")
    db.read_bytes()  # warm the page cache
    cp, cp_sync, plain, zstd, verify, ratios, alone = [], [], [], [], [], [], []
    for _ in range(runs):
        target = out / "copy.db"
        began = time.perf_counter()
        subprocess.run(["cp", str(db), str(target)], check=True)
        cp.append(time.perf_counter() - began)
        target.unlink()
        began = time.perf_counter()
        subprocess.run(["cp", str(db), str(target)], check=True)
        fd = os.open(target, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        cp_sync.append(time.perf_counter() - began)
        target.unlink()
        seconds, archive, _ = create(db, out, "none")
        plain.append(seconds)
        archive.unlink()
        seconds, archive, manifest = create(db, out, "zstd")
        zstd.append(seconds)
        ratios.append(int(str(manifest["content_bytes"])) / int(str(manifest["payload_bytes"])))
        seconds, _ = cli(db, "verify", str(archive), "--scratch", str(out), "-f", "json")
        verify.append(seconds)
        alone.append(compress_alone(db))
        for leftover in out.iterdir():
            leftover.unlink()
    mib = size / 2**20
    print(f"cp                       {median(cp):7.2f} s  {mib / median(cp):7.0f} MiB/s")
    print(f"cp + fsync of the copy   {median(cp_sync):7.2f} s  {mib / median(cp_sync):7.0f} MiB/s")
    print(f"create -c none           {median(plain):7.2f} s  {mib / median(plain):7.0f} MiB/s")
    print(f"create (zstd)            {median(zstd):7.2f} s  ratio {median(ratios):.2f}:1")
    print(f"verify (zstd archive)    {median(verify):7.2f} s")
    print(
        f"zstd alone (no snapshot) {median(alone):7.2f} s  "
        f"(zstd create is {median(zstd) / median(alone):.2f}x of it)"
    )
    ok = report("uncompressed create throughput vs cp", cp, plain, 0.3, lower_is_better=False)
    report(
        "  (reference: vs cp + fsync, as create syncs)", cp_sync, plain, 0.3, lower_is_better=False
    )
    ok &= report("zstd create time vs uncompressed create", zstd, plain, 1.6)
    ok &= report("verify time vs zstd create", verify, zstd, 2.0)

    stop, result = DATA / "backup-writer.stop", DATA / "backup-writer.json"
    stop.unlink(missing_ok=True)
    process = subprocess.Popen(
        [sys.executable, __file__, "--writer", str(db), str(result), str(stop)],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    time.sleep(0.5)
    under = []
    for _ in range(runs):
        seconds, archive, _ = create(db, out, "zstd")
        under.append(seconds)
        archive.unlink()
    time.sleep(0.5)
    stop.touch()
    process.wait()
    stats = json.loads(result.read_text())
    waits = sorted(stats["waits"])
    print(
        f"create (zstd) with a writer every 10 ms: {median(under):.2f} s; writer "
        f"{len(stats['errors'])} failed of {stats['count']}, worst wait "
        f"{waits[-1] * 1000:.1f} ms, p99 {waits[int(0.99 * (len(waits) - 1))] * 1000:.1f} ms"
        + (f"; first error: {stats['errors'][0]}" if stats["errors"] else "")
    )
    ok &= not stats["errors"]
    stop.unlink(missing_ok=True)
    result.unlink(missing_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    print("all targets met" if ok else "SOME TARGETS MISSED")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer(*sys.argv[2:5])
    else:
        main()
