"""All terminal output: tables, JSON, CSV, messages, prompts, progress.

The only module that imports rich (for progress bars and coloured diffs),
and only inside the functions that draw with it, so that a scripted call
that prints JSON, a table or a raw value never pays for it. Results go to
stdout; messages, warnings, prompts and progress go to stderr.

Formats:

- ``table``: aligned columns. Rows are written as they come, a page at a
  time, so the first row appears at once and memory stays flat however many
  rows there are; column widths come from the first page (and grow, never
  shrink, on later pages). Identifiers (keys, namespaces, ids, file names,
  times, levels, numbers) are never wrapped or cut. On a terminal the table
  fits its width: free-text columns (descriptions, reasons, content) are cut
  with ``…`` first, down to 12 characters; then whole columns are left out,
  free-text ones first, then the others, the rightmost first, never the
  first one; a table whose identifiers alone are wider than the terminal
  runs over (the terminal wraps the line, no break is inserted). When a
  later page needs more room than the first, columns give way again in the
  same order and the header is repeated. Off a terminal nothing is cut or
  left out. Either way: one header line (none with ``--no-headers``), then
  one line per row, no rules, no blank lines, no spaces at line ends; the
  totals line is shown on a terminal, or with ``--totals``. ``--wide`` shows
  every column and cuts nothing; ``--columns a,b`` picks the columns (any
  field of the JSON rows). Control characters in cells are shown escaped
  (``\\x1b``, ``\\r``, ...), so a key can never drive the operator's
  terminal. Messages (and lines of prose on stdout) are wrapped at spaces on
  a terminal.
- ``json``: one JSON document (a list of rows, or one object).
- ``jsonl``: one JSON object per line.
- ``csv``: a header line, then one line per row; booleans ``true``/``false``,
  nested values as JSON text.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import IO, Any

from triggerfish_cli import cells
from triggerfish_cli.errors import RefusedError, UsageError

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
    text) is cut with ``…``. ``wide`` columns show only with ``--wide`` or
    ``--columns``; ``keep`` columns are never left out.
    """

    field: str
    header: str
    justify: str = "left"
    render: Callable[[Any], str] | None = None
    kind: str = ""
    wide: bool = False
    keep: bool = False

    @property
    def is_text(self) -> bool:
        return self.kind == "text"


def text_column(field: str, header: str, render: Callable[[Any], str] | None = None) -> Column:
    """A free-text column (descriptions, reasons, content): cut with … on a narrow terminal."""
    return Column(field, header, render=render, kind="text")


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


def _pad(text: str, width: int, right: bool) -> str:
    missing = width - display_width(text)
    if missing <= 0:
        return text
    return " " * missing + text if right else text + " " * missing


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(item) for item in value)
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


# -- the streaming table -----------------------------------------------------------


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


class _Table:
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

    @staticmethod
    def _natural(columns: Sequence[Column], cells: Sequence[Sequence[str]]) -> list[int]:
        widths = [display_width(c.header) for c in columns]
        for row in cells:
            for index, text in enumerate(row):
                size = len(text) if text.isascii() else display_width(text)
                if size > widths[index]:
                    widths[index] = size
        return widths

    @staticmethod
    def _total(widths: Sequence[int]) -> int:
        return sum(widths) + len(GAP) * max(len(widths) - 1, 0)

    def _fit_text(self, columns: Sequence[Column], widths: list[int]) -> list[int]:
        """Cut free-text columns (widest first, down to MIN_TEXT) until the table fits."""
        if self.limit is None:
            return widths
        widths = list(widths)
        excess = self._total(widths) - self.limit
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
        if self.limit is None or self.chosen or self._total(widths) <= self.limit:
            return keep, widths
        order = self._drop_order()
        # Leave columns out only when that can make the table fit: when the
        # identifiers alone are wider than the terminal, the lines run over.
        if self._total(fit([i for i in keep if i not in order])) > self.limit:
            return keep, self._cap(keep, widths)
        for index in order:
            if self._total(widths) <= self.limit:
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
        excess = self._total(widths) - self.limit
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
        natural = self._natural(self.shown, cells)
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
            text = column.render(value) if column.render is not None else _cell(value)
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
                parts.append(_pad(text, width, right))
        return GAP.join(parts).rstrip(" ")

    def _show_footer(self) -> bool:
        if self.footer is None:
            return False
        if self.options.totals is None:
            return _isatty(self.stream)
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


