"""Messages, warnings, errors, prompts and progress bars: all on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from triggerfish_cli.cli.output.base import Base
from triggerfish_cli.cli.output.text import human_bytes, safe
from triggerfish_cli.errors import NotConfirmedError, RefusedError

#: What a declined prompt says (exit 4).
NOT_CONFIRMED = "not confirmed; nothing changed"


class Messages(Base):
    """Messages, prompts and progress, on stderr."""

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

    def error(self, message: str, *, answer: bool = False) -> None:
        """``error: message``; an ``answer`` (a declined prompt) without the prefix."""
        if answer:
            self.stderr.write(self._fold(self.stderr, safe(message, newlines=True)) + "\n")
            return
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
        if self._answer().strip().lower() not in ("y", "yes"):
            raise NotConfirmedError(NOT_CONFIRMED)

    def confirm_by_typing(self, question: str, expected: str, *, what: str) -> None:
        """Ask the operator to type ``expected`` exactly (for the most destructive paths)."""
        if not self.stdin_is_tty:
            return
        self.stderr.write(f"{safe(question)}\nType {safe(expected)} to confirm: ")
        if self._answer().rstrip("\n") != expected:
            raise NotConfirmedError(f"the text typed did not match: {NOT_CONFIRMED}")

    def _answer(self) -> str:
        """A line typed at the prompt just written. The next output starts on a line
        of its own: after Ctrl-C (then exit 130) or Ctrl-D the cursor is still on the
        prompt's line."""
        self.stderr.flush()
        try:
            line = sys.stdin.readline()
        except KeyboardInterrupt:
            self.stderr.write("\n")
            self.stderr.flush()
            raise
        if not line.endswith("\n"):
            self.stderr.write("\n")
        return line

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
        # lazy: rich.progress adds 63 modules (~35 ms) to `kv get --raw` (TID253)
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
    # lazy: rich (TID253), already loaded by progress(), the only caller
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
    # lazy: rich (TID253), already loaded by progress(), the only caller
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Percent(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text("" if task.total is None else f"{task.percentage:>3.0f}%")

    return Percent()


def _eta_column() -> Any:
    # lazy: rich (TID253), already loaded by progress(), the only caller
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
