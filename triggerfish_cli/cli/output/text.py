"""Cells as text: columns, safe (escaped) text, display widths, JSON and CSV cells."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from triggerfish_cli import cells

FORMATS = ("table", "json", "jsonl", "csv")

#: Rows in the first page (its widths set the table's) and in each later one.
FIRST_PAGE = 100
PAGE = 1000
#: A free-text column is never cut narrower than this.
MIN_TEXT = 12
GAP = "  "


@dataclass(frozen=True)
class Column:
    """A table column: the row field it shows, its header, alignment, formatter.

    ``kind`` says how it gives way to a narrow terminal: ``id`` (the default
    for left-aligned columns: keys, names, times, levels) is never cut,
    ``num`` (the default for right-aligned ones) neither, ``text`` (free
    text) is cut with ``…``. ``essential`` columns (the row's identifier and
    what the command is about) are never left out to fit a terminal; ``wide``
    columns show only with ``--wide`` or ``--columns``; ``table_only`` ones
    are for people (a highlighted excerpt): documents leave their field out.
    """

    field: str
    header: str
    justify: str = "left"
    render: Callable[[Any], str] | None = None
    kind: str = ""
    wide: bool = False
    essential: bool = False
    table_only: bool = False

    @property
    def is_text(self) -> bool:
        return self.kind == "text"

    @property
    def is_number(self) -> bool:
        return self.justify == "right" and not self.is_text


def text_column(
    field: str,
    header: str,
    render: Callable[[Any], str] | None = None,
    *,
    essential: bool = False,
) -> Column:
    """A free-text column (descriptions, reasons, content): cut with … on a narrow terminal."""
    return Column(field, header, render=render, kind="text", essential=essential)


def human_bytes(size: Any) -> str:
    if not isinstance(size, int):
        return "" if size is None else str(size)
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - loop returns


# -- safe text ------------------------------------------------------------------


def _escapes() -> dict[int, str]:
    table: dict[int, str] = {9: "\\t", 10: "\\n", 13: "\\r"}
    for code in (*range(0x20), *range(0x7F, 0xA0)):
        table.setdefault(code, f"\\x{code:02x}")
    # Bidirectional overrides and isolates (they reorder what is shown), line
    # and paragraph separators, lone surrogates (undecodable bytes).
    for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029, 0x200E, 0x200F):
        table[code] = f"\\u{code:04x}"
    for code in range(0xD800, 0xE000):
        table[code] = f"\\u{code:04x}"
    return table


_ESCAPES = _escapes()
_KEEP_NEWLINES = {code: text for code, text in _ESCAPES.items() if code != 10}


def safe(text: str, *, newlines: bool = False) -> str:
    """``text`` with control characters shown escaped (``\\x1b``, ``\\r``, ``\\u202e``).

    Keys, labels and values are chosen by the agent or whoever wrote the
    store: printed raw, an escape sequence in one could rewrite the
    operator's terminal. With ``newlines`` line breaks are kept.
    """
    if text.isprintable():
        return text
    if not cells.is_plain(text):  # an odd cell (cells.py): NULL, x'..', \xNN
        text = cells.display(text)
    return text.translate(_KEEP_NEWLINES if newlines else _ESCAPES)


def display_width(text: str) -> int:
    """Terminal cells ``text`` takes: wide East Asian characters 2, combining marks 0."""
    if text.isascii():
        return len(text)
    width = 0
    for char in text:
        width += _char_width(char)
    return width


def _char_width(char: str) -> int:
    if char.isascii():
        return 1
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cut(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells, ending in … when something was left out."""
    if display_width(text) <= width:
        return text
    if text.isascii():
        return text[: max(width - 1, 0)] + "…"
    used, kept = 0, []
    for char in text:
        cells = _char_width(char)
        if used + cells > width - 1:
            break
        kept.append(char)
        used += cells
    return "".join(kept) + "…"


def pad(text: str, width: int, right: bool) -> str:
    missing = width - display_width(text)
    if missing <= 0:
        return text
    return " " * missing + text if right else text + " " * missing


def cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell_text(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def json_text(document: Any, *, pretty: bool = False) -> str:
    """JSON of ``document``; odd cells (cells.py) in their JSON form, ``{"$bytes": ...}``."""
    text = _dumps(document, pretty)
    return text if cells.is_plain(text) else _dumps(_json_cells(document), pretty)


def _dumps(document: Any, pretty: bool) -> str:
    if pretty:
        return json.dumps(document, ensure_ascii=False, indent=2)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def _json_cells(document: Any) -> Any:
    if isinstance(document, str):
        return cells.to_json(document)
    if isinstance(document, Mapping):
        return {cells.display(str(k)): _json_cells(v) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [_json_cells(item) for item in document]
    return document


@dataclass
class TableOptions:
    """What the global table options ask for."""

    columns: tuple[str, ...] = ()
    wide: bool = False
    headers: bool = True
    totals: bool | None = None  # None: on a terminal only


def parse_columns(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    return tuple(name.strip() for name in text.split(",") if name.strip())


def render_cell(column: Column, value: Any) -> str:
    if column.render is not None:
        return column.render(value)
    return cell_text(value)


def csv_cell(value: Any) -> Any:
    """A CSV cell: true/false, nested values as JSON text, None empty."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json_text(value)
    if isinstance(value, str) and not cells.is_plain(value):
        return cells.display(value)
    return value


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def natural_widths(columns: Sequence[Column], cells: Sequence[Sequence[str]]) -> list[int]:
    """The width each column needs for its header and these cells."""
    widths = [display_width(c.header) for c in columns]
    for row in cells:
        for index, text in enumerate(row):
            size = len(text) if text.isascii() else display_width(text)
            if size > widths[index]:
                widths[index] = size
    return widths


def total_width(widths: Sequence[int]) -> int:
    """The width of a line of columns this wide, with the gaps between them."""
    return sum(widths) + len(GAP) * max(len(widths) - 1, 0)