# -- output -------------------------------------------------------------------------


class Output:
    """Writes one command's results in the chosen format."""

    def __init__(
        self,
        fmt: str = "table",
        *,
        quiet: bool = False,
        color: bool = True,
        table: TableOptions | None = None,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ) -> None:
        self.fmt = fmt
        self.quiet = quiet
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.color = color and "NO_COLOR" not in os.environ
        self.table = table or TableOptions()

    # -- terminals ----------------------------------------------------------

    @property
    def stdout_is_tty(self) -> bool:
        return _isatty(self.stdout)

    @property
    def stderr_is_tty(self) -> bool:
        return _isatty(self.stderr)

    @property
    def stdin_is_tty(self) -> bool:
        return _isatty(sys.stdin)

    def width(self) -> int | None:
        """The terminal's width when stdout is one (COLUMNS first), else None: no limit."""
        if not self.stdout_is_tty:
            return None
        import shutil

        return max(shutil.get_terminal_size((80, 24)).columns, 20)

    def _console(self, stream: IO[str]) -> Any:
        from rich.console import Console

        tty = _isatty(stream)
        return Console(
            file=stream,
            force_terminal=tty,
            no_color=not (self.color and tty),
            highlight=False,
            soft_wrap=not tty,
            width=None if tty else 4096,
        )

    # -- data on stdout -----------------------------------------------------

    def write(self, text: str) -> None:
        """Exact text to stdout (no newline added); an odd cell (cells.py) as its stored bytes."""
        if not cells.is_plain(text):
            self.stdout.flush()
            buffer = getattr(self.stdout, "buffer", None)
            if buffer is not None:
                buffer.write(cells.raw_bytes(text))
                buffer.flush()
                return
            text = cells.raw_bytes(text).decode("utf-8", "replace")
        self.stdout.write(text)
        self.stdout.flush()

    def line(self, text: str = "", *, wrap: bool = True) -> None:
        """A line of text for people: control characters escaped, line breaks kept,
        and on a terminal wrapped at spaces (``wrap``), so no word is split."""
        self.stdout.write(self._fold(self.stdout, safe(text, newlines=True), wrap) + "\n")

    def _fold(self, stream: IO[str], text: str, wrap: bool = True) -> str:
        """``text`` wrapped at spaces to the terminal's width when ``stream`` is one."""
        if not wrap or not _isatty(stream):
            return text
        import shutil

        width = max(shutil.get_terminal_size((80, 24)).columns, 20)
        if all(display_width(part) <= width for part in text.split("\n")):
            return text
        import textwrap

        folded = []
        for part in text.split("\n"):
            folded += textwrap.wrap(
                part,
                width=width,
                subsequent_indent="  ",
                break_long_words=False,
                break_on_hyphens=False,
            ) or [""]
        return "\n".join(folded)

    def rows(
        self,
        rows: Iterable[Mapping[str, Any]],
        columns: Sequence[Column],
        *,
        footer: Mapping[str, Any] | None = None,
        empty: str | None = None,
    ) -> int:
        """Write rows as they come, in every format. Returns the count."""
        if self.fmt == "json":
            return self._json_rows(rows)
        if self.fmt == "jsonl":
            count = 0
            for row in rows:
                self.stdout.write(json_text(row) + "\n")
                count += 1
            return count
        if self.fmt == "csv":
            return self._csv_rows(rows, columns)
        tty = self.stdout_is_tty
        count = _Table(
            self.stdout,
            columns,
            self.table,
            width=self.width(),
            bold=tty and self.color,
            footer=footer,
        ).write(rows)
        if not count and empty:
            self.info(empty)
        return count

    def _json_rows(self, rows: Iterable[Mapping[str, Any]]) -> int:
        count = 0
        self.stdout.write("[")
        for row in rows:
            self.stdout.write(("," if count else "") + "\n  " + json_text(row))
            count += 1
        self.stdout.write("\n]\n" if count else "]\n")
        return count

    def _csv_rows(self, rows: Iterable[Mapping[str, Any]], columns: Sequence[Column]) -> int:
        writer: Any = None
        count = 0
        chosen = list(self.table.columns)
        for row in rows:
            if writer is None:
                fields = chosen or list(row.keys())
                writer = csv.DictWriter(
                    self.stdout, fieldnames=fields, extrasaction="ignore", lineterminator="\n"
                )
                writer.writeheader()
            writer.writerow({key: csv_cell(value) for key, value in row.items()})
            count += 1
        if writer is None:
            fields = chosen or [column.field for column in columns]
            self.stdout.write(",".join(fields) + "\n")
        return count

    def record(self, document: Mapping[str, Any], fields: Sequence[Column] | None = None) -> None:
        """One object: JSON as is; on a table, one ``field  value`` line per field."""
        if self.fmt in ("json", "jsonl"):
            self.stdout.write(json_text(document, pretty=self.fmt == "json") + "\n")
            return
        if self.fmt == "csv":
            self._csv_rows([document], fields or [])
            return
        shown = fields or [Column(name, name) for name in document]
        names = [safe(column.header) for column in shown]
        indent = max((display_width(name) for name in names), default=0) + len(GAP)
        limit = self.width()
        lines = []
        for name, column in zip(names, shown, strict=True):
            value = _render(column, document.get(column.field))
            text = safe(value)
            pieces = [text]
            if limit is not None and display_width(text) > limit - indent and " " in text:
                import textwrap

                pieces = textwrap.wrap(
                    text,
                    width=max(limit - indent, MIN_TEXT),
                    break_long_words=False,
                    break_on_hyphens=False,
                ) or [text]
            lines.append((_pad(name, indent, False) + pieces[0]).rstrip(" "))
            lines += [" " * indent + piece for piece in pieces[1:]]
        if lines:
            self.stdout.write("\n".join(lines) + "\n")

    def outcome(self, document: Mapping[str, Any], message: str) -> None:
        """What a command did: ``document`` for json/jsonl/csv, else one line (none if quiet)."""
        if self.fmt in ("json", "jsonl", "csv"):
            self.record(document)
        elif not self.quiet:
            self.line(message)

    def diff(self, text: str, *, err: bool = False) -> None:
        """A unified diff, exact; coloured only when its stream is a TTY (and colour is on)."""
        stream = self.stderr if err else self.stdout
        if not _isatty(stream):
            stream.write(text)
            stream.flush()
            return
        text = safe(text, newlines=True)
        if not self.color:
            stream.write(text)
            stream.flush()
            return
        from rich.text import Text

        console = self._console(stream)
        for line in text.splitlines():
            style = ""
            if line.startswith(("+++", "---")):
                style = "bold"
            elif line.startswith("+"):
                style = "green"
            elif line.startswith("-"):
                style = "red"
            elif line.startswith("@@"):
                style = "cyan"
            console.print(Text(line, style=style), soft_wrap=True)

    # -- messages on stderr -------------------------------------------------

    def info(self, message: str) -> None:
        """A status message; suppressed by --quiet."""
        if not self.quiet:
            self.stderr.write(self._fold(self.stderr, safe(message, newlines=True)) + "\n")

    def warn(self, message: str) -> None:
        self.stderr.write(
            self._fold(self.stderr, f"warning: {safe(message, newlines=True)}") + "\n"
        )

    def warn_all(self, messages: Sequence[str], most: int = 10) -> None:
        """Each warning, the first ``most`` of them, then how many more there were."""
        for message in messages[:most]:
            self.warn(message)
        if len(messages) > most:
            self.warn(f"... and {len(messages) - most} more like these")

    def error(self, message: str) -> None:
        prefix = "error:"
        if self.color and self.stderr_is_tty:
            prefix = "\x1b[31merror:\x1b[0m"
        text = self._fold(self.stderr, f"error: {safe(message, newlines=True)}")
        self.stderr.write(prefix + text[len("error:") :] + "\n")

    # -- prompts --------------------------------------------------------------

    def confirm(self, question: str, *, yes: bool, what: str = "this") -> None:
        """Go on only when confirmed: ``--yes``, or "y" typed at a TTY.

        Without a TTY and without ``--yes`` it refuses (exit 4), so a script
        never hangs on a prompt nor destroys anything by default.
        """
        if yes:
            return
        if not self.stdin_is_tty:
            raise RefusedError(f"{what} needs confirmation", hint="pass --yes to run it unattended")
        self.stderr.write(f"{safe(question)} [y/N] ")
        self.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise RefusedError(f"{what} cancelled: not confirmed")

    def confirm_by_typing(self, question: str, expected: str, *, what: str) -> None:
        """Ask the operator to type ``expected`` exactly (for the most destructive paths)."""
        if not self.stdin_is_tty:
            return
        self.stderr.write(f"{safe(question)}\nType {safe(expected)} to confirm: ")
        self.stderr.flush()
        if sys.stdin.readline().rstrip("\n") != expected:
            raise RefusedError(f"{what} cancelled: the text typed did not match")

    # -- progress -------------------------------------------------------------

    @contextmanager
    def progress(
        self, description: str, total: int | None = None, *, unit: str = ""
    ) -> Iterator[Progress]:
        """Progress on stderr, only on a TTY and without --quiet.

        With a total: a bar, the count, the percentage and the time left;
        without: the phase name, the count so far and the time spent.
        ``unit="bytes"`` counts in KiB/MiB.
        """
        if self.quiet or not self.stderr_is_tty:
            yield Progress(None, None)
            return
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            _count_column(unit),
            _percent_column(),
            _eta_column(),
            TimeElapsedColumn(),
            console=self._console(self.stderr),
            transient=True,
        )
        with bar:
            task = bar.add_task(description, total=total, unit=unit)
            yield Progress(bar, task)


