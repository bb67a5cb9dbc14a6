"""Results on stdout, in the chosen format."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.cli.output.messages import Messages
from triggerfish_cli.cli.output.table import Table
from triggerfish_cli.cli.output.text import (
    GAP,
    MIN_TEXT,
    Column,
    csv_cell,
    display_width,
    isatty,
    json_text,
    pad,
    render_cell,
    safe,
)


class Results(Messages):
    """Data on stdout: exact text, lines for people, rows, one record, an outcome, a diff."""

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
        count = Table(
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
            value = render_cell(column, document.get(column.field))
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
            lines.append((pad(name, indent, False) + pieces[0]).rstrip(" "))
            lines += [" " * indent + piece for piece in pieces[1:]]
        if lines:
            self.stdout.write("\n".join(lines) + "\n")

    def outcome(self, document: Mapping[str, Any], message: str) -> None:
        """What a command did: ``document`` for json/jsonl/csv, else one line (none if quiet)."""
        self.result(document, lambda: self.line(message))

    def result(self, document: Mapping[str, Any], show: Callable[[], None]) -> None:
        """A command's result: ``document`` for json/jsonl/csv; for a table, ``show()``
        draws it for people (not with --quiet: nothing on success)."""
        if self.fmt != "table":
            self.record(document)
        elif not self.quiet:
            show()

    def diff(self, text: str, *, err: bool = False) -> None:
        """A unified diff, exact; coloured only when its stream is a TTY (and colour is on)."""
        stream = self.stderr if err else self.stdout
        if not isatty(stream):
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
