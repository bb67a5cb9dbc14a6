"""`triggerfish-admin config`: versions of triggerfish.yaml, and a safe way back."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggerfish_cli.cli import metrics
from triggerfish_cli.cli.context import AppState, state
from triggerfish_cli.cli.metrics import MetricsOpt
from triggerfish_cli.cli.options import (
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    YesOpt,
    complete_config_version,
    fmt_value,
    sub_app,
)

if TYPE_CHECKING:
    from triggerfish_cli.cli.output import Output
    from triggerfish_cli.storage.provider import StorageProvider

app = sub_app(
    "config",
    "Versions of triggerfish.yaml, and rollback.\n\n"
    "Versions live in the store as config:v<N> (the 10 newest are kept). The file is the "
    "global --config (default <base>/triggerfish.yaml). Plain-text secrets are never stored: "
    "they are refused, or masked with --redact.",
)

VersionArg = Annotated[
    str | None,
    typer.Argument(
        help="A version: 13 or v13 (default: see the command).",
        show_default=False,
        autocompletion=complete_config_version,
    ),
]
ReasonOpt = Annotated[
    str | None,
    typer.Option("--reason", "-m", help="Why: stored with the version.", show_default=False),
]
RedactOpt = Annotated[
    bool,
    typer.Option(
        "--redact",
        help='Store plain-text secrets masked as "<redacted>" instead of refusing (exit 4).',
    ),
]


def _provider(st: AppState, out: Output, *, dry_run: bool = False) -> StorageProvider:
    """The store holding the versions; a rollback killed or failing between writing the
    file and recording its version is finished first (a dry run only says so)."""
    from triggerfish_cli.config.rollback import PENDING_KEY, Pending, finish_pending
    from triggerfish_cli.errors import TriggerfishError

    provider = _open_provider(st, out)
    if dry_run:
        pending = provider.get(PENDING_KEY)
        if pending is not None and (found := Pending.load(pending)) is not None:
            out.warn(
                f"an interrupted rollback of {found.path} to v{found.target} is pending: "
                "the next config command without --dry-run finishes it"
            )
        return provider
    try:
        note = finish_pending(provider)
    except TriggerfishError as exc:
        out.warn(f"an interrupted rollback could not be finished: {exc.message}")
    else:
        if note is not None:
            out.info(note)
    return provider


def _open_provider(st: AppState, out: Output) -> StorageProvider:
    """The store holding the versions, even when the config file itself is broken or gone.

    At 3 a.m. the file may not parse: then its storage: block alone names the
    store, or the default store is used (config_storage.fallback_settings),
    with a warning either way.
    """
    from triggerfish_cli.config.storage import fallback_settings
    from triggerfish_cli.errors import (
        InvalidDataError,
        MissingStoreError,
        NotFoundError,
        TriggerfishError,
    )

    try:
        st.storage_config()
    except (InvalidDataError, NotFoundError) as exc:
        named = st.db is not None or st.backend is not None
        settings, from_block = fallback_settings(st.config_path, store_named=named)
        st.use_settings(settings)
        if not from_block:
            try:
                provider = st.provider()
            except MissingStoreError:
                raise exc from None  # no default store to fall back on: the file's error
            out.warn(f"{exc.message}; working on {provider.describe()} without it")
            return provider
        try:
            provider = st.provider()
        except TriggerfishError:
            raise InvalidDataError(
                exc.message,
                hint="its storage: section cannot be read; pass --db PATH or --backend "
                "to name the store holding the versions",
            ) from None
        out.warn(f"{exc.message}; its storage: section names {provider.describe()}")
        return provider
    return st.provider()


@app.command("snapshot")
def snapshot_cmd(
    ctx: typer.Context,
    reason: ReasonOpt = None,
    redact: RedactOpt = False,
    dry_run: DryRunOpt = False,
    metrics_file: MetricsOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Store the current file as a new version (unless it equals the newest)."""
    from triggerfish_cli.config import versions as config_versions

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    run = None if dry_run else metrics.begin(ctx, "config_snapshot", metrics_file)
    result = config_versions.snapshot(
        _provider(st, out, dry_run=dry_run),
        st.config_path,
        reason=reason,
        redact=redact,
        dry_run=dry_run,
    )
    metrics.snapshotted(run, result.version, result.unchanged)
    for warning in result.warnings:
        out.warn(warning)
    path = st.config_path
    if result.unchanged:
        out.outcome(result.as_dict(), f"unchanged: {path} equals v{result.version}, the newest")
        return
    if result.redacted:
        out.info(
            f'redacted {len(result.redacted)} plain-text secret(s) as "<redacted>": '
            f"{', '.join(result.redacted)}; a rollback to v{result.version} needs them again"
        )
    verb = "would store" if dry_run else "stored"
    message = f"{verb} {path} as v{result.version} ({result.bytes} bytes)"
    if result.evicted:
        message += f"; {'would remove' if dry_run else 'removed'} " + ", ".join(
            f"v{n}" for n in result.evicted
        )
    out.outcome(result.as_dict(), message)


