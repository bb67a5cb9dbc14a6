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


def run_on_store(db: Path, base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``triggerfish-admin --db DB ARGS`` with no ``TRIGGERFISH_*`` setting of the test's
    but ``TRIGGERFISH_DATA_DIR=base``, and no stdin (a prompt cannot wait)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env["TRIGGERFISH_DATA_DIR"] = str(base)
    return subprocess.run(
        [str(SCRIPT), "--db", str(db), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def one_line(stderr: str) -> str:
    """The one line of an error (never a traceback, never "unexpected")."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "unexpected" not in lines[0] and "Traceback" not in stderr
    return lines[0]
