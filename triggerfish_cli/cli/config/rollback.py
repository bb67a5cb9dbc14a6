"""`config rollback`: write a stored version back to the file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from triggerfish_cli.cli.config.common import ReasonOpt, RedactOpt, app, versions_store
from triggerfish_cli.cli.options import (
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    YesOpt,
    begin,
    complete_config_version,
)
from triggerfish_cli.errors import InvalidDataError, NotFoundError


def _secrets_file(source: Path | None) -> dict[str, Any]:
    if source is None:
        return {}
    # lazy: config.rollback adds 13 modules (hashlib) to `config --help`
    from triggerfish_cli.config.rollback import parse_secret_values

    try:
        text = sys.stdin.read() if str(source) == "-" else source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(f"{source}: no such secrets file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidDataError(f"{source}: cannot read the secrets file ({exc})") from None
    return parse_secret_values(text, "stdin" if str(source) == "-" else str(source))


def _ask(path: str) -> str:
    # lazy: getpass adds 2 modules (termios) to `config --help`; only a TTY prompt needs it
    import getpass

    return getpass.getpass(f"value for {path} (hidden; empty to skip): ", stream=sys.stderr)


def _complete_storage(incomplete: str) -> list[str]:
    return [choice for choice in ("refuse", "keep", "switch") if choice.startswith(incomplete)]


@app.command("rollback")
def rollback_cmd(
    ctx: typer.Context,
    version: Annotated[
        str | None,
        typer.Argument(
            help="The version to restore: 13 or v13 (default: the version before the newest, "
            "i.e. the newest one that differs from the file).",
            show_default=False,
            autocompletion=complete_config_version,
        ),
    ] = None,
    secrets_from_current: Annotated[
        bool,
        typer.Option(
            "--secrets-from-current",
            help="Fill the version's redacted values from the same paths in the current file.",
        ),
    ] = False,
    secrets_file: Annotated[
        Path | None,
        typer.Option(
            "--secrets-file",
            help="YAML/JSON mapping of dotted path -> value for redacted values (- for stdin).",
            show_default=False,
        ),
    ] = None,
    storage: Annotated[
        str,
        typer.Option(
            "--storage",
            help="When the version's storage: section differs from the file's: refuse "
            "(exit 4), keep the file's section and roll back the rest, or switch to the "
            "version's store.",
            metavar="refuse|keep|switch",
            show_default=True,
            autocompletion=_complete_storage,
        ),
    ] = "refuse",
    redact: RedactOpt = False,
    reason: ReasonOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write a stored version back to the file: shows the diff, asks, snapshots first.

    The current file is stored as a version first (unless it already is one), the
    new text is validated and written atomically keeping the file's mode, and the
    rollback is recorded as a new version. Values redacted from the version must be
    supplied again: --secrets-from-current, --secrets-file, or typed (hidden) on a TTY.
    A version whose storage: section differs from the file's would move the store
    underneath: refused unless --storage keep or --storage switch.
    """
    # lazy: config.versions and config.rollback add 13 modules to `config --help`
    from triggerfish_cli.config import versions as cv
    from triggerfish_cli.config.rollback import SecretSupply, apply_rollback, plan_rollback

    st, out = begin(ctx, fmt, quiet)
    provider = versions_store(st, out, dry_run=dry_run)
    supply = SecretSupply(
        values=_secrets_file(secrets_file),
        from_current=secrets_from_current,
        prompt=_ask if out.stdin_is_tty else None,
    )
    target = cv.parse_version_arg(version) if version is not None else None
    plan = plan_rollback(
        provider,
        st.config_path,
        target,
        supply=supply,
        redact=redact,
        dry_run=dry_run,
        storage=storage,
    )
    for warning in plan.warnings:
        out.warn(warning)
    path, number = st.config_path, plan.target.number
    if plan.noop:
        out.outcome(plan.as_dict(dry_run=dry_run), f"{path} already is v{number}")
        return
    if plan.secrets_missing:
        out.info(f"v{number} needs values for {', '.join(plan.secrets_missing)}")
    if dry_run:
        first = "snapshot the current file, then " if plan.needs_snapshot else ""

        def show() -> None:  # the diff is the dry run's result: shown with -q too
            out.diff(plan.diff)
            if not out.quiet:
                out.line(f"would {first}roll {path} back to v{number}")

        out.result(plan.as_dict(dry_run=True), show, always=True)
        return
    out.for_people(lambda: out.diff(plan.diff, err=True))
    out.confirm(f"Roll {path} back to v{number}?", yes=yes, what="the rollback")
    result = apply_rollback(provider, plan, reason=reason)
    if result["snapshot"] is not None:
        out.info(f"stored the current file as v{result['snapshot']} first")
    if result["backup_copy"] is not None:
        out.info(
            f"it held plain-text secrets the store does not keep: copied to {result['backup_copy']}"
        )
    out.outcome(result, f"rolled {path} back to v{number} (recorded as v{result['version']})")