@app.command("history")
def history_cmd(ctx: typer.Context, fmt: FormatOpt = None) -> None:
    """Every stored version, oldest first, and which one the file on disk is."""
    from triggerfish_cli.cli.output import Column, human_bytes, text_column
    from triggerfish_cli.config import files as config_files
    from triggerfish_cli.config import versions as cv

    st = state(ctx)
    out = st.output(fmt_value(fmt))
    listing = cv.list_versions(_provider(st, out))
    for problem in listing.problems:
        out.warn(problem)
    config = config_files.read_config(st.config_path, missing_ok=True)
    current = cv.current_number(listing, config)
    out.rows(
        (v.row(v.number == current) for v in listing.versions),
        [
            Column("version", "version", "right", lambda n: f"v{n}"),
            Column("created_at", "created"),
            Column("user", "user"),
            Column("source", "source", render=lambda s: s or ""),
            Column("bytes", "size", "right", human_bytes),
            Column("redacted", "redacted", "right", lambda r: str(len(r)) if r else ""),
            Column("current", "on disk", render=lambda c: "<- now" if c else ""),
            text_column("reason", "reason"),
        ],
        empty="no config versions stored yet (run `config snapshot`)",
    )
    if out.fmt == "table" and listing.versions:
        if config is None:
            out.info(f"{st.config_path} does not exist")
        elif current is None:
            out.info(f"{st.config_path} matches no stored version (see `config diff`)")


def _version_or_newest(provider: StorageProvider, text: str | None) -> Any:
    from triggerfish_cli.config import versions as cv
    from triggerfish_cli.errors import NotFoundError

    if text is not None:
        return cv.get_version(provider, cv.parse_version_arg(text))
    newest = cv.list_versions(provider).newest
    if newest is None:
        raise NotFoundError("no config versions stored", hint="run `config snapshot` first")
    return newest


@app.command("show")
def show_cmd(ctx: typer.Context, version: VersionArg = None, fmt: FormatOpt = None) -> None:
    """The YAML of a version (default: the newest), exactly as stored."""
    st = state(ctx)
    out = st.output(fmt_value(fmt))
    found = _version_or_newest(_provider(st, out), version)
    if out.fmt != "table":
        out.record(found.as_dict())
        return
    if found.redacted:
        out.info(f"v{found.number} holds redacted values at {', '.join(found.redacted_paths)}")
    out.write(found.yaml)


@app.command("diff")
def diff_cmd(
    ctx: typer.Context,
    a: Annotated[
        str | None,
        typer.Argument(
            help="From: a version, or `current` (default: the newest).",
            metavar="[A]",
            autocompletion=complete_config_version,
        ),
    ] = None,
    b: Annotated[
        str | None,
        typer.Argument(
            help="To: a version, or `current`: the file on disk (default).",
            metavar="[B]",
            autocompletion=complete_config_version,
        ),
    ] = None,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            help="Exit 1 when they differ, 0 when identical (as git diff --exit-code); "
            "with -q print nothing",
        ),
    ] = False,
    fmt: FormatOpt = None,
) -> None:
    """Unified diff between two versions, or a version and the file (secrets masked).

    --format json gives {"from", "to", "identical", "changes": [{"path", "change", "old", "new"}]}
    with changed keys as dotted paths.
    """
    from triggerfish_cli.config import files as config_files

    st = state(ctx)
    out = st.output(fmt_value(fmt))
    provider = _provider(st, out)

    def side(arg: str | None) -> tuple[str, str, str]:
        if arg == "current":
            config = config_files.read_config(st.config_path, missing_ok=True)
            if config is None:
                return "current", "", f"{st.config_path.name} (missing)"
            return "current", config.masked(), f"{st.config_path.name} (on disk)"
        found = _version_or_newest(provider, arg)
        return f"v{found.number}", found.yaml, f"v{found.number}"

    (name_a, text_a, label_a), (name_b, text_b, label_b) = side(a), side(b or "current")
    if exit_code:
        if not out.quiet:
            _show_diff(out, text_a, text_b, (name_a, label_a), (name_b, label_b))
        if text_a != text_b:
            raise typer.Exit(1)
        return
    _show_diff(out, text_a, text_b, (name_a, label_a), (name_b, label_b))


def _show_diff(
    out: Output, text_a: str, text_b: str, a: tuple[str, str], b: tuple[str, str]
) -> None:
    from triggerfish_cli.cli.output import Column
    from triggerfish_cli.config import diff as config_diff

    (name_a, label_a), (name_b, label_b) = a, b
    if out.fmt == "table":
        text = config_diff.unified(text_a, text_b, label_a, label_b)
        if text:
            out.diff(text)
        else:
            out.info(f"no differences between {label_a} and {label_b}")
        return
    rows = config_diff.changes(text_a, text_b, label_a, label_b)
    if out.fmt == "json":
        out.record({"from": name_a, "to": name_b, "identical": text_a == text_b, "changes": rows})
        return
    out.rows(rows, [Column(f, f) for f in ("path", "change", "old", "new")])


