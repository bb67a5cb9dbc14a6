"""Options shared by many commands, defined once."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from triggerfish_cli.cli.context import AppState, state

if TYPE_CHECKING:
    from triggerfish_cli.classification import Level
    from triggerfish_cli.cli.output import Output
    from triggerfish_cli.storage.provider import StorageProvider


class Format(str, enum.Enum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"


FormatOpt = Annotated[
    Format | None,
    typer.Option(
        "--format",
        "-f",
        help="Output format: table, json, jsonl or csv (default: the global --format).",
        show_default=False,
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="Print nothing on success (errors still go to stderr)."),
]
YesOpt = Annotated[
    bool,
    typer.Option("--yes", "-y", help="Do it without asking (needed when stdin is not a TTY)."),
]
DryRunOpt = Annotated[
    bool,
    typer.Option("--dry-run", "-n", help="Show what would happen; change nothing."),
]


def fmt_value(fmt: Format | None) -> str | None:
    return fmt.value if fmt is not None else None


def begin(
    ctx: typer.Context, fmt: Format | None = None, quiet: bool | None = None
) -> tuple[AppState, Output]:
    """Every command's first line: this invocation's state, and its output in the
    format asked for (the command's ``--format``, else the global one; ``quiet``
    the command's ``--quiet``, else the global one)."""
    st = state(ctx)
    return st, st.output(fmt_value(fmt), quiet or None)


def sub_app(name: str, help_text: str) -> typer.Typer:
    """A command group with the settings every group shares."""
    app = typer.Typer(
        name=name,
        help=help_text,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        add_completion=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    @app.callback()
    def _group() -> None:
        # A callback keeps a one-command group a group (`demo create`, not `demo`).
        pass

    return app


def complete_namespace(incomplete: str) -> list[str]:
    """Shell completion of namespace names, from the registry."""
    # lazy: namespaces adds 12 modules to `--help`
    from triggerfish_cli.namespaces import NAMESPACES

    return [ns.name for ns in NAMESPACES if ns.name.startswith(incomplete)]


@contextmanager
def completion_store(ctx: typer.Context) -> Iterator[StorageProvider]:
    """The store shell completion reads from: resolved from the root's parsed options
    (--db, --config, --backend and their environment variables), never created.
    Completion runs before any command callback."""
    params = ctx.find_root().params
    st = AppState(db=params.get("db"), config=params.get("config"), backend=params.get("backend"))
    try:
        yield st.provider()
    finally:
        st.close()


def complete_store_namespace(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of the namespaces the store holds keys in (one probe each);
    every known namespace when the store cannot be opened."""
    # lazy: namespaces and kv.keys add modules to `--help`
    from triggerfish_cli.kv.keys import namespaces_present
    from triggerfish_cli.namespaces import NAMESPACES

    candidates = [ns for ns in NAMESPACES if ns.name.startswith(incomplete)]
    try:
        with completion_store(ctx) as provider:
            candidates = namespaces_present(provider, candidates)
    except Exception:  # completion must never print a traceback into the shell
        pass
    return [ns.name for ns in candidates]


def complete_key(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of the store's keys by prefix (at most 100, one range read);
    nothing when the store cannot be opened."""
    # lazy: kv.keys adds modules to `--help`
    from triggerfish_cli.kv.keys import completion_keys

    try:
        with completion_store(ctx) as provider:
            return completion_keys(provider, incomplete)
    except Exception:  # completion must never print a traceback into the shell
        return []


def complete_config_version(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of the config version numbers stored in the store
    (:func:`completion_store`); any failure (no store, server down, broken config)
    completes nothing."""
    try:
        # lazy: config.versions adds 30 modules to `--help`, 11 to `kv get --raw`
        from triggerfish_cli.config.versions import version_numbers

        with completion_store(ctx) as provider:
            numbers = version_numbers(provider)
    except Exception:  # completion must never print a traceback into the shell
        return []
    bare = incomplete[1:] if incomplete[:1] in ("v", "V") else incomplete
    prefix = incomplete[:1] if bare != incomplete else ""
    return [f"{prefix}{n}" for n in reversed(numbers) if str(n).startswith(bare)]


def complete_level(incomplete: str) -> list[str]:
    """Shell completion of classification levels."""
    # lazy: classification is not loaded by `--help`
    from triggerfish_cli.classification import LEVEL_NAMES

    return [name for name in LEVEL_NAMES if name.startswith(incomplete)]


def _check_taint(value: str) -> str:
    # lazy: classification is not loaded by `--help`
    from triggerfish_cli.classification import parse_level

    try:
        parse_level(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def check_level(value: str | None) -> str | None:
    """An optional level option: checked when given (exit 2 otherwise)."""
    return None if value is None else _check_taint(value)


TaintOpt = Annotated[
    str,
    typer.Option(
        "--taint",
        "-t",
        envvar="TRIGGERFISH_TAINT",
        callback=_check_taint,
        autocompletion=complete_level,
        metavar="LEVEL",
        help="Act as a session at this level: PUBLIC, INTERNAL, CONFIDENTIAL or RESTRICTED. "
        "Reads see this level and below; writes land at exactly this level.",
    ),
]
AgentOpt = Annotated[
    str | None,
    typer.Option(
        "--agent",
        "-a",
        show_default=False,
        help="The agent whose memory to use (default: main-session; cron and webhook runs "
        "are scheduler-<channel>-<ms>).",
    ),
]
AllAgentsOpt = Annotated[
    bool, typer.Option("--all-agents", "-A", help="Every agent instead of one.")
]


def taint_level(value: str) -> Level:
    """The Level of a --taint value (already checked by its callback)."""
    # lazy: classification is not loaded by `--help`
    from triggerfish_cli.classification import parse_level

    return parse_level(value)
