"""The streaming table: rows written a page at a time, fitted to the terminal
(the rules are in the package's docstring)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from typing import IO, Any

from triggerfish_cli.cli.output.text import (
    FIRST_PAGE,
    GAP,
    MIN_TEXT,
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
    total_width,
)
from triggerfish_cli.errors import UsageError


class Table:
    """Writes rows a page at a time; widths from the first page, growing after."""

    def __init__(
        self,
        stream: IO[str],
        columns: Sequence[Column],
        options: TableOptions,
        *,
        width: int | None,
        bold: bool,
        footer: Mapping[str, Any] | None,
    ) -> None:
        self.stream = stream
        self.options = options
        self.limit = None if options.wide else width
        self.bold = bold
        self.candidates = list(columns)
        self.chosen = bool(options.columns)
        self.footer = footer
        self.shown: list[Column] = []
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

    def _fit_text(self, columns: Sequence[Column], widths: list[int]) -> list[int]:
        """Cut free-text columns (widest first, down to MIN_TEXT) until the table fits."""
        if self.limit is None:
            return widths
        widths = list(widths)
        excess = total_width(widths) - self.limit
        while excess > 0:
            texts = [
                i
                for i, c in enumerate(columns)
                if c.is_text and widths[i] > max(MIN_TEXT, display_width(c.header))
            ]
            if not texts:
                break
            widest = max(texts, key=lambda i: widths[i])
            floor = max(MIN_TEXT, display_width(columns[widest].header))
            give = min(excess, widths[widest] - floor)
            widths[widest] -= give
            excess -= give
        return widths

    def _drop_order(self) -> list[int]:
        """Which shown columns give way, first to last: free text from the right, then the rest.

        The first column and ``keep`` columns never do.
        """
        droppable = [i for i, c in enumerate(self.shown) if i and not c.keep]
        texts = [i for i in reversed(droppable) if self.shown[i].is_text]
        return texts + [i for i in reversed(droppable) if not self.shown[i].is_text]

    def _arrange(self, natural: list[int]) -> tuple[list[int], list[int]]:
        """The shown columns to keep and their widths, for these natural widths."""

        def fit(keep: list[int]) -> list[int]:
            return self._fit_text([self.shown[i] for i in keep], [natural[i] for i in keep])

        keep = list(range(len(self.shown)))
        widths = fit(keep)
        if self.limit is None or self.chosen or total_width(widths) <= self.limit:
            return keep, widths
        order = self._drop_order()
        # Leave columns out only when that can make the table fit: when the
        # identifiers alone are wider than the terminal, the lines run over.
        if total_width(fit([i for i in keep if i not in order])) > self.limit:
            return keep, self._cap(keep, widths)
        for index in order:
            if total_width(widths) <= self.limit:
                break
            keep.remove(index)
            widths = fit(keep)
        return keep, self._cap(keep, widths)

    def _cap(self, keep: list[int], widths: list[int]) -> list[int]:
        """Identifier columns too wide for the terminal are aligned to what fits.

        A longer value is still printed whole (its row runs over); shorter
        ones are not padded out past the terminal's edge.
        """
        assert self.limit is not None
        widths = list(widths)
        excess = total_width(widths) - self.limit
        while excess > 0:
            columns = [
                i
                for i in range(len(keep))
                if widths[i] > display_width(self.shown[keep[i]].header) and i < len(keep) - 1
            ]
            if not columns:
                break
            widest = max(columns, key=lambda i: widths[i])
            give = min(excess, widths[widest] - display_width(self.shown[keep[widest]].header))
            widths[widest] -= give
            excess -= give
        return widths

    def _page(self, cells: list[list[str]]) -> tuple[list[list[str]], bool]:
        """Fit a page: widths grow (never shrink) to its cells; columns give way if needed.

        Returns the page's cells for the columns kept, and whether columns were left out.
        """
        natural = natural_widths(self.shown, cells)
        if self.natural:
            natural = [max(a, b) for a, b in zip(self.natural, natural, strict=True)]
        keep, widths = self._arrange(natural)
        dropped = len(keep) < len(self.shown)
        if dropped:
            self.shown = [self.shown[i] for i in keep]
            cells = [[row[i] for i in keep] for row in cells]
        self.natural = [natural[i] for i in keep]
        self.widths = widths
        return cells, dropped

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
        parts = []
        last = len(self.shown) - 1
        for index, (column, text, width) in enumerate(
            zip(self.shown, cells, self.widths, strict=True)
        ):
            if column.is_text:
                text = cut(text, width)
            right = column.justify == "right"
            if index == last and not right:
                parts.append(text)
            elif text.isascii():
                parts.append(text.rjust(width) if right else text.ljust(width))
            else:
                parts.append(pad(text, width, right))
        return GAP.join(parts).rstrip(" ")

    def _show_footer(self) -> bool:
        if self.footer is None:
            return False
        if self.options.totals is None:
            return isatty(self.stream)
        return self.options.totals

    def _header(self) -> str:
        header = self._line([c.header for c in self.shown])
        return f"\x1b[1m{header}\x1b[0m" if self.bold else header

    def write(self, rows: Iterable[Mapping[str, Any]]) -> int:
        iterator = iter(rows)
        page = list(islice(iterator, FIRST_PAGE))
        if not page:
            return 0
        self.shown = self._pick(page[0])
        footer = self._show_footer()
        cells = [self._cells(self.shown, row) for row in page]
        if footer:
            assert self.footer is not None
            cells.append(self._cells(self.shown, self.footer))
        cells, _ = self._page(cells)
        if footer:
            cells.pop()
        lines = [self._header()] if self.options.headers else []
        lines += [self._line(row) for row in cells]
        count = len(page)
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        while True:
            page = list(islice(iterator, PAGE))
            if not page:
                break
            count += len(page)
            cells, dropped = self._page([self._cells(self.shown, row) for row in page])
            lines = [self._header()] if dropped and self.options.headers else []
            lines += [self._line(row) for row in cells]
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        if footer:
            assert self.footer is not None
            self.stream.write(self._line(self._cells(self.shown, self.footer)) + "\n")
        return count