class Progress:
    """Handle a command (or, through callbacks, the core) advances; a no-op off a TTY."""

    def __init__(self, bar: Any, task: Any) -> None:
        self._bar = bar
        self._task = task

    def advance(self, amount: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, amount)

    def total(self, total: int | None) -> None:
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def phase(self, name: str, total: int | None = None, *, unit: str = "") -> None:
        """A new phase: its name, its total when known, its unit (the count starts again)."""
        if self._bar is not None:
            self._bar.reset(self._task, total=total, description=name, unit=unit)


def _count_column(default: str) -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Count(ProgressColumn):
        def render(self, task: Any) -> Text:
            unit = task.fields.get("unit") or default

            def show(value: float) -> str:
                return human_bytes(int(value)) if unit == "bytes" else f"{int(value)}"

            if task.total is None:
                return Text(show(task.completed) if task.completed else "")
            return Text(f"{show(task.completed)}/{show(task.total)}")

    return Count()


def _percent_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Percent(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text("" if task.total is None else f"{task.percentage:>3.0f}%")

    return Percent()


def _eta_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Eta(ProgressColumn):
        def render(self, task: Any) -> Text:
            if task.total is None or task.finished:
                return Text("")
            left = task.time_remaining
            if left is None:
                return Text("eta -:--:--")
            minutes, seconds = divmod(int(left), 60)
            hours, minutes = divmod(minutes, 60)
            return Text(f"eta {hours}:{minutes:02d}:{seconds:02d}")

    return Eta()


def _render(column: Column, value: Any) -> str:
    if column.render is not None:
        return column.render(value)
    return _cell(value)


def csv_cell(value: Any) -> Any:
    """A CSV cell: true/false, nested values as JSON text, None empty."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json_text(value)
    if isinstance(value, str) and not cells.is_plain(value):
        return cells.display(value)
    return value


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
