"""Run the installed console script as an operator (or cron) runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("triggerfish-admin")


def run_script(
    *args: str, env: dict[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``triggerfish-admin ARGS`` in a child process; the test's environment plus ``env``."""
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        input=input,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


def one_line(stderr: str) -> str:
    """The one line of an error (never a traceback, never "unexpected")."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "unexpected" not in lines[0] and "Traceback" not in stderr
    return lines[0]
