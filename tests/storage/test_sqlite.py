"""SQLite on the gateway's own file: open rules, schema, locking, exact prefixes."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.gateway import GATEWAY_ROWS, KV_SQL, dump_tables, write_gateway_store
from triggerfish_cli.errors import (
    BackendUnavailableError,
    BusyError,
    InvalidDataError,
)
from triggerfish_cli.storage.provider import uncovered_ranges
from triggerfish_cli.storage.sqlite.backend import SqliteStorage


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_works_on_a_gateway_store_without_altering_kv(tmp_path: Path) -> None:
    db = write_gateway_store(tmp_path / "triggerfish.db")
    before_sql = (
        sqlite3.connect(db).execute("SELECT sql FROM sqlite_master WHERE name = 'kv'").fetchone()[0]
    )
    store = SqliteStorage(db)
    assert store.get("prefs:owner:bumpers_default") == "true"
    store.set("k", "v")
    store.delete("k")
    assert store.list() == sorted(GATEWAY_ROWS)
    store.close()
    conn = sqlite3.connect(db)
    assert (
        conn.execute("SELECT sql FROM sqlite_master WHERE name = 'kv'").fetchone()[0] == before_sql
    )
    assert [r[1] for r in conn.execute("PRAGMA table_info(kv)")] == ["key", "value"]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_sets_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "new.db", create=True, busy_timeout_ms=1234)
    assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.connection.execute("PRAGMA busy_timeout").fetchone()[0] == 1234
    sql = store.connection.execute("SELECT sql FROM sqlite_master WHERE name='kv'").fetchone()[0]
    assert sql == KV_SQL.replace("IF NOT EXISTS ", "")


def test_a_second_open_of_the_store_in_our_process_keeps_the_first_ones_locks(
    tmp_path: Path,
) -> None:
    """Opening the store again (a sweep reads on a connection of its own) must not drop
    the POSIX locks the open connection holds: closing any descriptor of the file would.
    Without its SHARED lock, another process closing its connection (the gateway's CLI)
    takes itself for the last one and deletes the WAL we go on writing into: our commits
    vanish from every other process's view."""
    db = write_gateway_store(tmp_path / "s.db")
    first = SqliteStorage(db)
    first.set("before", "1")
    second = SqliteStorage(db, read_only=True)
    assert second.get("before") == "1"
    second.close()
    look = (
        "import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1])\n"
        "print(c.execute(\"SELECT value FROM kv WHERE key = 'after'\").fetchone())\n"
        "c.close()\n"
    )
    # another process's connection, opened and closed (the gateway's `cron list`)
    subprocess.run([sys.executable, "-c", look, str(db)], check=True)
    assert Path(f"{db}-wal").exists()  # it did not take itself for the last connection
    first.set("after", "2")
    seen = subprocess.run(
        [sys.executable, "-c", look, str(db)], check=True, capture_output=True, text=True
    )
    assert seen.stdout.strip() == "('2',)"
    first.close()


def test_missing_file_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "x.db"
    with pytest.raises(BackendUnavailableError) as info:
        SqliteStorage(path)
    assert info.value.exit_code == 7
    assert not path.exists() and not path.parent.exists()


def test_not_a_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a database\n" * 10)
    before = digest(path)
    with pytest.raises(InvalidDataError) as info:
        SqliteStorage(path)
    assert info.value.exit_code == 8
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_other_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('x')")
    conn.commit()
    conn.close()
    before = digest(path)
    with pytest.raises(InvalidDataError, match="without a kv table"):
        SqliteStorage(path, create=True)
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_kv_table_with_other_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "odd.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE kv (k TEXT, v TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(InvalidDataError, match="not a Triggerfish store"):
        SqliteStorage(path)


def test_an_empty_file_is_no_store_until_one_is_made(tmp_path: Path) -> None:
    from triggerfish_cli.errors import MissingStoreError

    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(MissingStoreError, match="an empty file"):
        SqliteStorage(path)
    assert path.stat().st_size == 0  # opening wrote nothing
    store = SqliteStorage(path, create=True)
    store.set("a", "b")
    assert store.get("a") == "b"


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match="directory"):
        SqliteStorage(tmp_path)


def test_locked_database_is_busy_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    SqliteStorage(path, create=True).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO kv VALUES ('held', 'x')")
    store = SqliteStorage(path, busy_timeout_ms=50)
    with pytest.raises(BusyError) as info:
        store.set("a", "b")
    assert info.value.exit_code == 6
    with pytest.raises(BusyError):
        store.delete_many(["held"])
    assert store.get("held") is None  # WAL: readers are not blocked
    holder.execute("COMMIT")
    store.set("a", "b")
    assert store.get("held") == "x"


def test_transaction_rolls_back_on_interrupt(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "t.db", create=True)
    store.set("keep", "1")
    with pytest.raises(KeyboardInterrupt), store.transaction() as conn:
        conn.execute("DELETE FROM kv")
        raise KeyboardInterrupt
    assert store.list() == ["keep"]
    assert not store.connection.in_transaction


def test_set_many_is_all_or_nothing(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "t.db", create=True)

    def items():  # type: ignore[no-untyped-def]
        yield ("a", "1")
        yield ("b", None)  # NOT NULL violation half-way

    with pytest.raises(Exception):  # noqa: B017 - any failure must roll back
        store.set_many(items())
    assert store.list() == []


