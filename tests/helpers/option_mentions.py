"""Which options an error's text names, and whether the command it is about has them.

The convention the errors follow (issue 36): an option written alone (``pass
--force``) is one of the command that raised the error; an option of another
command is written with that command, in backticks (```backup list
--all-stores```, ```triggerfish-admin memory save --taint LEVEL```). Global
options (``--db``, ``--config``, ...) are every command's.

:func:`foreign` checks a text against the command that raised it (the
conftest runs it on every error a command raises in a test); the static scan
of ``tests/cli/test_hint_options.py`` runs it on the texts in the code.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import cache

from triggerfish_cli import PROG
from triggerfish_cli.cli.typer_compat import click

#: An option as a text names it: ``--name`` (not inside a word or a path).
OPTION = re.compile(r"(?<![\w/.-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
#: A span in backticks: a command line, when it starts with a command.
QUOTED = re.compile(r"`([^`]*)`")
#: A live writer as an error names it, with its own command line: data, not a hint.
PROCESS = re.compile(r"pid \d+ \([^()]*\)")


@cache
def root() -> click.Command:
    from triggerfish_cli.cli.command_tree import root_command

    return root_command()


def options_of(command: click.Command) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def resolve(words: Sequence[str]) -> list[click.Command] | None:
    """The chain of commands (root first) a command line's leading ``words`` name; None
    when they name no command (``--wait SECONDS``, ``retention.yaml``)."""
    words = list(words[1:] if words and words[0] == PROG else words)
    chain = [root()]
    for word in words:
        group = chain[-1]
        get = getattr(group, "get_command", None)
        sub = None if get is None or word.startswith("-") else get(click.Context(group), word)
        if sub is None:
            break
        chain.append(sub)
    return chain if len(chain) > 1 else None


def mentions(text: str) -> Iterator[tuple[str, list[click.Command] | None, str]]:
    """``(option, commands, where)`` for every option ``text`` names: ``commands`` is the
    chain of the command written before it in backticks (None: the raising command's)."""
    text = PROCESS.sub("pid", text)
    for span in QUOTED.finditer(text):
        chain = resolve(span.group(1).split())
        for option in OPTION.findall(span.group(1)):
            yield option, chain, span.group(0)
    for option in OPTION.findall(QUOTED.sub(" ", text)):
        yield option, None, option


def allowed(chain: Sequence[click.Command]) -> set[str]:
    """The options a command takes: its own and every one above it (global options)."""
    found = {"--help"}
    for command in chain:
        found |= options_of(command)
    return found


def path_of(chain: Sequence[click.Command]) -> str:
    return " ".join(command.name or PROG for command in chain[1:]) or PROG


def foreign(text: str, chain: Sequence[click.Command]) -> list[str]:
    """What ``text``, raised by the last command of ``chain``, names that is no option
    of the command it names (itself, or one in backticks)."""
    wrong = []
    for option, named, where in mentions(text):
        commands = named or chain
        if option not in allowed(commands):
            wrong.append(f"{where!r}: `{path_of(commands)}` has no {option}")
    return wrong


def every_command(
    command: click.Command | None = None, chain: tuple[click.Command, ...] = ()
) -> Iterator[tuple[click.Command, ...]]:
    """The chain (root first) of every command in the tree, groups included."""
    command = command or root()
    chain = (*chain, command)
    yield chain
    lister = getattr(command, "list_commands", None)
    if lister is None:
        return
    ctx = click.Context(command)
    for name in lister(ctx):
        sub = command.get_command(ctx, name)  # type: ignore[attr-defined]
        if sub is not None:
            yield from every_command(sub, chain)
