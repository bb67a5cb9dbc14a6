"""Run the installed command in a real pseudo-terminal and read the screen it leaves."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT = str(Path(sys.executable).parent / "triggerfish-admin")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


@dataclass
class Screen:
    raw: str  # what the program wrote, line endings normalised
    lines: list[str]  # the logical lines, escape sequences and redrawn progress removed
    rows: list[str]  # the terminal's screen rows, as a terminal emulator shows them


def run_in_terminal(args: list[str], columns: int, env: dict[str, str]) -> Screen:
    """``triggerfish-admin ARGS`` with stdout, stderr and stdin on a pty ``columns`` wide."""
    import pexpect
    import pyte

    child = pexpect.spawn(
        SCRIPT,
        args,
        env={**env, "COLUMNS": str(columns), "TERM": "xterm-256color"},
        dimensions=(50, columns),
        encoding="utf-8",
        codec_errors="replace",
        timeout=120,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, (args, child.exitstatus, child.before)
    raw = (child.before or "").replace("\r\n", "\n")
    # what stays of each line once progress bars (redrawn after \r) are gone
    lines = [strip_ansi(line).rsplit("\r", 1)[-1] for line in raw.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    screen = pyte.Screen(columns, len(lines) * 3 + 10)
    stream = pyte.Stream(screen)
    stream.feed(raw.replace("\n", "\r\n"))
    rows = [row.rstrip() for row in screen.display]
    while rows and rows[-1] == "":
        rows.pop()
    return Screen(raw, lines, rows)


def environment(base: Path, home: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    keep.pop("NO_COLOR", None)
    keep.pop("COLUMNS", None)
    return {**keep, "TRIGGERFISH_DATA_DIR": str(base), "HOME": str(home)}
