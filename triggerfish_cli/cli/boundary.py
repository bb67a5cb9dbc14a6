"""The root group: the lazy command groups, the global options after a command, and the
one error boundary (every error to one line on stderr and its documented exit code)."""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from triggerfish_cli import PROG, errors
from triggerfish_cli.cli.typer_compat import ParameterSource, click, init_completion
from triggerfish_cli.errors import WRITE_ERRNOS, ExitStatus, TriggerfishError, write_error

COMPLETE_VAR = "_TRIGGERFISH_ADMIN_COMPLETE"

#: Command groups, imported only when used: a call runs one group, and
#: building every group's commands at start-up would cost every scripted call.
#: name -> (module holding `app`, one-line help for the listing).
GROUPS: dict[str, tuple[str, str]] = {
    "kv": ("triggerfish_cli.cli.kv", "Inspect and edit the raw key-value store."),
    "demo": ("triggerfish_cli.cli.demo", "Build a realistic demo store to try the tool on."),
    "config": ("triggerfish_cli.cli.config", "Versions of triggerfish.yaml, and rollback."),
    "help": (
        "triggerfish_cli.cli.help",
        "Show help for a command, or the whole command tree as JSON.",
    ),
    "completion": (
        "triggerfish_cli.cli.help:completion_app",
        "Print the shell completion script for bash, zsh or fish.",
    ),
    "memory": ("triggerfish_cli.cli.memory", "Search and manage agent memories at a chosen taint."),
    "retention": (
        "triggerfish_cli.cli.retention",
        "Apply the retention policies: see them, plan a sweep, sweep.",
    ),
    "backup": (
        "triggerfish_cli.cli.backup",
        "Back the store up; list, verify, restore and prune backups.",
    ),
    "migrate": (
        "triggerfish_cli.cli.migrate",
        "Move a store to another backend, verified and resumable.",
    ),
    "status": (
        "triggerfish_cli.cli.status",
        "Which store am I on, and who else is on it. Reads only.",
    ),
}


class Interrupted(TriggerfishError):
    exit_code = ExitStatus.INTERRUPTED.value


class PipeClosed(Exception):
    """stdout was closed by its reader (`| head`): not an OSError, so Click leaves it to us."""


class BoundaryGroup(TyperGroup):
    """Maps every error to one line on stderr and its documented exit code.

    Usage errors (2), TriggerfishErrors (their own code), Ctrl-C (130),
    anything else (1, with the traceback only under --debug). The same codes
    come out of ``CliRunner`` and of the installed script.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(GROUPS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in GROUPS:
            import importlib  # lazy: the group's module is found by name only when it runs

            module_name, _, attribute = GROUPS[cmd_name][0].partition(":")
            module = importlib.import_module(module_name)
            command = typer.main.get_command(getattr(module, attribute or "app"))
            command.name = cmd_name
            accept_globals(command, self)
            # lazy: the examples matter only to help output
            from triggerfish_cli.cli.examples import attach

            attach(command, cmd_name)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: Any) -> None:
        """List the groups from their one-line help, without importing them."""
        rows = []
        for name in self.list_commands(ctx):
            if name in GROUPS:
                rows.append((name, GROUPS[name][1]))
            else:
                command = super().get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(limit=70)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted("interrupted") from None
        except BrokenPipeError:
            raise PipeClosed from None

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if os.environ.get(COMPLETE_VAR):
            # Shell completion: register typer's completion classes (source_bash,
            # complete_bash, ...) only now, so normal runs never pay for them.
            init_completion()
        debug = "--debug" in argv or os.environ.get("TRIGGERFISH_DEBUG", "") not in ("", "0")
        code = 0
        try:
            result = super().main(
                args=argv,
                prog_name=prog_name or PROG,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
            code = result if isinstance(result, int) else 0
        except click.exceptions.NoArgsIsHelpError as exc:  # a bare group: its normal help
            sys.stdout.write(exc.ctx.get_help() + "\n")
        except click.exceptions.ClickException as exc:
            where = exc.ctx.command_path if getattr(exc, "ctx", None) else PROG  # type: ignore[attr-defined]
            code = _fail(f"{where}: {exc.format_message()} (see --help)", exc.exit_code)
        except typer.Abort:
            code = _fail("aborted", 130)
        except TriggerfishError as exc:
            if debug:
                _traceback()
            failure = errors.resource_error(exc) or exc
            answer = isinstance(failure, errors.NotConfirmedError)  # not an error
            code = _fail(str(failure), failure.exit_code, answer=answer)
        except KeyboardInterrupt:
            code = _fail("interrupted", 130)
        except (BrokenPipeError, PipeClosed):  # `... | head`: stop quietly, status 0
            _silence_stdout()
            code = 0
        except Exception as exc:
            if debug:
                _traceback()
            code = _unexpected(exc)
        metrics = sys.modules.get("triggerfish_cli.cli.metrics")
        if metrics is not None:  # a job asked for --metrics-file: record how it ended
            metrics.finish(code)
        if not standalone_mode:
            return code
        _flush()
        sys.exit(code)


def accept_globals(command: click.Command, root: click.Command) -> None:
    """Let every global option also be given after ``command`` and its subcommands.

    Each root option (except --version and --help) is added, hidden, to every
    command that has no option of that name itself. Given there, it re-runs
    the root callback with the new value: a value after the command overrides
    one before it, which overrides the environment; a command's own option of
    the same name (such as ``--format``) overrides both.
    """
    taken = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    taken |= {"--help", "-h"}
    for param in root.params:
        if param.param_type_name != "option" or param.name in ("version", "help"):
            continue
        opts = [opt for opt in param.opts if opt not in taken]
        if not opts:
            continue
        clone = copy.copy(param)
        clone.opts, clone.secondary_opts = opts, [o for o in param.secondary_opts if o not in taken]
        clone.hidden = True  # type: ignore[attr-defined]
        clone.expose_value, clone.is_eager = False, False
        clone.envvar, clone.default, clone.required = None, None, False

        def again(ctx: click.Context, option: click.Parameter, value: Any) -> None:
            if ctx.get_parameter_source(option.name or "") != ParameterSource.COMMANDLINE:
                return
            top = ctx.find_root()
            top.params[option.name or ""] = value
            assert top.command.callback is not None
            top.invoke(top.command.callback, **top.params)

        clone.callback = again
        command.params.append(clone)
    for sub in getattr(command, "commands", {}).values():
        accept_globals(sub, root)


def _unexpected(exc: Exception) -> int:
    """Exit 9 for a write refused (disk full, read-only), 10 when a resource ran out
    (open files, memory, threads), else 1."""
    exc.__traceback__ = None  # let go of what the failed work held (out of memory)
    failure: TriggerfishError | None = errors.resource_error(exc)
    if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
        failure = write_error(exc.filename or "(a file)", exc)
    if failure is not None:
        return _fail(str(failure), failure.exit_code)
    return _fail(
        f"unexpected error: {type(exc).__name__}: {exc} (rerun with --debug for details)", 1
    )


def _traceback() -> None:
    import traceback  # lazy: only for an unexpected error under --debug

    traceback.print_exc()


def _fail(message: str, code: int, *, answer: bool = False) -> int:
    line = " ".join(message.split()) if "\n" in message else message
    try:
        # lazy: the renderer is loaded only when there is an error to show
        from triggerfish_cli.cli.output import Output

        Output().error(line, answer=answer)
    except (MemoryError, OSError, ImportError):  # out of memory or files even for that
        with contextlib.suppress(OSError):
            os.write(2, f"error: {line}\n".encode("utf-8", "replace"))
    return code


def _flush() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
