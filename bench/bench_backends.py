"""Issue #7: `migrate` SQLite -> Postgres against psql's \\copy; `kv namespaces` on Postgres.

    python bench/bench_backends.py [--records 1000000] [--repeat 3] [--runs 5]

Needs PostgreSQL (``$TFBENCH_PG_DSN``, default postgresql://postgres@127.0.0.1:5432/test)
and ``psql``. Works in two schemas of its own, dropped at the end.

1. `triggerfish-admin migrate --from store.db --to postgresql://...` as a
   whole process (copy and verification) against loading the same rows with
   ``psql -c "\\copy kv FROM rows.csv"`` into the same table definition (the
   rows are exported to a CSV file first, untimed), alternated run by run,
   each into a fresh schema. Target: throughput >= 0.5x.
2. `triggerfish-admin kv namespaces` on the migrated store as a whole
   process against ``psql`` running the same range-count queries (count and
   sum(octet_length(value)) per namespace prefix, and the first-segment
   groups between them). Target: <= 2x. The same comparison in one process
   (the core API against the bare queries through psycopg) is printed too.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA, median, p95, report, store, timed

from triggerfish_cli import namespaces
from triggerfish_cli.storage.postgres.backend import PostgresStorage
from triggerfish_cli.storage.provider import prefix_upper_bound, uncovered_ranges

DSN = os.environ.get("TFBENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
TOOL = [sys.executable, "-m", "triggerfish_cli"]


def psql(*args: str, stdin: str | None = None) -> None:
    subprocess.run(
        ["psql", DSN, "-v", "ON_ERROR_STOP=1", "-q", *args],
        check=True,
        input=stdin,
        text=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PGOPTIONS": "-c client_min_messages=warning"},
    )


def export_csv(db: Path) -> Path:
    """The store's rows as CSV, once (cached beside the store)."""
    import sqlite3

    path = DATA / (db.stem + ".csv")
    if not path.exists():
        temp = path.with_suffix(".part")
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        with temp.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            for row in conn.execute("SELECT key, value FROM kv ORDER BY key"):
                writer.writerow(row)
        temp.rename(path)
    return path


def fresh_schema(name: str, *, table: bool) -> None:
    """Drop (and recreate) a schema, then CHECKPOINT: each timed run starts without
    the previous run's dirty pages and WAL to flush (needs a superuser; skipped if not)."""
    sql = f'DROP SCHEMA IF EXISTS "{name}" CASCADE;'
    if table:
        sql += (
            f'CREATE SCHEMA "{name}"; CREATE TABLE "{name}".kv '
            '(key text COLLATE "C" PRIMARY KEY, value text NOT NULL);'
        )
    psql("-c", sql)
    with contextlib.suppress(subprocess.CalledProcessError):
        psql("-c", "CHECKPOINT")


def time_copy(rows: Path, schema: str) -> float:
    fresh_schema(schema, table=True)
    started = time.perf_counter()
    psql("-c", f"\\copy \"{schema}\".kv FROM '{rows}' WITH (FORMAT csv)")
    return time.perf_counter() - started


def time_migrate(db: Path, schema: str) -> tuple[float, dict[str, object]]:
    fresh_schema(schema, table=False)
    env = {**os.environ, "TRIGGERFISH_DATA_DIR": str(DATA / "bench-home")}
    started = time.perf_counter()
    done = subprocess.run(
        [*TOOL, "migrate", "--from", str(db), "--to", f"{DSN}?schema={schema}", "-f", "json"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    elapsed = time.perf_counter() - started
    result = json.loads(done.stdout)
    assert result["verified"], result
    return elapsed, result


def range_sql(schema: str) -> str:
    """The raw equivalent of `kv namespaces`: one range count per prefix, then the gaps."""

    def lit(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    table = f'"{schema}".kv'
    lines = []
    for prefix in namespaces.PREFIXES:
        upper = prefix_upper_bound(prefix)
        lines.append(
            f"SELECT count(*), coalesce(sum(octet_length(value)), 0) FROM {table} "
            f"WHERE key >= {lit(prefix)} AND key < {lit(upper or '')};"
        )
    for low, high in uncovered_ranges(namespaces.PREFIXES):
        bounds = []
        if low is not None:
            bounds.append(f"key >= {lit(low)}")
        if high is not None:
            bounds.append(f"key < {lit(high)}")
        where = " AND ".join(bounds)
        lines.append(
            "SELECT CASE WHEN strpos(key, ':') > 0 THEN left(key, strpos(key, ':')) ELSE '' END "
            f"AS grp, count(*), coalesce(sum(octet_length(value)), 0) FROM {table} "
            f"WHERE {where or 'TRUE'} GROUP BY grp;"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    db = store(args.records)
    rows = export_csv(db)
    print(f"# store {db.name}: {args.records} keys, {db.stat().st_size / 2**20:.0f} MiB")
    tag = f"tfbench_{os.getpid()}"
    raw_schema, our_schema = f"{tag}_copy", f"{tag}_migrate"
    try:
        copies, migrations, copy_phases, verify_phases = [], [], [], []
        for _ in range(args.repeat):  # alternated, so load changes hit both alike
            copies.append(time_copy(rows, raw_schema))
            elapsed, result = time_migrate(db, our_schema)
            migrations.append(elapsed)
            copy_phases.append(float(result["copy_seconds"]))  # type: ignore[arg-type]
            verify_phases.append(float(result["seconds"]) - copy_phases[-1])  # type: ignore[arg-type]
        keys = args.records / 1000
        print(
            f"# \\copy  median {median(copies):.2f} s  p95 {p95(copies):.2f} s; "
            f"migrate median {median(migrations):.2f} s  p95 {p95(migrations):.2f} s "
            f"(copy phase {median(copy_phases):.2f} s, verification {median(verify_phases):.2f} s)"
        )
        ok = report(
            "migrate sqlite->postgres throughput vs \\copy",
            [keys / t for t in migrations],
            [keys / t for t in copies],
            0.5,
            lower_is_better=False,
            unit="k/s",
        )
        report(
            "  (copy phase alone, for reference)",
            [keys / t for t in copy_phases],
            [keys / t for t in copies],
            0.5,
            lower_is_better=False,
            unit="k/s",
        )
        psql("-c", f'ANALYZE "{our_schema}".kv')
        config = DATA / f"{tag}.yaml"
        config.write_text(
            f"storage:\n  backend: postgres\n  dsn: {json.dumps(DSN)}\n  schema: {our_schema}\n"
        )
        sql = range_sql(our_schema)
        ours_cli: list[float] = []
        raw_cli: list[float] = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run(
                [*TOOL, "--config", str(config), "kv", "namespaces", "-f", "json"],
                check=True,
                capture_output=True,
            )
            ours_cli.append(time.perf_counter() - started)
            started = time.perf_counter()
            psql(stdin=sql)
            raw_cli.append(time.perf_counter() - started)
        config.unlink()
        ok &= report("kv namespaces on postgres (process) vs psql", ours_cli, raw_cli, 2.0)
        provider = PostgresStorage(DSN, schema=our_schema)
        conn = provider.connection
        statements = sql.splitlines()
        ours = timed(lambda: keys.namespace_report(provider), repeat=args.runs)
        raw = timed(lambda: [conn.execute(s).fetchall() for s in statements], repeat=args.runs)
        provider.close()
        report("kv namespaces on postgres (core) vs raw queries", ours, raw, 2.0)
        print("# all targets met" if ok else "# some target MISSED")
    finally:
        for schema in (raw_schema, our_schema):
            fresh_schema(schema, table=False)


if __name__ == "__main__":
    main()
