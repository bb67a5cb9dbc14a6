"""``PRAGMA integrity_check`` of a SQLite file, in pieces that run on several cores.

SQLite's own check is single-threaded, and on a store it spends most of its
time on one thing: for every row of a table, a seek into each of its indexes
to see that the row's entry is there. ``quick_check`` does everything else
(every b-tree and page, the free list, cell formats, NOT NULL and CHECK
constraints) in a fraction of the time. What it leaves out, checked here in
pieces on their own connections:

- for each plain index of one column (binary collation, not partial) of a
  rowid table: it has as many entries as the table has rows, each entry
  names a row whose column holds the entry's value (checked in key ranges,
  one piece per range), and a unique one has no value twice. With as many
  entries as rows and no entry naming a row twice, that is the same as every
  row having its entry, which is what ``integrity_check`` looks up;
- every other table (an index of several columns or of an expression, a
  partial index, a WITHOUT ROWID table): ``PRAGMA integrity_check(T)``,
  which checks that table and its indexes alone.

Together they are ``PRAGMA integrity_check``; on the 1M-key store 0.9 s on two
cores instead of 1.7 s on one (bench/README.md). Nothing slow runs before the
pieces start: the key ranges are cut where sampled rows fall (:func:`_cuts`),
and the table's row count is one of the pieces.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from triggerfish_cli.errors import (
    FILES_HINT,
    TOO_MANY,
    BackendUnavailableError,
    ResourceError,
    out_of_files,
)
from triggerfish_cli.threads import block_signals

_T = TypeVar("_T")

#: A piece of the check: the problems it found (none: that piece is sound).
Piece = Callable[[], list[str]]

#: Rows above which a table's index check is cut into key ranges.
SPLIT_ROWS = 100_000


def open_checked(path: Path) -> sqlite3.Connection:
    """A connection for a piece: read-only use, through the memory map."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA mmap_size=2147418112")
    return conn


