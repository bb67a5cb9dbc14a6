"""Issue #2: `kv namespaces`, `kv list --keys-only` and `kv get --raw` against their limits.

    python bench/bench_kv.py [--records 1000000] [--repeat 5] [--runs 20]

1. `kv namespaces` through the core API against the raw SQL computing the
   same figures (count and sum(length(value)) per prefix, `key >= ? AND key < ?`
   range queries), in one process. Target: <= 1.5x.
2. The gateway's `LIKE ? || '%'` listing against a range query (expected > 10x
   slower), and `kv list PREFIX --keys-only` through the core API against the
   bare range query.
3. `triggerfish-admin kv get KEY --raw` as a whole process against
   `sqlite-utils query DB "select value from kv where key = ..."`, alternated
   run by run. Target: <= 0.75x. Both run from a normal (not editable)
   install in a fresh venv (an editable install adds a path finder to every
   start-up), each through its own console script with that venv's
   interpreter; `--venv DIR` reuses one.

Each job and its limit run in alternating rounds in a random order
(common.interleaved), so both see the same page cache and load; the spread
of the per-round ratios is printed beside the median.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA, ROOT, interleaved, median, report, store

from triggerfish_cli import namespaces
from triggerfish_cli.kv import keys
from triggerfish_cli.storage.provider import prefix_upper_bound
from triggerfish_cli.storage.sqlite.backend import SqliteStorage


def raw_namespaces(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    figures = {}
    for prefix in namespaces.PREFIXES:
        figures[prefix] = conn.execute(
            "SELECT count(*), coalesce(sum(length(value)), 0) FROM kv WHERE key >= ? AND key < ?",
            (prefix, prefix_upper_bound(prefix)),
        ).fetchone()
    return figures


def normal_install(venv: Path | None) -> Path:
    """The bin directory of a venv holding a normal (wheel) install of this tree."""
    if venv is None:
        venv = DATA / "venv-normal"
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        done = subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", str(ROOT)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            sys.exit(f"pip install of {ROOT} into {venv} failed:\n{done.stderr}")
    return venv / "bin"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--venv", type=Path, default=None, help="A venv with a normal install to reuse"
    )
    args = parser.parse_args()
    db = store(args.records)
    print(f"# store {db} ({db.stat().st_size / 2**20:.0f} MiB, {args.records} keys)")
    provider = SqliteStorage(db)
    conn = sqlite3.connect(db)

    mapped = sqlite3.connect(db)
    mapped.execute("PRAGMA mmap_size=2147418112")
    times = interleaved(
        {
            "ours": lambda: keys.namespace_report(provider),
            "raw": lambda: raw_namespaces(conn),
            "raw mmap": lambda: raw_namespaces(mapped),
        },
        repeat=args.repeat,
    )
    report("kv namespaces (core) vs raw range queries", times["ours"], times["raw"], 1.5)
    report(
        "kv namespaces (core) vs raw, raw with mmap too", times["ours"], times["raw mmap"], 1.5
    )

    prefix = "sessions:"
    upper = prefix_upper_bound(prefix)
    times = interleaved(
        {
            "like": lambda: conn.execute(
                "SELECT key FROM kv WHERE key LIKE ? || '%'", (prefix,)
            ).fetchall(),
            "range": lambda: conn.execute(
                "SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key", (prefix, upper)
            ).fetchall(),
            "like count": lambda: conn.execute(
                "SELECT count(*) FROM kv WHERE key LIKE ? || '%'", (prefix,)
            ).fetchone(),
            "range count": lambda: conn.execute(
                "SELECT count(*) FROM kv WHERE key >= ? AND key < ?", (prefix, upper)
            ).fetchone(),
        },
        repeat=args.repeat,
    )
    for what, a, b in (("listing", "like", "range"), ("count", "like count", "range count")):
        print(
            f"{'gateway LIKE ' + what + ' / range ' + what:<48} like {median(times[a]):8.3f}s  "
            f"range {median(times[b]):8.3f}s  ratio {median(times[a]) / median(times[b]):5.1f}x  "
            f"(expected > 10x)"
        )
    # The biggest namespace: a ratio of two tens-of-ms figures needs a workload of
    # its own size and many rounds (BENCH-NOTES.md).
    biggest = max(
        namespaces.PREFIXES,
        key=lambda p: conn.execute(
            "SELECT count(*) FROM kv WHERE key >= ? AND key < ?", (p, prefix_upper_bound(p))
        ).fetchone()[0],
    )
    big_upper = prefix_upper_bound(biggest)
    times = interleaved(
        {
            "ours": lambda: list(provider.scan_keys(biggest)),
            "range": lambda: conn.execute(
                "SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key", (biggest, big_upper)
            ).fetchall(),
        },
        repeat=max(args.repeat, 15),
    )
    report(f"kv list {biggest} --keys-only (core) vs range", times["ours"], times["range"], 1.5)

    key = next(iter(provider.scan_keys(prefix)))
    bindir = normal_install(args.venv)
    cli, utils = str(bindir / "triggerfish-admin"), str(bindir / "sqlite-utils")
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed tool has its bytecode cached
    ours_cmd = [cli, "--db", str(db), "kv", "get", key, "--raw"]
    utils_cmd = [utils, "query", str(db), f"select value from kv where key = '{key}'"]
    ours_times, utils_times = [], []
    for run in range(args.runs + 2):
        for command, bucket in ((ours_cmd, ours_times), (utils_cmd, utils_times)):
            started = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
            if run >= 2:  # two warm-up rounds
                bucket.append(time.perf_counter() - started)
    report("kv get --raw (process) vs sqlite-utils query", ours_times, utils_times, 0.75)


if __name__ == "__main__":
    main()
