"""`triggerfish-admin help [COMMAND]... [--json]` and `triggerfish-admin completion SHELL`."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from triggerfish_cli import PROG
from triggerfish_cli.cli.context import state
from triggerfish_cli.errors import UsageError


def _single(name: str, help_text: str) -> typer.Typer:
    return typer.Typer(
        name=name,
        help=help_text,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        add_completion=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


app = _single("help", "Show help for a command, or the whole command tree as JSON.")


@app.command("help")
def help_cmd(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The command path, e.g. `kv list` (default: the whole tool).", show_default=False
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the command tree (every command and option) "
            "as JSON, for tools and scripts.",
        ),
    ] = False,
) -> None:
    """Show help for a command, or the whole command tree as JSON (also with -f json)."""
    # lazy: cli.command_tree is not loaded by `help --help`
    from triggerfish_cli.cli.command_tree import command_tree, root_command

    as_json = as_json or state(ctx).fmt in ("json", "jsonl")
    node = root_command()
    path: list[str] = []
    for name in command or []:
        ctx = typer.Context(node, info_name=name, resilient_parsing=True)
        child = node.get_command(ctx, name) if hasattr(node, "get_command") else None
        if child is None:
            raise UsageError(f"no such command: {' '.join([PROG, *path, name])}")
        node = child
        path.append(name)
    if as_json:
        sys.stdout.write(
            json.dumps(command_tree(node, tuple(path)), ensure_ascii=False, indent=2) + "\n"
        )
        return
    ctx = typer.Context(node, info_name=" ".join([PROG, *path]))
    sys.stdout.write(node.get_help(ctx) + "\n")


completion_app = _single("completion", "Print the shell completion script for bash, zsh or fish.")


@completion_app.command("completion")
def completion_cmd(
    shell: Annotated[
        str,
        typer.Argument(help="bash, zsh or fish.", autocompletion=lambda: ["bash", "zsh", "fish"]),
    ],
) -> None:
    """Print the shell completion script for bash, zsh or fish.

    For this shell only: source <(triggerfish-admin completion bash); for good,
    write it into ~/.local/share/bash-completion/completions/ (make it first).
    """
    # lazy: cli.reference is not loaded by `completion --help`
    from triggerfish_cli.cli.reference import SHELLS, completion_script

    if shell not in SHELLS:
        raise UsageError(f"unknown shell {shell!r}: use one of {', '.join(SHELLS)}")
    sys.stdout.write(completion_script(shell))
