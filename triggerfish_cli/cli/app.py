"""The root command: global options, the command groups, and the one error boundary."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from triggerfish_cli import PROG, __version__
from triggerfish_cli.cli.boundary import BoundaryGroup
from triggerfish_cli.cli.context import own_process, state
from triggerfish_cli.cli.options import Format
from triggerfish_cli.cli.typer_compat import ParameterSource
from triggerfish_cli.threads import HELD_SIGNALS

app = typer.Typer(
    name=PROG,
    cls=BoundaryGroup,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _complete_backend(incomplete: str) -> list[str]:
    # lazy: storage.backends adds 33 modules (sqlite3) to `--help`
    from triggerfish_cli.storage.backends import known_backends

    return [name for name in known_backends() if name.startswith(incomplete)]


def _complete_live_writers(incomplete: str) -> list[str]:
    # lazy: storage.backends adds 33 modules (sqlite3) to `--help`
    from triggerfish_cli.storage.backends import LIVE_WRITER_MODES

    return [mode for mode in LIVE_WRITER_MODES if mode.startswith(incomplete)]


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"{PROG} {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            envvar="TRIGGERFISH_DB",
            show_default=False,
            metavar="PATH|URL",
            help="The store to work on; it must exist: a SQLite path, "
            "postgresql://[USER@]HOST[:PORT]/DB?schema=NAME or s3://BUCKET/PREFIX, as migrate "
            "takes them (passwords and keys never: PGPASSWORD, ~/.pgpass, the AWS environment; "
            "the S3 endpoint from AWS_ENDPOINT_URL or the storage: section). Default: "
            "<base>/data/triggerfish.db, <base> found as the gateway finds it: "
            "$TRIGGERFISH_DATA_DIR, else /data inside Docker, else ~/.triggerfish.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="TRIGGERFISH_CONFIG",
            show_default=False,
            help="triggerfish.yaml to read (default: <base>/triggerfish.yaml).",
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            envvar="TRIGGERFISH_BACKEND",
            show_default=False,
            metavar="NAME",
            autocompletion=_complete_backend,
            help="Storage backend, overriding the storage: section: sqlite, memory, postgres "
            "or s3 (postgres and s3 take their dsn/schema or bucket/prefix/endpoint_url/region "
            "from the storage: section; postgres also from the libpq PG* environment).",
        ),
    ] = None,
    live_writers: Annotated[
        str | None,
        typer.Option(
            "--live-writers",
            envvar="TRIGGERFISH_LIVE_WRITERS",
            show_default=False,
            metavar="MODE",
            autocompletion=_complete_live_writers,
            help="SQLite: what to do about the other processes that have the store open "
            "(the gateway, which never waits for a lock) while we write: freeze (the "
            "default: pause them for each short write transaction, tens of milliseconds), "
            "refuse (exit 6, naming them) or ignore (write anyway: the gateway's own writes "
            "may fail meanwhile). Also storage.live_writers.",
        ),
    ] = None,
    fmt: Annotated[
        Format,
        typer.Option(
            "--format",
            "-f",
            envvar="TRIGGERFISH_FORMAT",
            help="Output format for every command.",
        ),
    ] = Format.table,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            envvar="TRIGGERFISH_QUIET",
            help="Print nothing on success.",
        ),
    ] = False,
    no_color: Annotated[
        bool,
        typer.Option("--no-color", help="No colour in output (also when NO_COLOR is set)."),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            envvar="TRIGGERFISH_DEBUG",
            help="Show tracebacks of errors.",
        ),
    ] = False,
    columns: Annotated[
        str | None,
        typer.Option(
            "--columns",
            metavar="A,B,...",
            show_default=False,
            help="Tables and CSV: these columns, in this order (any field of the JSON rows).",
        ),
    ] = None,
    wide: Annotated[
        bool,
        typer.Option("--wide", "-w", help="Tables: every column, nothing cut to fit."),
    ] = False,
    no_headers: Annotated[
        bool, typer.Option("--no-headers", help="Tables: no header line (for scripts).")
    ] = False,
    totals: Annotated[
        bool | None,
        typer.Option(
            "--totals/--no-totals",
            show_default=False,
            help="Tables: the totals line (default: on a terminal only).",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """The operator's command line for the storage of Triggerfish.

    Inspect a live Triggerfish store, keep it within its retention rules,
    search the agent's memories at a chosen classification, back it up and
    roll the configuration back, while the gateway keeps writing. Works on
    the gateway's own SQLite file by default.

    Exit codes: 0 ok, 1 unexpected, 2 usage, 3 not found, 4 refused,
    5 verification failed, 6 busy or locked, 7 backend unavailable,
    8 invalid data or config, 9 cannot write (disk full, read-only),
    130 interrupted.
    """
    # lazy: storage.backends adds 33 modules (sqlite3) to `--help`
    from triggerfish_cli.storage.backends import choose_live_writers

    choose_live_writers(live_writers)
    st = state(ctx)
    st.db, st.config, st.backend = db, config, backend
    st.db_from = _given_by(ctx, "db", "--db", "TRIGGERFISH_DB")
    st.backend_from = _given_by(ctx, "backend", "--backend", "TRIGGERFISH_BACKEND")
    st.fmt, st.quiet, st.debug = fmt.value, quiet, debug
    st.color = not no_color
    st.columns, st.wide, st.headers, st.totals = columns, wide, not no_headers, totals


def _given_by(ctx: typer.Context, name: str, option: str, variable: str) -> str:
    """``option``, or ``variable`` when the value came from the environment."""
    source = ctx.get_parameter_source(name)
    return variable if source == ParameterSource.ENVIRONMENT else option


def main() -> None:
    _unblock_held_signals()
    own_process()
    app()


def _unblock_held_signals() -> None:
    """Start with Ctrl-C and kill deliverable, whatever mask the parent left us.

    A signal mask survives fork and exec: a parent that started us while it
    held those signals back (as our own sweeps and write gate do, for a few
    milliseconds) would leave them blocked for our whole run, and a Ctrl-C
    would never land. Ignored signals (``nohup``, a shell's background job)
    stay ignored: only the mask is reset.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
