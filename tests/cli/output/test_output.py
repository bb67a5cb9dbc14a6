"""The table renderer: streaming, fitting a terminal, plain when piped, escaped cells."""

from __future__ import annotations

import io
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn
from triggerfish_cli.cli.output import Output
from triggerfish_cli.cli.output.table import FIRST_PAGE
from triggerfish_cli.cli.output.text import (
    Column,
    TableOptions,
    csv_cell,
    display_width,
    safe,
    text_column,
)
from triggerfish_cli.errors import UsageError


class Terminal(io.StringIO):
    """A stdout that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def table(
    rows: Any,
    columns: list[Column],
    *,
    width: int | None = None,
    options: TableOptions | None = None,
    footer: dict[str, Any] | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
    stderr: io.StringIO | None = None,
    gives_way: tuple[str, ...] = (),
) -> str:
    stream: io.StringIO = Terminal() if width else io.StringIO()
    if width:
        assert monkeypatch is not None
        monkeypatch.setenv("COLUMNS", str(width))
    out = Output("table", color=False, table=options, stdout=stream, stderr=stderr)
    out.rows(rows, columns, footer=footer, gives_way=gives_way)
    return stream.getvalue()


COLUMNS = [
    Column("key", "key"),
    Column("bytes", "bytes", "right"),
    Column("level", "level"),
    text_column("note", "note"),
]


def rows(
    count: int, note: str = "a long free text note that goes on and on"
) -> list[dict[str, Any]]:
    return [
        {"key": f"sessions:{n:08d}-aaaa-bbbb", "bytes": n * 7, "level": "INTERNAL", "note": note}
        for n in range(count)
    ]


def test_piped_table_is_plain() -> None:
    text = table(rows(5), COLUMNS)
    lines = text.splitlines()
    assert lines[0].split() == ["key", "bytes", "level", "note"]
    assert len(lines) == 6 and text.endswith("\n")
    for line in lines:
        assert line and line == line.rstrip(" ") and "─" not in line
    # aligned: every row's level starts where the header's does
    start = lines[0].index("level")
    assert all(line[start : start + 8] == "INTERNAL" for line in lines[1:])
    assert all(line.endswith("goes on and on") for line in lines[1:])  # nothing cut off a TTY


def test_no_headers_and_columns() -> None:
    text = table(rows(2), COLUMNS, options=TableOptions(("level", "key"), headers=False))
    assert text.splitlines() == [
        "INTERNAL  sessions:00000000-aaaa-bbbb",
        "INTERNAL  sessions:00000001-aaaa-bbbb",
    ]
    extra = table(
        [{"key": "k", "bytes": 1, "hidden": 42}], COLUMNS, options=TableOptions(("key", "hidden"))
    )
    assert extra.splitlines() == ["key  hidden", "k        42"]
    with pytest.raises(UsageError, match="no column 'nope'"):
        table(rows(1), COLUMNS, options=TableOptions(("nope",)))


def test_free_text_gives_way_first_identifiers_never(monkeypatch: pytest.MonkeyPatch) -> None:
    text = table(rows(3), COLUMNS, width=60, monkeypatch=monkeypatch)
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines)
    assert all("sessions:0000000" in line and "INTERNAL" in line for line in lines[1:])
    assert all(line.endswith("…") for line in lines[1:])


def test_then_whole_columns_from_the_right(monkeypatch: pytest.MonkeyPatch) -> None:
    # key 27 + bytes 5 + level 8 + gaps = 44: the note (even at 12) does not fit
    text = table(rows(3), COLUMNS, width=46, monkeypatch=monkeypatch)
    lines = text.splitlines()
    assert lines[0].split() == ["key", "bytes", "level"]  # the note left out, then it fits
    assert all(len(line) <= 46 for line in lines)
    narrower = table(rows(3), COLUMNS, width=40, monkeypatch=monkeypatch).splitlines()
    assert narrower[0].split() == ["key", "bytes"]
    # --wide: everything, nothing cut
    wide = table(
        rows(3), COLUMNS, width=40, options=TableOptions(wide=True), monkeypatch=monkeypatch
    )
    assert all(line.endswith("goes on and on") for line in wide.splitlines()[1:])


def test_identifiers_wider_than_the_terminal_run_over(monkeypatch: pytest.MonkeyPatch) -> None:
    long_key = "lineage-session:" + "x" * 80
    data = [{"key": long_key, "bytes": 3}, {"key": "short", "bytes": 4}]
    errors = io.StringIO()
    text = table(data, COLUMNS[:2], width=50, monkeypatch=monkeypatch, stderr=errors)
    assert text.splitlines() == ["key", long_key, "short"]  # whole; the rest gave way
    assert errors.getvalue() == "hidden to fit: bytes (-w shows them)\n"


ESSENTIAL = [
    Column("key", "key", essential=True),
    Column("bytes", "bytes", "right"),
    Column("level", "level"),
    text_column("note", "note", essential=True),
]


def test_essential_columns_never_give_way(monkeypatch: pytest.MonkeyPatch) -> None:
    errors = io.StringIO()
    text = table(rows(3), ESSENTIAL, width=44, monkeypatch=monkeypatch, stderr=errors)
    lines = text.splitlines()
    assert lines[0].split() == ["key", "note"]  # the note cut to 12, never left out
    assert all(len(line) <= 44 and line.endswith("…") for line in lines[1:])
    assert errors.getvalue() == "hidden to fit: bytes, level (-w shows them)\n"
    # a table names the order its other columns give way in
    named = table(rows(3), ESSENTIAL, width=53, monkeypatch=monkeypatch, gives_way=("bytes",))
    assert named.splitlines()[0].split() == ["key", "level", "note"]
    # nothing hidden: no note; off a terminal nothing is ever hidden
    quiet = io.StringIO()
    table(rows(3), ESSENTIAL, width=200, monkeypatch=monkeypatch, stderr=quiet)
    piped = io.StringIO()
    assert table(rows(3), ESSENTIAL, stderr=piped).splitlines()[0].split() == [
        "key",
        "bytes",
        "level",
        "note",
    ]
    assert quiet.getvalue() == piped.getvalue() == ""


def _edges(line: str) -> list[int]:
    """Where each cell of a ``key bytes level note`` line is aligned: key, level and
    note by their start, bytes (a number, right-aligned) by its end."""
    spans = [match.span() for match in re.finditer(r"\S+", line)]
    return [spans[0][0], spans[1][1], spans[2][0], spans[3][0]]


def test_columns_stay_put_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    first = [
        {"key": f"key-{n:06d}", "bytes": n, "level": "PUBLIC", "note": "short"}
        for n in range(FIRST_PAGE)
    ]
    later = [
        {"key": "k" * 20, "bytes": 7, "level": "CONFIDENTIAL", "note": "a longer note here"},
        {"key": "k999", "bytes": 123456789, "level": "PUBLIC", "note": "n"},
    ]
    errors = io.StringIO()
    text = table([*first, *later], ESSENTIAL, width=60, monkeypatch=monkeypatch, stderr=errors)
    lines = text.splitlines()
    edges = _edges(lines[0])
    for line in lines[1 : FIRST_PAGE + 1]:
        assert _edges(line) == edges
    # the key column was given room (its width again): a longer key still fits
    assert lines[-3].startswith("k" * 20) and _edges(lines[-3]) == edges
    # a later value wider than its column is cut, unless a number or essential
    assert lines[-3][edges[2] :].split()[0] == "CONFI…"
    # those end their line; the rest of the row goes on below, in its columns
    assert lines[-2].split() == ["k999", "123456789"]
    assert lines[-1].lstrip() == "PUBLIC  n" and lines[-1].index("PUBLIC") == edges[2]
    assert len(lines) == FIRST_PAGE + 4 and errors.getvalue() == ""


def test_a_value_wider_than_its_column_ends_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    first = [{"key": f"k{n:03d}", "bytes": n} for n in range(FIRST_PAGE)]
    long_key = "lineage-session:" + "x" * 30
    data = [*first, {"key": long_key, "bytes": 5}]
    lines = table(data, ESSENTIAL[:2], width=30, monkeypatch=monkeypatch).splitlines()
    assert lines[-2] == long_key  # whole, never cut
    assert lines[-1] == " " * (len(lines[1]) - 1) + "5"  # the bytes where they were


def test_rows_are_written_as_they_come() -> None:
    stream = io.StringIO()
    seen: list[int] = []

    def produce() -> Iterator[dict[str, Any]]:
        for n in range(FIRST_PAGE * 5):
            if n == FIRST_PAGE + 1:
                seen.append(stream.getvalue().count("\n"))
            yield {"key": f"k{n}", "bytes": n}

    Output("table", stdout=stream).rows(produce(), COLUMNS[:2])
    assert seen == [FIRST_PAGE + 1]  # header and the first page were out before row 102
    assert stream.getvalue().count("\n") == FIRST_PAGE * 5 + 1


def test_later_pages_widen_columns() -> None:
    data = [{"key": "k", "bytes": 1}] * FIRST_PAGE + [{"key": "k" * 30, "bytes": 123456789}]
    lines = table(data, COLUMNS[:2]).splitlines()
    assert lines[-1] == "k" * 30 + "  123456789"  # whole, never cut


def test_totals_on_a_terminal_or_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    footer = {"key": "total", "bytes": 7}
    assert "total" not in table(rows(2), COLUMNS[:2], footer=footer)
    asked = table(rows(2), COLUMNS[:2], footer=footer, options=TableOptions(totals=True))
    assert asked.splitlines()[-1].split() == ["total", "7"]
    tty = table(rows(2), COLUMNS[:2], footer=footer, width=100, monkeypatch=monkeypatch)
    assert tty.splitlines()[-1].split() == ["total", "7"]


def test_control_characters_are_shown_escaped() -> None:
    nasty = "evil\x1b[2Jkey\rover\x07bell\udcff\u202eabc\nx\tz"
    text = table([{"key": nasty, "bytes": 1, "note": "\x1b]0;title\x07"}], COLUMNS[:4:3])
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "\udcff" not in text and "\u202e" not in text
    # the lone surrogate is an undecodable byte (cells.py): shown as that byte
    assert "evil\\x1b[2Jkey\\rover\\x07bell\\xff\\u202eabc\\nx\\tz" in text
    text.encode("utf-8")  # printable to any UTF-8 terminal: no lone surrogate left
    assert safe("plain") == "plain" and safe("two\nlines", newlines=True) == "two\nlines"
    assert display_width("日本") == 4 and display_width("e\u0301") == 1


def test_control_characters_in_store_keys_are_escaped(cli: CliFn, gateway_db: Path) -> None:
    keys = ["evil:\x1b[2J\x1b[H", "evil:cr\rover", "evil:bell\x07"]
    with sqlite3.connect(gateway_db) as db:
        db.executemany("INSERT INTO kv VALUES (?, '1')", [(key,) for key in keys])
    for args in (("kv", "list", "evil:"), ("kv", "list", "evil:", "--keys-only")):
        result = cli(*args)
        assert result.exit_code == 0
        for raw in ("\x1b", "\r", "\x07"):
            assert raw not in result.stdout
        assert "evil:\\x1b[2J\\x1b[H" in result.stdout and "evil:cr\\rover" in result.stdout
    exact = cli("kv", "list", "evil:", "-f", "json").json()
    assert sorted(row["key"] for row in exact) == sorted(keys)  # type: ignore[index, union-attr]
    missing = cli("kv", "get", "evil:\x1b[31mred")
    assert missing.exit_code == 3 and "\x1b" not in missing.stderr


def test_csv_cells() -> None:
    assert csv_cell(True) == "true" and csv_cell(False) == "false"
    assert csv_cell({"a": [1, 2]}) == '{"a":[1,2]}' and csv_cell(3) == 3
    stream = io.StringIO()
    Output("csv", stdout=stream).rows([{"k": "x", "held": False, "tags": ["a"]}], [])
    assert stream.getvalue() == 'k,held,tags\nx,false,"[""a""]"\n'


def test_a_long_last_column_runs_over_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    columns = [Column("key", "key", essential=True), Column("value", "value", essential=True)]
    data = [{"key": "sessions:abc", "value": "v" * 100}, {"key": "k", "value": "short"}]
    lines = table(data, columns, width=40, monkeypatch=monkeypatch).splitlines()
    start = lines[0].index("value")
    assert start == len("sessions:abc") + 2  # the key column is not squeezed for it
    assert lines[1] == "sessions:abc  " + "v" * 100 and lines[2] == "k" + " " * 13 + "short"


def test_a_table_of_one_page_gets_no_extra_room(monkeypatch: pytest.MonkeyPatch) -> None:
    data = [{"key": f"k{n:03d}", "bytes": n} for n in range(FIRST_PAGE)]
    one_page = table(data, ESSENTIAL[:2], width=80, monkeypatch=monkeypatch).splitlines()
    assert one_page[0] == "key   bytes"  # exactly as wide as it needs
    longer = table([*data, *data], ESSENTIAL[:2], width=80, monkeypatch=monkeypatch)
    assert longer.splitlines()[0] == "key" + " " * 7 + "bytes"  # the key's width again
