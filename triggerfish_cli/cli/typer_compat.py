"""The one module that touches Typer's internals.

Typer 0.26+ bundles its own copy of Click as ``typer._click`` (a separately
installed ``click`` is not what Typer's commands are made of), and its shell
completion lives in private modules. Everything of that kind that the CLI
needs is named here; tests/cli/test_typer_compat.py fails on a Typer release
that moves any of it.
"""

from __future__ import annotations

import os
import re

from typer import _click as click
from typer._click.core import ParameterSource
from typer._click.shell_completion import add_completion_class, split_arg_string
from typer._completion_classes import BashComplete, completion_init
from typer._completion_shared import get_completion_script

__all__ = ["ParameterSource", "click", "init_completion", "shell_script"]

#: Typer's bash shim, also passing the line up to the cursor and the word breaks.
_BASH_SCRIPT = """
%(complete_func)s() {
    local IFS=$'\\n'
    COMPREPLY=( $( env COMP_WORDS="${COMP_WORDS[*]}" \\
                   COMP_CWORD=$COMP_CWORD \\
                   COMP_LINE="${COMP_LINE:0:COMP_POINT}" \\
                   COMP_WORDBREAKS="$COMP_WORDBREAKS" \\
                   %(autocomplete_var)s=complete_bash $1 ) )
    return 0
}

complete -o default -F %(complete_func)s %(prog_name)s
"""


class _WholeWordsBash(BashComplete):
    """Typer's bash completion, a word holding a ``:`` kept whole.

    bash splits the line at every character of ``COMP_WORDBREAKS`` (``:`` and
    ``=`` among them), so ``kv get sessions:ab`` comes as the words ``sessions``,
    ``:``, ``ab``, and what it puts in place is only the piece after the last
    break. The shim passes the line up to the cursor: the words are read from
    it, and each candidate goes back without the part bash keeps.
    """

    def get_completion_args(self) -> tuple[list[str], str]:
        line = os.environ.get("COMP_LINE")
        if not line:  # an older shim, or a caller that set only COMP_WORDS
            return super().get_completion_args()
        words = split_arg_string(line)
        incomplete = "" if line[-1].isspace() or not words else words.pop()
        return words[1:], incomplete

    def complete(self) -> str:
        args, incomplete = self.get_completion_args()
        breaks = re.sub(r"[\s\"']", "", os.environ.get("COMP_WORDBREAKS", ""))
        kept = incomplete[: max((incomplete.rfind(c) for c in breaks), default=-1) + 1]
        values = (item.value for item in self.get_completions(args, incomplete))
        return "\n".join(
            value[len(kept) :] if kept and value.startswith(kept) else value for value in values
        )


def init_completion() -> None:
    """Register Typer's completion classes (``source_bash``, ``complete_zsh``, ...):
    only when completing or printing a script, so that normal runs never pay for them."""
    completion_init()
    add_completion_class(_WholeWordsBash, "bash")


def shell_script(prog: str, complete_var: str, shell: str) -> str:
    """The completion shim for ``shell`` (Typer's; bash's passing the line as well):
    it asks ``prog`` itself for the words."""
    init_completion()
    if shell == "bash":
        name = "_" + re.sub(r"\W", "", prog.replace("-", "_")) + "_completion"
        variables = {"complete_func": name, "prog_name": prog, "autocomplete_var": complete_var}
        return (_BASH_SCRIPT % variables).strip()
    return str(get_completion_script(prog_name=prog, complete_var=complete_var, shell=shell))
