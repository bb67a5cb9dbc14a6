"""Results on stdout, in the chosen format."""

from __future__ import annotations

import csv
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

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

T = TypeVar("T")
#: A value, or a function that builds it only when it is written.
Built: TypeAlias = T | Callable[[], T]


def _built(value: Built[T]) -> T:
    return value() if callable(value) else value


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
        gives_way: Sequence[str] = (),
    ) -> int:
        """Write rows as they come, in every format. Returns the count.

        On a narrow terminal the table's columns not declared essential give way:
        those named in ``gives_way`` first, in that order, then as the package's
        docstring says; a note on stderr names them."""
        dropped = {column.field for column in columns if column.table_only}
        if dropped and self.fmt != "table":
            rows = ({k: v for k, v in row.items() if k not in dropped} for row in rows)
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
            gives_way=gives_way,
            note=self._hidden_note,
        ).write(rows)
        if not count and empty:
            self.info(empty)
        return count

    def _hidden_note(self, headers: list[str]) -> None:
        """One line naming the columns left out to fit the terminal."""
        self.info(f"hidden to fit: {', '.join(headers)} (-w shows them)")

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

    def result(
        self,
        document: Built[Mapping[str, Any]],
        show: Callable[[], object],
        *,
        always: bool = False,
        rows: Iterable[Mapping[str, Any]] | None = None,
        columns: Sequence[Column] = (),
    ) -> None:
        """A command's result: ``document`` for json and jsonl (or a function that builds
        it, when it costs or may fail and a table does not need it); for csv, ``rows``
        under ``columns`` when given (a nested document makes no table), else the document
        as one row; for a table, ``show()`` draws it for people, but not with --quiet
        (nothing on success) unless ``always`` (the result is what was asked for)."""
        if self.fmt == "table":
            if always or not self.quiet:
                show()
        elif self.fmt == "csv" and rows is not None:
            self.rows(rows, columns)
        else:
            self.record(_built(document))

    def result_rows(
        self,
        rows: Built[Iterable[Mapping[str, Any]]],
        columns: Sequence[Column],
        show: Callable[[], object],
        *,
        document: Built[Mapping[str, Any]] | None = None,
        always: bool = False,
    ) -> None:
        """Rows as a command's result: json, jsonl and csv write ``rows`` (or a function
        that builds them), json ``document`` instead when one is given (the rows and what
        they are about); for a table, ``show()`` draws them (--quiet and ``always`` as
        in :meth:`result`)."""
        if self.fmt == "table":
            if always or not self.quiet:
                show()
        elif self.fmt == "json" and document is not None:
            self.record(_built(document))
        else:
            self.rows(_built(rows), columns)

    def for_people(self, show: Callable[[], object]) -> None:
        """``show()`` only for a table, and not with --quiet: a note beside a result or a
        preview before a question, which a script reading a document has no use for."""
        if self.fmt == "table" and not self.quiet:
            show()

    def strings(self, values: Iterable[str]) -> None:
        """Bare strings (keys, names) as the result: one a line for a table or csv
        (escaped, never wrapped), JSON text one a line for jsonl, one JSON list for json."""
        if self.fmt == "json":  # documents as they are: never folded on a terminal
            self.stdout.write(json_text(list(values)) + "\n")
            return
        for value in values:
            if self.fmt == "jsonl":
                self.stdout.write(json_text(value) + "\n")
            else:
                self.line(value, wrap=False)

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
        # lazy: rich.text adds 31 modules (~15 ms) to `kv get --raw` (TID253)
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
