"""The streams and terminal of an Output (its parts are mixins on this base)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from typing import IO, Any

from triggerfish_cli.cli.output.text import TableOptions, display_width, isatty


class Base:
    """What every part of :class:`~triggerfish_cli.cli.output.Output` stands on: the
    format, the streams, the options, and the terminal."""

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
        return isatty(self.stdout)

    @property
    def stderr_is_tty(self) -> bool:
        return isatty(self.stderr)

    @property
    def stdin_is_tty(self) -> bool:
        return isatty(sys.stdin)

    def width(self) -> int | None:
        """The terminal's width when stdout is one (COLUMNS first), else None: no limit."""
        if not self.stdout_is_tty:
            return None
        return max(shutil.get_terminal_size((80, 24)).columns, 20)

    def _console(self, stream: IO[str]) -> Any:
        # lazy: rich.console adds 45 modules (~25 ms) to `kv get --raw` (TID253)
        from rich.console import Console

        tty = isatty(stream)
        return Console(
            file=stream,
            force_terminal=tty,
            no_color=not (self.color and tty),
            highlight=False,
            soft_wrap=not tty,
            width=None if tty else 4096,
        )

    def _fold(self, stream: IO[str], text: str, wrap: bool = True) -> str:
        """``text`` wrapped at spaces to the terminal's width when ``stream`` is one."""
        if not wrap or not isatty(stream):
            return text
        width = max(shutil.get_terminal_size((80, 24)).columns, 20)
        if all(display_width(part) <= width for part in text.split("\n")):
            return text
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