def test_clear_also_empties_the_memory_index(tmp_path: Path) -> None:
    db = write_gateway_store(tmp_path / "g.db")
    store = SqliteStorage(db)
    store.clear()
    tables = dump_tables(db)
    assert tables["kv"] == [] and tables["memory_meta"] == []
    count = sqlite3.connect(db).execute("SELECT count(*) FROM memory_fts").fetchone()[0]
    assert count == 0


def test_range_queries_fix_the_gateways_like_listing(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "t.db", create=True)
    for key in ["a_b", "aXb", "AXB", "a%c", "abc"]:
        store.set(key, "v")
    gateway = [
        r[0]
        for r in store.connection.execute(
            "SELECT key FROM kv WHERE key LIKE ? || '%' ORDER BY key", ("a_",)
        )
    ]
    assert set(gateway) == {"a_b", "aXb", "AXB", "a%c", "abc"}  # wildcards, any case
    assert store.list("a_") == ["a_b"]
    plan = " ".join(
        str(r)
        for r in store.connection.execute(
            "EXPLAIN QUERY PLAN SELECT key FROM kv WHERE key >= ? AND key < ?", ("a", "b")
        )
    )
    assert "USING" in plan and "INDEX" in plan  # a range scan on the primary key


@pytest.mark.parametrize(
    ("prefixes", "gaps"),
    [
        ([], [(None, None)]),
        (["b:"], [(None, "b:"), ("b;", None)]),
        (["b:", "a:"], [(None, "a:"), ("a;", "b:"), ("b;", None)]),
        (["a:", "a:x:"], [(None, "a:"), ("a;", None)]),
        (["a", "ab"], [(None, "a"), ("b", None)]),
    ],
)
def test_gaps_between_prefix_ranges(prefixes: list[str], gaps: list[tuple[str, str]]) -> None:
    assert uncovered_ranges(prefixes) == gaps


def test_scan_many_is_one_snapshot_that_never_blocks_a_writer(tmp_path: Path) -> None:
    db = tmp_path / "snap.db"
    store = SqliteStorage(db, create=True)
    store.set_many((f"conv:s:{i:04d}", "old") for i in range(100))
    writer = sqlite3.connect(db, timeout=0, isolation_level=None)  # no busy timeout
    stream = store.scan_many(["conv:"], batch_size=10)
    first = [next(stream) for _ in range(10)]
    writer.execute("INSERT OR REPLACE INTO kv VALUES ('conv:s:0099', 'new')")  # not blocked
    writer.execute("INSERT INTO kv VALUES ('conv:s:0100', 'new')")
    rest = list(stream)
    seen = dict(first + rest)
    assert len(seen) == 100 and set(seen.values()) == {"old"}  # the snapshot
    assert store.get("conv:s:0099") == "new" and store.count("conv:") == 101
    writer.close()
    store.close()


def test_any_keys_probes_use_the_index_range(tmp_path: Path) -> None:
    """Each probe is bounded on both sides: a miss must not scan to the end of the index."""
    store = SqliteStorage(tmp_path / "probe.db", create=True)
    store.set_many((f"conv:{i:05d}:000000000001", "{}") for i in range(2000))
    statements: list[str] = []
    store.connection.set_trace_callback(statements.append)
    assert store.any_keys([("conv:00010:", "conv:00010:000000000001"), ("conv:x:", None)]) == [
        False,
        False,
    ]
    store.connection.set_trace_callback(None)
    (probe,) = [sql for sql in statements if "probe" in sql]
    plan = store.connection.execute("EXPLAIN QUERY PLAN " + probe).fetchall()
    assert any("key>? AND key<?" in row[-1] for row in plan), plan
    store.close()


def test_a_listing_of_every_value_reads_unmapped_and_maps_again_after(tmp_path: Path) -> None:
    """kv list/export read through the page cache (a flat resident set), then the map is back."""
    from triggerfish_cli.kv import transfer
    from triggerfish_cli.storage.sqlite.sql import MMAP_SIZE

    db = tmp_path / "s.db"
    write_gateway_store(db, {"a": '"1"', "b": '"2"'})
    store = SqliteStorage(db)
    mapped = store.connection.execute("PRAGMA mmap_size").fetchone()[0]
    assert mapped == MMAP_SIZE
    with transfer.flat_memory(store):
        assert store.connection.execute("PRAGMA mmap_size").fetchone()[0] == 0
        assert list(store.scan()) == [("a", '"1"'), ("b", '"2"')]
    assert store.connection.execute("PRAGMA mmap_size").fetchone()[0] == MMAP_SIZE
    store.close()


def test_scan_many_meets_a_cell_that_is_not_utf8_and_stops_early(tmp_path: Path) -> None:
    """The decoder switch mid-scan gives every row once; an early stop ends the
    snapshot and leaves the connection usable."""
    db = tmp_path / "odd.db"
    store = SqliteStorage(db, create=True)
    store.set_many((f"conv:s:{i:04d}", "ok") for i in range(100))
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("UPDATE kv SET value = CAST(x'ff00fe' AS TEXT) WHERE key = 'conv:s:0055'")
    raw.close()
    seen = dict(store.scan_many(["conv:"], batch_size=10))
    assert len(seen) == 100 and seen["conv:s:0055"] == store.get("conv:s:0055") != "ok"
    assert {value for key, value in seen.items() if key != "conv:s:0055"} == {"ok"}
    stream = store.scan_many(["conv:"], batch_size=10)
    assert next(stream)[1] in {"ok", seen["conv:s:0055"]}
    stream.close()
    assert not store.connection.in_transaction
    store.set("conv:s:0000", "new")
    assert store.get("conv:s:0000") == "new"
    store.close()
