"""Memory search and reindex on 200,000 memories of ~175 words (issue #3).

Targets:

- p95 of ``memory.search`` through the core API (plain words, LIMIT 10) at
  most 3x the p95 of the bare FTS5 query with the same MATCH and LIMIT
  (``SELECT ... FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rank
  LIMIT 10``), for 1-, 2- and 3-word queries;
- ``memory reindex`` of every level from empty index tables within 2x of
  building memory_fts with one ``INSERT ... SELECT`` from kv.

Queries are words taken from random stored memories, so every query matches
at least one record and common words come up as often as they occur.

    python bench/bench_memory.py [--queries 60] [--skip-reindex] [--memories N]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import time

from common import median, p95, scratch_copy, store

MEMORIES = 200_000
WORDS = 175


def build(memories: int = MEMORIES) -> object:
    return store(
        memories * 2,
        name=f"memory-{memories}-{WORDS}.db",
        memories=memories,
        memory_words=WORDS,
    )


def sample_queries(
    conn: sqlite3.Connection, words: int, count: int, rng: random.Random
) -> list[str]:
    top = conn.execute("SELECT max(rowid) FROM memory_fts").fetchone()[0]
    queries: list[str] = []
    while len(queries) < count:
        row = conn.execute(
            "SELECT content FROM memory_fts WHERE rowid >= ? LIMIT 1", (rng.randint(1, top),)
        ).fetchone()
        if row is None:
            continue
        tokens = [t.strip(".,").lower() for t in row[0].split()]
        start = rng.randrange(0, max(1, len(tokens) - 30))
        queries.append(" ".join(rng.sample(tokens[start : start + 30], words)))
    return queries


def bench_search(path: object, count: int) -> None:
    from triggerfish_cli import memory
    from triggerfish_cli.classification import Level
    from triggerfish_cli.memory_index import fts_query
    from triggerfish_cli.storage.sqlite import SqliteStorage

    provider = SqliteStorage(path)  # type: ignore[arg-type]
    conn = provider.connection
    rng = random.Random(3)
    bare_sql = (
        "SELECT agent_id, classification, key, rank FROM memory_fts "
        "WHERE memory_fts MATCH ? ORDER BY rank LIMIT 10"
    )
    print(f"search, {count} queries per size, LIMIT 10 (times in ms)")
    for taint in (Level.PUBLIC, Level.RESTRICTED):
        for words in (1, 2, 3):
            queries = sample_queries(conn, words, count, rng)
            ours: list[float] = []
            bare: list[float] = []
            hits = 0
            for query in queries:
                match = fts_query(query, raw=False)
                conn.execute(bare_sql, (match,)).fetchall()  # warm the pages both use
                for _ in range(2):
                    started = time.perf_counter()
                    conn.execute(bare_sql, (match,)).fetchall()
                    bare.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    result = memory.search(provider, query, taint=taint, agent=None, limit=10)
                    ours.append(time.perf_counter() - started)
                hits += len(result.hits)
            ratio = p95(ours) / p95(bare)
            print(
                f"  {taint.name:<10} {words}-word  bare p50 {median(bare) * 1e3:7.2f} "
                f"p95 {p95(bare) * 1e3:7.2f} | ours p50 {median(ours) * 1e3:7.2f} "
                f"p95 {p95(ours) * 1e3:7.2f} | p95 ratio {ratio:4.2f}x (target <= 3x) "
                f"{'OK' if ratio <= 3 else 'MISSED'}  avg hits {hits / len(queries):.1f}"
            )
    provider.close()


EMPTY_INDEX = (
    "DROP TABLE memory_fts",
    "DROP TABLE memory_meta",
)


def bench_reindex(path: object) -> None:
    from triggerfish_cli import memory_upkeep
    from triggerfish_cli.classification import Level
    from triggerfish_cli.demo import MEMORY_FTS_SQL, MEMORY_META_SQL
    from triggerfish_cli.storage.sqlite import SqliteStorage

    copy = scratch_copy(path, "memory-reindex-scratch.db")  # type: ignore[arg-type]
    raw = sqlite3.connect(copy, isolation_level=None)
    for statement in (*EMPTY_INDEX, MEMORY_FTS_SQL, MEMORY_META_SQL):
        raw.execute(statement)
    started = time.perf_counter()
    raw.execute("BEGIN")
    raw.execute(
        "INSERT INTO memory_fts (agent_id, classification, key, content, tags) "
        "SELECT json_extract(value, '$.agentId'), json_extract(value, '$.classification'), "
        "json_extract(value, '$.key'), json_extract(value, '$.content'), "
        "(SELECT group_concat(j.value, ' ') FROM json_each(kv.value, '$.tags') AS j) "
        "FROM kv WHERE key >= 'memory:' AND key < 'memory;' "
        "AND json_extract(value, '$.expired') = 0"
    )
    raw.execute("COMMIT")
    limit = time.perf_counter() - started
    built = raw.execute("SELECT count(*) FROM memory_fts").fetchone()[0]
    for statement in (*EMPTY_INDEX, MEMORY_FTS_SQL, MEMORY_META_SQL):
        raw.execute(statement)
    raw.close()

    provider = SqliteStorage(copy)
    started = time.perf_counter()
    drift = memory_upkeep.reindex(provider, taint=Level.RESTRICTED)
    ours = time.perf_counter() - started
    provider.close()
    ratio = ours / limit
    print(
        f"reindex of {drift.records} live memories from empty tables: ours {ours:6.1f} s "
        f"(both tables, {drift.fixed} fixed) | INSERT ... SELECT into memory_fts "
        f"{limit:6.1f} s ({built} rows) | ratio {ratio:4.2f}x (target <= 2x) "
        f"{'OK' if ratio <= 2 else 'MISSED'}"
    )
    for suffix in ("", "-wal", "-shm"):
        (copy.parent / (copy.name + suffix)).unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--skip-reindex", action="store_true")
    parser.add_argument("--memories", type=int, default=MEMORIES, help="in a store twice as big")
    args = parser.parse_args()
    path = build(args.memories)
    bench_search(path, args.queries)
    if not args.skip_reindex:
        bench_reindex(path)


if __name__ == "__main__":
    main()