def _secrets_file(source: Path | None) -> dict[str, Any]:
    if source is None:
        return {}
    from triggerfish_cli.config.rollback import parse_secret_values
    from triggerfish_cli.errors import InvalidDataError, NotFoundError

    try:
        text = sys.stdin.read() if str(source) == "-" else source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(f"{source}: no such secrets file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidDataError(f"{source}: cannot read the secrets file ({exc})") from None
    return parse_secret_values(text, "stdin" if str(source) == "-" else str(source))


def _ask(path: str) -> str:
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
    from triggerfish_cli.config import versions as cv
    from triggerfish_cli.config.rollback import SecretSupply, apply_rollback, plan_rollback

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    provider = _provider(st, out, dry_run=dry_run)
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
        if out.fmt == "table":
            out.diff(plan.diff)
        first = "snapshot the current file, then " if plan.needs_snapshot else ""
        out.outcome(plan.as_dict(dry_run=True), f"would {first}roll {path} back to v{number}")
        return
    if not out.quiet and out.fmt == "table":
        out.diff(plan.diff, err=True)
    out.confirm(f"Roll {path} back to v{number}?", yes=yes, what="the rollback")
    result = apply_rollback(provider, plan, reason=reason)
    if result["snapshot"] is not None:
        out.info(f"stored the current file as v{result['snapshot']} first")
    if result["backup_copy"] is not None:
        out.info(
            f"it held plain-text secrets the store does not keep: copied to {result['backup_copy']}"
        )
    out.outcome(result, f"rolled {path} back to v{number} (recorded as v{result['version']})")


@app.command("import-backups")
def import_cmd(
    ctx: typer.Context,
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help=(
                "Where the gateway's copies are (default: <base>/backups, where the gateway "
                "writes them whatever config path it was given)."
            ),
            show_default=False,
            file_okay=False,
        ),
    ] = None,
    include_older: Annotated[
        bool,
        typer.Option(
            "--include-older",
            help="Also import copies older than the newest version (they take the newest numbers).",
        ),
    ] = False,
    redact: RedactOpt = False,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Import the gateway's backups/triggerfish.yaml.<time> copies as versions, oldest first."""
    from triggerfish_cli.cli.output import Column, text_column
    from triggerfish_cli.config import import_backups as config_import

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    provider = _provider(st, out, dry_run=dry_run)
    where = directory or config_import.default_dir()
    plan = config_import.plan_import(
        provider,
        where,
        config_import.PREFIX,
        redact=redact,
        include_older=include_older,
        missing_ok=directory is None,  # the gateway has not written a config yet
    )
    if dry_run:
        evicted = config_import.predicted_evictions(provider, plan)
    else:
        evicted = config_import.apply_import(provider, plan, st.config_path)
    result = plan.as_dict(dry_run, evicted)
    if out.fmt != "table":
        out.record(result)
        return
    verb = "would import" if dry_run else "imported"
    rows = [
        {
            "file": c.file,
            "created_at": c.created_at,
            "result": f"skipped: {c.skipped}" if c.skipped else f"{verb} as v{c.version}",
        }
        for c in plan.candidates
    ]
    if not out.quiet:
        out.rows(
            rows,
            [Column("file", "file"), Column("created_at", "time"), text_column("result", "result")],
            empty=f"no gateway backups in {where}",
        )
    count = len(plan.to_import)
    if not out.quiet:
        out.line(
            f"{verb} {count} {'copy' if count == 1 else 'copies'} from {where}"
            + (f"; removed {', '.join(f'v{n}' for n in evicted)}" if evicted else "")
        )


@app.command("validate")
def validate_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Argument(help="The file to check (default: the config file).", show_default=False),
    ] = None,
    fmt: FormatOpt = None,
) -> None:
    """Check a config file: YAML syntax (line, column), duplicate keys, known sections,
    our storage:/retention: sections strictly, plain-text secrets. Exit 8 on errors."""
    from triggerfish_cli.config import diff as config_diff
    from triggerfish_cli.config import files as config_files
    from triggerfish_cli.errors import InvalidDataError

    st = state(ctx)
    out = st.output(fmt_value(fmt))
    path = file or st.config_path
    config = config_files.read_config(path)
    assert config is not None
    report = config_diff.validate_text(config.text, str(path), path)
    if out.fmt == "table":
        for problem in report.problems:
            where = f"{path}" + (f":{problem.line}" if problem.line else "")
            where += f":{problem.column}" if problem.line and problem.column else ""
            out.line(f"{where}: {problem.severity}: {problem.message}")
        if report.valid:
            out.info(f"{path}: valid ({len(report.warnings)} warning(s))")
    else:
        out.record(report.as_dict())
    if not report.valid:
        raise InvalidDataError(f"{path}: invalid ({len(report.errors)} error(s))")
