"""`config snapshot`, `config history` and `config show`: store a version, list them, show one."""

from __future__ import annotations

import typer

from triggerfish_cli.cli import metrics
from triggerfish_cli.cli.config.common import (
    ReasonOpt,
    RedactOpt,
    VersionArg,
    app,
    version_or_newest,
    versions_store,
)
from triggerfish_cli.cli.metrics import MetricsOpt
from triggerfish_cli.cli.options import DryRunOpt, FormatOpt, QuietOpt, begin


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
    # lazy: config.versions adds 10 modules (hashlib) to `config --help`
    from triggerfish_cli.config import versions as config_versions

    st, out = begin(ctx, fmt, quiet)
    run = None if dry_run else metrics.begin(ctx, "config_snapshot", metrics_file)
    result = config_versions.snapshot(
        versions_store(st, out, dry_run=dry_run),
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
    # lazy: cli.output, config.files and config.versions add 19 modules to `config --help`
    from triggerfish_cli.cli.output.text import Column, human_bytes, text_column
    from triggerfish_cli.config import files as config_files
    from triggerfish_cli.config import versions as cv

    st, out = begin(ctx, fmt)
    listing = cv.list_versions(versions_store(st, out))
    for problem in listing.problems:
        out.warn(problem)
    config = config_files.read_config(st.config_path, missing_ok=True)
    current = cv.current_number(listing, config)
    out.rows(
        (v.row(v.number == current) for v in listing.versions),
        [
            Column("version", "version", "right", lambda n: f"v{n}", essential=True),
            Column("created_at", "created"),
            Column("user", "user"),
            Column("source", "source", render=lambda s: s or ""),
            Column("bytes", "size", "right", human_bytes),
            Column("redacted", "redacted", "right", lambda r: str(len(r)) if r else ""),
            Column("current", "on disk", render=lambda c: "<- now" if c else ""),
            text_column("reason", "reason", essential=True),
        ],
        empty="no config versions stored yet (run `config snapshot`)",
        gives_way=("redacted", "bytes", "user", "source"),
    )

    def notes() -> None:
        if config is None:
            out.info(f"{st.config_path} does not exist")
        elif current is None:
            out.info(f"{st.config_path} matches no stored version (see `config diff`)")

    if listing.versions:
        out.for_people(notes)


@app.command("show")
def show_cmd(ctx: typer.Context, version: VersionArg = None, fmt: FormatOpt = None) -> None:
    """The YAML of a version (default: the newest), exactly as stored."""
    st, out = begin(ctx, fmt)
    found = version_or_newest(versions_store(st, out), version)

    def show() -> None:
        if found.redacted:
            out.info(f"v{found.number} holds redacted values at {', '.join(found.redacted_paths)}")
        out.write(found.yaml)

    out.result(found.as_dict(), show, always=True)
