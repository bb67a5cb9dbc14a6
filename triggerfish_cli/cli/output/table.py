"""The streaming table: rows written a page at a time, fitted to the terminal
(the rules are in the package's docstring)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, islice
from typing import IO, Any

from triggerfish_cli.cli.output.layout import arrange, fit_text, room
from triggerfish_cli.cli.output.text import (
    FIRST_PAGE,
    GAP,
    PAGE,
    Column,
    TableOptions,
    cell_text,
    cut,
    display_width,
    isatty,
    natural_widths,
    pad,
    safe,
)
from triggerfish_cli.errors import UsageError


class Table:
    """Writes rows a page at a time; the first page sets the columns and their widths.

    On a terminal (``width`` given) they hold for the whole output, so every
    column starts where it did in the first page; off one, widths grow to
    later pages' cells, so nothing is ever cut.
    """

    def __init__(
        self,
        stream: IO[str],
        columns: Sequence[Column],
        options: TableOptions,
        *,
        width: int | None,
        bold: bool,
        footer: Mapping[str, Any] | None,
        gives_way: Sequence[str] = (),
        note: Callable[[list[str]], object] | None = None,
    ) -> None:
        self.stream = stream
        self.options = options
        self.frozen = width is not None
        self.limit = None if options.wide else width
        self.bold = bold
        self.candidates = list(columns)
        self.chosen = bool(options.columns)
        self.footer = footer
        self.gives_way = tuple(gives_way)
        self.note = note
        self.hidden: list[str] = []
        self.shown: list[Column] = []
        self.cuts: list[bool] = []
        self.widths: list[int] = []
        self.natural: list[int] = []

    # -- choosing columns ---------------------------------------------------

    def _pick(self, first: Mapping[str, Any]) -> list[Column]:
        if not self.options.columns:
            return [c for c in self.candidates if self.options.wide or not c.wide]
        by_name: dict[str, Column] = {}
        for column in self.candidates:
            by_name.setdefault(column.field.lower(), column)
            by_name.setdefault(column.header.lower(), column)
        picked = []
        for name in self.options.columns:
            found = by_name.get(name.lower())
            if found is None and name in first:
                value = first[name]
                right = isinstance(value, (int, float)) and not isinstance(value, bool)
                found = Column(name, name, "right" if right else "left")
            if found is None:
                known = sorted({c.field for c in self.candidates} | set(first))
                raise UsageError(
                    f"--columns: no column {name!r}", hint=f"choose from {', '.join(known)}"
                )
            picked.append(found)
        return picked

    # -- widths ---------------------------------------------------------------

    def _arrange(self, natural: list[int]) -> tuple[list[int], list[int]]:
        """The shown columns to keep and their widths, for these natural widths."""
        keep = list(range(len(self.shown)))
        if self.limit is None:
            return keep, natural
        if self.chosen:
            return keep, fit_text(self.shown, natural, self.limit)
        return arrange(self.shown, natural, self.limit, self.gives_way)

    def _page(self, cells: list[list[str]]) -> list[list[str]]:
        """Fit a page: widths grow (never shrink) to its cells; columns give way if needed.

        Returns the page's cells for the columns kept; those left out are in ``hidden``.
        """
        natural = natural_widths(self.shown, cells)
        if self.natural:
            natural = [max(a, b) for a, b in zip(self.natural, natural, strict=True)]
        keep, widths = self._arrange(natural)
        if len(keep) < len(self.shown):
            self.hidden += [c.header for i, c in enumerate(self.shown) if i not in keep]
            self.shown = [self.shown[i] for i in keep]
            cells = [[row[i] for i in keep] for row in cells]
        self.natural = [natural[i] for i in keep]
        self.widths = widths
        return cells

    # -- writing ----------------------------------------------------------------

    def _cells(self, columns: Sequence[Column], row: Mapping[str, Any]) -> list[str]:
        out = []
        for column in columns:
            value = row.get(column.field)
            text = column.render(value) if column.render is not None else cell_text(value)
            if not text.isprintable():
                text = safe(text)
            out.append(text)
        return out

    def _line(self, cells: Sequence[str]) -> str:
        """A row: each cell where its column starts. A cell wider than its column (one
        that may not be cut) ends its line; the next cells go on the following one."""
        lines: list[str] = []
        parts: list[str] = []
        used = start = 0
        last = len(self.shown) - 1
        for index, (column, text, width, cuts) in enumerate(
            zip(self.shown, cells, self.widths, self.cuts, strict=True)
        ):
            right = column.justify == "right"
            if cuts:  # the last column may use what is left of the terminal
                room = width
                if index == last and not right and self.limit is not None:
                    room = max(width, self.limit - start)
                text = cut(text, room)
            if index:
                if used > start - len(GAP):
                    lines.append("".join(parts).rstrip(" "))
                    parts, used = [], 0
                parts.append(" " * (start - used))
            if index == last and not right:
                cell = text
            elif text.isascii():
                cell = text.rjust(width) if right else text.ljust(width)
            else:
                cell = pad(text, width, right)
            parts.append(cell)
            used = start + (len(cell) if cell.isascii() else display_width(cell))
            start += width + len(GAP)
        lines.append("".join(parts).rstrip(" "))
        return "\n".join(lines)

    def _show_footer(self) -> bool:
        if self.footer is None:
            return False
        if self.options.totals is None:
            return isatty(self.stream)
        return self.options.totals

    def _header(self) -> str:
        header = self._line([c.header for c in self.shown])
        return f"\x1b[1m{header}\x1b[0m" if self.bold else header

    def _first(self, page: list[Mapping[str, Any]], more: bool) -> None:
        """Lay the table out for its first page (``more``: others follow), and write it."""
        self.shown = self._pick(page[0])
        footer = self._show_footer()
        cells = [self._cells(self.shown, row) for row in page]
        if footer:
            assert self.footer is not None
            cells.append(self._cells(self.shown, self.footer))
        cells = self._page(cells)
        if footer:
            cells.pop()
        if more and self.limit is not None:
            self.widths = room(self.shown, self.widths, self.limit)
        if self.hidden and self.note is not None:
            self.note(self.hidden)
        self.cuts = [c.is_text for c in self.shown]
        lines = [self._header()] if self.options.headers else []
        self._emit(lines + [self._line(row) for row in cells])
        if self.frozen and not self.options.wide:
            # later pages keep these widths: what no longer fits is cut, but
            # never an essential column's value nor a number
            self.cuts = [c.is_text or not (c.essential or c.is_number) for c in self.shown]

    def _emit(self, lines: list[str]) -> None:
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()

    def write(self, rows: Iterable[Mapping[str, Any]]) -> int:
        iterator = iter(rows)
        page = list(islice(iterator, FIRST_PAGE + 1))
        if not page:
            return 0
        more = len(page) > FIRST_PAGE
        if more:
            iterator = chain([page.pop()], iterator)
        self._first(page, more)
        count = len(page)
        while True:
            page = list(islice(iterator, PAGE))
            if not page:
                break
            count += len(page)
            cells = [self._cells(self.shown, row) for row in page]
            if not self.frozen:
                cells = self._page(cells)
            self._emit([self._line(row) for row in cells])
        if self.footer is not None and self._show_footer():
            self.stream.write(self._line(self._cells(self.shown, self.footer)) + "\n")
        return count
