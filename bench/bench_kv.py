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
   run by run. Target: <= 0.75x.
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

from common import median, report, store, timed

from triggerfish_cli import kv, namespaces
from triggerfish_cli.storage.provider import prefix_upper_bound
from triggerfish_cli.storage.sqlite import SqliteStorage


def raw_namespaces(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    figures = {}
    for prefix in namespaces.PREFIXES:
        figures[prefix] = conn.execute(
            "SELECT count(*), coalesce(sum(length(value)), 0) FROM kv WHERE key >= ? AND key < ?",
            (prefix, prefix_upper_bound(prefix)),
        ).fetchone()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    db = store(args.records)
    print(f"# store {db} ({db.stat().st_size / 2**20:.0f} MiB, {args.records} keys)")
    provider = SqliteStorage(db)
    conn = sqlite3.connect(db)

    ours = timed(lambda: kv.namespace_report(provider), repeat=args.repeat)
    limit = timed(lambda: raw_namespaces(conn), repeat=args.repeat)
    report("kv namespaces (core) vs raw range queries", ours, limit, 1.5)
    mapped = sqlite3.connect(db)
    mapped.execute("PRAGMA mmap_size=2147418112")
    limit_mapped = timed(lambda: raw_namespaces(mapped), repeat=args.repeat)
    report("kv namespaces (core) vs raw, raw with mmap too", ours, limit_mapped, 1.5)

    prefix = "sessions:"
    upper = prefix_upper_bound(prefix)
    like = timed(
        lambda: conn.execute("SELECT key FROM kv WHERE key LIKE ? || '%'", (prefix,)).fetchall(),
        repeat=args.repeat,
    )
    ranged = timed(
        lambda: conn.execute(
            "SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key", (prefix, upper)
        ).fetchall(),
        repeat=args.repeat,
    )
    print(
        f"{'gateway LIKE listing / range listing':<48} like {median(like):8.3f}s  "
        f"range {median(ranged):8.3f}s  ratio {median(like) / median(ranged):5.1f}x  "
        f"(expected > 10x)"
    )
    like_count = timed(
        lambda: conn.execute(
            "SELECT count(*) FROM kv WHERE key LIKE ? || '%'", (prefix,)
        ).fetchone(),
        repeat=args.repeat,
    )
    range_count = timed(
        lambda: conn.execute(
            "SELECT count(*) FROM kv WHERE key >= ? AND key < ?", (prefix, upper)
        ).fetchone(),
        repeat=args.repeat,
    )
    print(
        f"{'gateway LIKE count / range count':<48} like {median(like_count):8.3f}s  "
        f"range {median(range_count):8.3f}s  "
        f"ratio {median(like_count) / median(range_count):5.1f}x  (expected > 10x)"
    )
    keys_only = timed(lambda: list(provider.scan_keys(prefix)), repeat=args.repeat)
    report("kv list sessions: --keys-only (core) vs range", keys_only, ranged, 1.5)

    key = next(iter(provider.scan_keys(prefix)))
    cli = shutil.which("triggerfish-admin") or str(
        Path(sys.executable).parent / "triggerfish-admin"
    )
    utils = shutil.which("sqlite-utils") or str(Path(sys.executable).parent / "sqlite-utils")
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed tool has its bytecode cached
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(Path(kv.__file__).parent)],
        check=True,
        env=env,
    )
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