def _name(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


@dataclass(frozen=True)
class _Index:
    table: str
    name: str
    column: str
    unique: bool


def check(path: Path, workers: int, beside: Callable[[], _T]) -> tuple[list[str], _T]:
    """The problems :func:`plan`'s pieces find (none: the file is sound), run on
    ``workers`` threads, and what ``beside`` returns, run on the same pool (other
    checks of the same file). A piece that meets a SQLite error reports it."""
    problems: list[str] = []
    try:
        pieces = plan(path, parts=2 * workers)
    except sqlite3.Error as exc:
        pieces, problems = [], [_problem(path, exc)]
    with ThreadPoolExecutor(workers, "integrity", initializer=block_signals) as pool:
        # ``beside`` first: it is the longest single job (on a store, the FTS5 check
        # and the counts), and started last it ran alone at the end while the
        # other cores waited (longest first is how the pieces are ordered too).
        other = pool.submit(beside)
        found = [pool.submit(_guarded, piece, path) for piece in pieces]
        for future in found:
            problems.extend(future.result())
        return problems, other.result()


def _guarded(piece: Piece, path: Path) -> list[str]:
    try:
        return piece()
    except sqlite3.Error as exc:
        return [_problem(path, exc)]


def _problem(path: Path, exc: sqlite3.Error) -> str:
    """A SQLite error as a problem of the file; raised instead when the file could not
    be opened at all (out of files, or the place): that says nothing of what it holds."""
    if "unable to open" not in str(exc):
        return f"sqlite: {exc}"
    if out_of_files(3):  # the file, its -wal and -shm
        raise ResourceError(f"{path}: cannot open: {TOO_MANY}", hint=FILES_HINT) from exc
    raise BackendUnavailableError(f"{path}: cannot open: {exc}") from exc


def _one(path: Path, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> tuple[Any, ...]:
    """The one row of ``sql`` on a connection of the piece's own."""
    with contextlib.closing(open_checked(path)) as conn:
        return tuple(conn.execute(sql, params).fetchone())


def plan(path: Path, parts: int) -> list[Piece]:
    """The pieces of the integrity check of the SQLite file at ``path``, longest first.

    ``parts``: how many ranges the index check of a big table is cut into
    (the cores that will run them). Reading the schema may raise
    ``sqlite3.Error`` (not a database).
    """
    with contextlib.closing(open_checked(path)) as conn:
        simple, whole = _sort_tables(conn)
        ranges: list[Piece] = []
        others: list[Piece] = [lambda: _pragma(path, "PRAGMA quick_check(20)")]
        for index in simple:
            index_ranges, index_others = _index_pieces(path, conn, index, parts)
            ranges.extend(index_ranges)
            others.extend(index_others)
    others.extend(_table_piece(path, table) for table in whole)
    return ranges + others


def _sort_tables(conn: sqlite3.Connection) -> tuple[list[_Index], list[str]]:
    """Indexes checked here, and the tables left to ``integrity_check(T)``."""
    tables = conn.execute(
        "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    simple: list[_Index] = []
    whole: list[str] = []
    for table, sql in tables:
        if str(sql or "").lstrip().upper().startswith("CREATE VIRTUAL"):
            continue  # its shadow tables are ordinary tables, checked as such
        indexes = _plain_indexes(conn, table)
        if indexes is None:
            whole.append(table)
        else:
            simple.extend(indexes)
    return simple, whole


def _plain_indexes(conn: sqlite3.Connection, table: str) -> list[_Index] | None:
    """The indexes of a rowid ``table`` if each is plain on one column, else None."""
    if not conn.execute(
        "SELECT 1 FROM pragma_table_list WHERE name = ? AND wr = 0", (table,)
    ).fetchone():
        return None  # WITHOUT ROWID
    found: list[_Index] = []
    for _, name, unique, _origin, partial in conn.execute(
        'SELECT seq, name, "unique", origin, partial FROM pragma_index_list(?)', (table,)
    ).fetchall():
        keys = conn.execute(
            "SELECT cid, name, coll FROM pragma_index_xinfo(?) WHERE key = 1", (name,)
        ).fetchall()
        if partial or len(keys) != 1 or keys[0][0] < 0 or str(keys[0][2]).upper() != "BINARY":
            return None
        found.append(_Index(table, name, str(keys[0][1]), bool(unique)))
    return found


def _index_pieces(
    path: Path, conn: sqlite3.Connection, index: _Index, parts: int
) -> tuple[list[Piece], list[Piece]]:
    """The checks of one index: its entries by key range, and the rest."""
    cuts = _cuts(conn, index, parts)
    bounds: list[object] = [None, *cuts, None]
    ranges: list[Piece] = [
        functools.partial(_entries, path, index, low, high)
        for low, high in itertools.pairwise(bounds)
    ]
    others: list[Piece] = [
        lambda: _counts(path, index),
        lambda: _entries(path, index, None, None, nulls=True),
    ]
    if index.unique:
        others.insert(0, lambda: _unique(path, index))
    return ranges, others


#: Rows sampled per range to place the cuts between the key ranges.
SAMPLES_PER_PART = 64


def _cuts(conn: sqlite3.Connection, index: _Index, parts: int) -> list[object]:
    """Values of the column that cut the index into about ``parts`` equal key ranges.

    The values of rows sampled evenly over the rowid span (one b-tree lookup
    each), sorted as the index sorts them, taken at their quantiles: any cuts
    give a complete check, even ones make the pieces take equal time. (Exact
    ones, by ``OFFSET`` into the index, walked half of it before any piece
    began: 0.15 s on the 1M-key store.)
    """
    table, column = _name(index.table), _name(index.column)
    low, high = conn.execute(  # apart: together, min and max scan the table
        f"SELECT (SELECT min(rowid) FROM {table}), (SELECT max(rowid) FROM {table})"
    ).fetchone()
    if low is None or high - low < SPLIT_ROWS or parts < 2:
        return []  # the span bounds the rows from above: a small table is one piece
    samples = SAMPLES_PER_PART * parts
    values = [
        row[0]
        for row in conn.execute(
            "WITH RECURSIVE s(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s WHERE k + 1 < :n) "
            f"SELECT (SELECT {column} FROM {table} WHERE rowid >= :low + (:span * k) / :n "
            "ORDER BY rowid LIMIT 1) AS v FROM s WHERE v IS NOT NULL ORDER BY v COLLATE BINARY",
            {"n": samples, "low": low, "span": high - low},
        )
    ]
    cuts: list[object] = []
    for part in range(1, parts):
        if not values:
            break
        value = values[len(values) * part // parts]
        if not cuts or value != cuts[-1]:
            cuts.append(value)
    return cuts


def _entries(
    path: Path, index: _Index, low: object, high: object, *, nulls: bool = False
) -> list[str]:
    """Index entries (of a key range) that name no row, or a row with another value."""
    table, name, column = _name(index.table), _name(index.name), _name(index.column)
    where, params = [f"i.{column} IS NULL"] if nulls else [], []
    if low is not None:
        where.append(f"i.{column} >= ? COLLATE BINARY")
        params.append(low)
    if high is not None:
        where.append(f"i.{column} < ? COLLATE BINARY")
        params.append(high)
    if not where:
        where.append(f"i.{column} IS NOT NULL")
    query = (
        f"SELECT count(*), min(i.rowid) FROM {table} AS i INDEXED BY {name} "
        f"LEFT JOIN {table} AS t NOT INDEXED ON t.rowid = i.rowid "
        f"WHERE {' AND '.join(where)} AND (t.rowid IS NULL OR t.{column} IS NOT i.{column})"
    )
    bad, first = _one(path, query, params)
    if not bad:
        return []
    return [f"{bad} entries of index {index.name} do not match their rows (the first: row {first})"]


def _counts(path: Path, index: _Index) -> list[str]:
    """As many entries in the index as rows in its table."""
    table, name = _name(index.table), _name(index.name)
    rows, entries = _one(
        path,
        f"SELECT (SELECT count(*) FROM {table} NOT INDEXED), "
        f"(SELECT count(*) FROM {table} INDEXED BY {name})",
    )
    if int(entries) == int(rows):
        return []
    return [f"index {index.name} has {entries} entries for the {rows} rows of {index.table}"]


def _unique(path: Path, index: _Index) -> list[str]:
    """No value twice in a unique index (NULLs may repeat): its entries that are not
    NULL, less its distinct values. The distinct values are counted walking the
    index in order (equal values are neighbours: no temporary b-tree), the
    entries by counting its cells: 0.27 s on the 1M-key store, where
    ``count(col) - count(DISTINCT col)`` took 0.73 s (it sorts into a b-tree)."""
    table, name, column = _name(index.table), _name(index.name), _name(index.column)
    distinct = (
        f"SELECT (SELECT count(*) FROM {table} INDEXED BY {name})"
        f" - (SELECT count(*) FROM {table} INDEXED BY {name} WHERE {column} IS NULL)"
        f" - (SELECT count(*) FROM (SELECT DISTINCT {column} FROM {table} INDEXED BY {name}"
        f" WHERE {column} IS NOT NULL))"
    )
    twice = int(_one(path, distinct)[0])
    if not twice:
        return []
    return [f"unique index {index.name} holds {twice} value(s) more than once"]


def _table_piece(path: Path, table: str) -> Piece:
    return lambda: _pragma(path, f"PRAGMA integrity_check({_name(table)})")


def _pragma(path: Path, pragma: str) -> list[str]:
    with contextlib.closing(open_checked(path)) as conn:
        rows = [str(row[0]) for row in conn.execute(pragma)]
    return [] if rows == ["ok"] else rows


def check_copy(
    path: Path,
    page_count: int | None,
    count: Callable[[sqlite3.Connection], _T],
    workers: int,
    checks: list[str],
    failures: list[str],
) -> _T | None:
    """Check a physical copy of a store (a backup's snapshot): the integrity check in
    pieces on ``workers`` threads and, beside it, its page count against
    ``page_count``, its kv table, the FTS5 check of memory_fts, then ``count(conn)``.

    What passed goes to ``checks``, what failed to ``failures``; ``count``'s result,
    or None when the copy is not sound (or not a store)."""
    problems, counts = check(
        path, workers, lambda: _check_rest(path, page_count, count, checks, failures)
    )
    if problems:
        failures.insert(0, "integrity check: " + "; ".join(problems[:5]))
        return None
    checks.insert(0, "SQLite integrity check: ok")
    return counts


def _check_rest(
    path: Path,
    page_count: int | None,
    count: Callable[[sqlite3.Connection], _T],
    checks: list[str],
    failures: list[str],
) -> _T | None:
    try:
        with contextlib.closing(open_checked(path)) as conn:
            pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
            if page_count is not None and pages != page_count:
                failures.append(f"page count: {pages}, the manifest says {page_count}")
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            if "kv" not in tables:
                failures.append("schema: no kv table: not a Triggerfish store")
                return None
            if "memory_fts" in tables:
                try:
                    conn.execute("INSERT INTO memory_fts(memory_fts) VALUES('integrity-check')")
                    checks.append("memory_fts integrity-check: ok")
                except sqlite3.Error as exc:
                    failures.append(f"memory_fts integrity-check: {exc}")
            return count(conn)
    except sqlite3.Error as exc:
        failures.append(_problem(path, exc))
        return None
