"""What the CLI takes from Typer's internals (cli/typer_compat.py) is still there and works.

A Typer release that moves any of it fails here, naming what moved, instead of
somewhere in the middle of a command.
"""

from __future__ import annotations

import typer

from triggerfish_cli.cli import typer_compat
from triggerfish_cli.cli.typer_compat import ParameterSource, click


def test_the_bundled_click_is_what_typer_builds_commands_of() -> None:
    app = typer.Typer()

    @app.command()
    def hello(name: str = typer.Option("x", envvar="TF_COMPAT_NAME")) -> None:
        pass

    command = typer.main.get_command(app)
    assert isinstance(command, click.Command)
    ctx = click.Context(command, info_name="t", resilient_parsing=True)
    assert isinstance(ctx, click.Context)
    for name in ("NoArgsIsHelpError", "ClickException", "UsageError"):
        assert issubclass(getattr(click.exceptions, name), Exception), name
    assert {"ENVIRONMENT", "COMMANDLINE", "DEFAULT"} <= set(ParameterSource.__members__)
    parsed = command.make_context("t", ["--name", "y"])
    assert parsed.get_parameter_source("name") == ParameterSource.COMMANDLINE


def test_every_shell_gets_a_script_that_asks_the_program() -> None:
    for shell in ("bash", "zsh", "fish"):
        script = typer_compat.shell_script("tf-compat", "_TF_COMPAT_COMPLETE", shell)
        assert "_TF_COMPAT_COMPLETE" in script and "tf-compat" in script, shell
