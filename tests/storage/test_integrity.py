"""storage/sqlite/integrity.py: integrity check in pieces finds what the whole check finds."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest

from triggerfish_cli.storage.sqlite import integrity


def _problems(db: Path, parts: int = 4) -> list[str]:
    return [problem for piece in integrity.plan(db, parts) for problem in piece()]


def _whole(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def _store(db: Path, rows: int = 3000) -> None:
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE memory_meta (agent_id TEXT NOT NULL, classification TEXT NOT NULL,"
        " key TEXT NOT NULL, record_json TEXT NOT NULL,"
        " PRIMARY KEY (agent_id, classification, key));"
        "CREATE TABLE notes (body TEXT);"
        "CREATE INDEX notes_lower ON notes (lower(body));"
    )
    conn.executemany(
        "INSERT INTO kv VALUES (?, ?)", ((f"conv:{n:06d}", f'{{"n":{n}}}') for n in range(rows))
    )
    conn.executemany(
        "INSERT INTO memory_meta VALUES ('main-session', 'PUBLIC', ?, '{}')",
        ((f"mem{n:05d}",) for n in range(500)),
    )
    conn.executemany("INSERT INTO notes VALUES (?)", ((f"Note{n:04d}",) for n in range(300)))
    conn.commit()
    conn.close()


def _edit_index_page(db: Path, index: str, old: bytes, new: bytes) -> None:
    """Rewrite bytes inside the pages of ``index`` alone (its entries, not its table's rows)."""
    conn = sqlite3.connect(db)
    pages = [
        int(row[0])
        for row in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (index,)
        )
    ]
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.close()
    data = bytearray(db.read_bytes())
    for page in pages:
        start = (page - 1) * page_size
        at = data.find(old, start, start + page_size)
        if at >= 0:
            data[at : at + len(old)] = new
            db.write_bytes(bytes(data))
            return
    raise AssertionError(f"{old!r} not in the leaf pages of {index}")


@pytest.mark.parametrize("parts", [1, 2, 4])
def test_a_sound_store_passes_in_any_number_of_pieces(tmp_path: Path, parts: int) -> None:
    db = tmp_path / "s.db"
    _store(db, rows=integrity.SPLIT_ROWS + 500)  # big enough to be cut into key ranges
    pieces = integrity.plan(db, parts)
    assert _problems(db, parts) == [] and _whole(db) == ["ok"]
    # kv's index is cut into `parts` ranges (plus its other checks)
    assert len(pieces) >= parts + 1


def test_an_index_entry_that_names_another_value_is_found(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _store(db)
    _edit_index_page(db, "sqlite_autoindex_kv_1", b"conv:001234", b"conv:001235")
    assert _whole(db) != ["ok"]  # SQLite's own check sees it too
    problems = _problems(db)
    assert problems and any("sqlite_autoindex_kv_1" in problem for problem in problems)


def test_a_damaged_row_behind_its_index_entry_is_found(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _store(db)
    _edit_index_page(db, "kv", b"conv:000777", b"conv:000778")
    assert _whole(db) != ["ok"]
    assert any("do not match their rows" in problem for problem in _problems(db))


def test_a_unique_index_holding_a_value_twice_is_found(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE t (a TEXT); CREATE INDEX t_a ON t (a);"
        "INSERT INTO t VALUES (NULL), ('x'), ('y'), (NULL), ('x');"
        "PRAGMA writable_schema = ON;"
        "UPDATE sqlite_schema SET sql = 'CREATE UNIQUE INDEX t_a ON t (a)' WHERE name = 't_a';"
    )
    conn.commit()
    conn.close()
    assert _whole(db) != ["ok"]
    assert any("holds 1 value(s) more than once" in problem for problem in _problems(db))


def test_a_unique_index_may_hold_null_more_than_once(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE t (a TEXT UNIQUE);"
        "INSERT INTO t VALUES (NULL), ('x'), (NULL), ('y'), (NULL);"
    )
    conn.commit()
    conn.close()
    assert _whole(db) == ["ok"] and _problems(db) == []


def test_tables_with_other_indexes_are_left_to_sqlites_check_of_that_table(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    _store(db)
    # memory_meta's key has three columns, notes' index an expression: integrity_check(T)
    _edit_index_page(db, "sqlite_autoindex_memory_meta_1", b"mem00042", b"mem00043")
    _edit_index_page(db, "notes_lower", b"note0042", b"note0043")
    problems = _problems(db)
    assert any("memory_meta" in problem for problem in problems)
    assert any("notes_lower" in problem for problem in problems)


def test_a_file_that_is_not_a_database_raises(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    db.write_bytes(b"not a database at all" * 1000)
    with pytest.raises(sqlite3.DatabaseError):
        integrity.plan(db, 2)


def test_the_key_ranges_are_cut_near_even_whatever_order_rows_were_written_in(
    tmp_path: Path,
) -> None:
    """Cuts come from rows sampled over the rowid span (no walk of the index):
    increasing in the index's order, and no range far from an even share."""
    db = tmp_path / "order.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    rows = integrity.SPLIT_ROWS + 20_000
    # written in blocks whose keys jump about (as sessions' messages are), not in key order
    order = [(block * 7919) % 120 for block in range(120)]
    conn.executemany(
        "INSERT INTO kv VALUES (?, '')",
        ((f"k{block:03d}:{n:05d}",) for block in order for n in range(rows // 120)),
    )
    conn.commit()
    index = integrity._Index("kv", "sqlite_autoindex_kv_1", "key", True)
    cuts = integrity._cuts(conn, index, 4)
    assert len(cuts) == 3 and cuts == sorted(cuts)
    bounds = [None, *cuts, None]
    shares = [
        conn.execute(
            "SELECT count(*) FROM kv WHERE (? IS NULL OR key >= ?) AND (? IS NULL OR key < ?)",
            (low, low, high, high),
        ).fetchone()[0]
        for low, high in itertools.pairwise(bounds)
    ]
    conn.close()
    assert sum(shares) == rows // 120 * 120
    assert all(share > rows / 4 * 0.6 for share in shares), shares
    assert _problems(db) == []
