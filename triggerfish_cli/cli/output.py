"""All terminal output: tables, JSON, CSV, messages, prompts, progress.

The only module that imports rich, and only inside the functions that draw
with it, so that a scripted call that prints JSON or a raw value never pays
for it. Data goes to stdout; messages, warnings, prompts and progress go to
stderr.

Formats:

- ``table``: a rich table on a TTY; off a TTY the same table without colour
  or width limit.
- ``json``: one JSON document (a list of rows, or one object).
- ``jsonl``: one JSON object per line.
- ``csv``: a header line, then one line per row.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from triggerfish_cli.errors import RefusedError

FORMATS = ("table", "json", "jsonl", "csv")


@dataclass(frozen=True)
class Column:
    """A table column: the row field it shows, its header, alignment, formatter."""

    field: str
    header: str
    justify: str = "left"
    render: Callable[[Any], str] | None = None


def human_bytes(size: Any) -> str:
    if not isinstance(size, int):
        return "" if size is None else str(size)
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - loop returns


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def json_text(document: Any, *, pretty: bool = False) -> str:
    if pretty:
        return json.dumps(document, ensure_ascii=False, indent=2)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


class Output:
    """Writes one command's results in the chosen format."""

    def __init__(
        self,
        fmt: str = "table",
        *,
        quiet: bool = False,
        color: bool = True,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ) -> None:
        self.fmt = fmt
        self.quiet = quiet
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self.color = color and "NO_COLOR" not in os.environ

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
        """Exact text to stdout (no newline added)."""
        self.stdout.write(text)
        self.stdout.flush()

    def line(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def rows(
        self,
        rows: Iterable[Mapping[str, Any]],
        columns: Sequence[Column],
        *,
        title: str | None = None,
        footer: Mapping[str, Any] | None = None,
        empty: str | None = None,
    ) -> int:
        """Write rows; json/jsonl/csv stream, the table collects. Returns the count."""
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
        collected = list(rows)
        if not collected and empty:
            self.info(empty)
            return 0
        self._table(collected, columns, title=title, footer=footer)
        return len(collected)

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
        for row in rows:
            if writer is None:
                fields = list(row.keys())
                writer = csv.DictWriter(self.stdout, fieldnames=fields, extrasaction="ignore")
                writer.writeheader()
            writer.writerow({key: _csv_cell(value) for key, value in row.items()})
            count += 1
        if writer is None:
            self.stdout.write(",".join(column.field for column in columns) + "\n")
        return count

    def _table(
        self,
        rows: Sequence[Mapping[str, Any]],
        columns: Sequence[Column],
        *,
        title: str | None,
        footer: Mapping[str, Any] | None,
    ) -> None:
        from rich import box
        from rich.table import Table
        from rich.text import Text

        console = self._console(self.stdout)
        table = Table(
            title=title,
            box=box.SIMPLE_HEAD if console.is_terminal else box.SIMPLE,
            show_footer=footer is not None,
            header_style="bold" if console.is_terminal else "",
            pad_edge=False,
        )
        for column in columns:
            foot = ""
            if footer is not None and column.field in footer:
                foot = _render(column, footer[column.field])
            table.add_column(
                column.header,
                justify=column.justify,  # type: ignore[arg-type]
                footer=foot,
                overflow="fold",
            )
        for row in rows:
            table.add_row(*(Text(_render(column, row.get(column.field))) for column in columns))
        console.print(table)

    def record(self, document: Mapping[str, Any], fields: Sequence[Column] | None = None) -> None:
        """One object: JSON as is, a two-column table otherwise."""
        if self.fmt in ("json", "jsonl"):
            self.stdout.write(json_text(document, pretty=self.fmt == "json") + "\n")
            return
        if self.fmt == "csv":
            self._csv_rows([document], fields or [])
            return
        shown = fields or [Column(name, name) for name in document]
        pairs = [
            {"field": column.header, "value": _render(column, document.get(column.field))}
            for column in shown
        ]
        self._table(
            pairs, [Column("field", "field"), Column("value", "value")], title=None, footer=None
        )

    def outcome(self, document: Mapping[str, Any], message: str) -> None:
        """What a command did: ``document`` for json/jsonl/csv, else one line (none if quiet)."""
        if self.fmt in ("json", "jsonl", "csv"):
            self.record(document)
        elif not self.quiet:
            self.line(message)

    def diff(self, text: str, *, err: bool = False) -> None:
        """A unified diff, exact; coloured only when its stream is a TTY (and colour is on)."""
        stream = self.stderr if err else self.stdout
        if not (self.color and _isatty(stream)):
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
            self.stderr.write(message + "\n")

    def warn(self, message: str) -> None:
        self.stderr.write(f"warning: {message}\n")

    def error(self, message: str) -> None:
        prefix = "error:"
        if self.color and self.stderr_is_tty:
            prefix = "\x1b[31merror:\x1b[0m"
        self.stderr.write(f"{prefix} {message}\n")

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
        self.stderr.write(f"{question} [y/N] ")
        self.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise RefusedError(f"{what} cancelled: not confirmed")

    def confirm_by_typing(self, question: str, expected: str, *, what: str) -> None:
        """Ask the operator to type ``expected`` exactly (for the most destructive paths)."""
        if not self.stdin_is_tty:
            return
        self.stderr.write(f"{question}\nType {expected} to confirm: ")
        self.stderr.flush()
        if sys.stdin.readline().rstrip("\n") != expected:
            raise RefusedError(f"{what} cancelled: the text typed did not match")

    # -- progress -------------------------------------------------------------

    @contextmanager
    def progress(self, description: str, total: int | None = None) -> Iterator[Progress]:
        """A progress bar on stderr, only on a TTY and without --quiet."""
        if self.quiet or not self.stderr_is_tty:
            yield Progress(None, None)
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as RichProgress

        bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self._console(self.stderr),
            transient=True,
        )
        with bar:
            task = bar.add_task(description, total=total)
            yield Progress(bar, task)


class Progress:
    """Handle a command advances; a no-op off a TTY."""

    def __init__(self, bar: Any, task: Any) -> None:
        self._bar = bar
        self._task = task

    def advance(self, amount: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, amount)

    def total(self, total: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, total=total)


def _render(column: Column, value: Any) -> str:
    if column.render is not None:
        return column.render(value)
    return _cell(value)


def _csv_cell(value: Any) -> Any:
    if isinstance(value, (list, tuple, dict)):
        return json_text(value)
    return value


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
