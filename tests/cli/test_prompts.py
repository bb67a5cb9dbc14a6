"""Prompts in a real pseudo-terminal, through the installed console script.

A declined question is an answer, not an error: "not confirmed; nothing
changed", exit 4, without "error:". Ctrl-C (or Ctrl-D) at a prompt leaves the
prompt's line first: what follows starts on a line of its own (Ctrl-C: exit 130).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pexpect

from tests.helpers.gateway import GATEWAY_ROWS, SESSION_ID
from tests.helpers.terminal import SCRIPT, strip_ansi
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

KEY = f"sessions:{SESSION_ID}"


def prompt(db: Path) -> pexpect.spawn:
    """``kv delete KEY`` on a terminal, waiting at its question."""
    child = pexpect.spawn(
        str(SCRIPT),
        ["--db", str(db), "kv", "delete", KEY],
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm-256color"},
        dimensions=(40, 100),
        encoding="utf-8",
        timeout=120,
    )
    child.logfile_read = io.StringIO()
    child.expect_exact("[y/N] ")
    return child


def finish(child: pexpect.spawn) -> list[str]:
    """The screen's lines (all of them: the question's too), and the child reaped."""
    child.expect(pexpect.EOF)
    child.close()
    assert isinstance(child.logfile_read, io.StringIO)
    text = strip_ansi(child.logfile_read.getvalue()).replace("\r\n", "\n")
    lines = [line for line in text.split("\n") if line.strip()]
    question = next(line for line in lines if "[y/N]" in line)
    assert question.rstrip().endswith(("[y/N]", "^C", "^D", "n")), lines  # nothing after
    return lines


def still_there(db: Path) -> bool:
    store = SqliteStorage(db)
    try:
        return store.get(KEY) == GATEWAY_ROWS[KEY]
    finally:
        store.close()


def test_a_declined_prompt_says_nothing_changed_without_error(gateway_db: Path) -> None:
    child = prompt(gateway_db)
    child.sendline("n")
    lines = finish(child)
    assert child.exitstatus == 4
    assert lines[-1] == "not confirmed; nothing changed"
    assert not any("error" in line for line in lines)
    assert still_there(gateway_db)


def test_ctrl_c_at_a_prompt_ends_the_prompts_line_first(gateway_db: Path) -> None:
    child = prompt(gateway_db)
    child.sendintr()
    lines = finish(child)
    assert child.exitstatus == 130
    assert lines[-1] == "error: interrupted"  # on its own line, not after "[y/N] "
    assert still_there(gateway_db)


def test_ctrl_d_at_a_prompt_is_declined_on_a_line_of_its_own(gateway_db: Path) -> None:
    child = prompt(gateway_db)
    child.sendeof()
    lines = finish(child)
    assert child.exitstatus == 4
    assert lines[-1] == "not confirmed; nothing changed"
    assert still_there(gateway_db)
