"""The one module that touches Typer's internals.

Typer 0.26+ bundles its own copy of Click as ``typer._click`` (a separately
installed ``click`` is not what Typer's commands are made of), and its shell
completion lives in private modules. Everything of that kind that the CLI
needs is named here; tests/cli/test_typer_compat.py fails on a Typer release
that moves any of it.
"""

from __future__ import annotations

from typer import _click as click
from typer._click.core import ParameterSource
from typer._completion_classes import completion_init
from typer._completion_shared import get_completion_script

__all__ = ["ParameterSource", "click", "init_completion", "shell_script"]


def init_completion() -> None:
    """Register Typer's completion classes (``source_bash``, ``complete_zsh``, ...):
    only when completing or printing a script, so that normal runs never pay for them."""
    completion_init()


def shell_script(prog: str, complete_var: str, shell: str) -> str:
    """Typer's completion shim for ``shell``: it asks ``prog`` itself for the words."""
    init_completion()
    return str(get_completion_script(prog_name=prog, complete_var=complete_var, shell=shell))
