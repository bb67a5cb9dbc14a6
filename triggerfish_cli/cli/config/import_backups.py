"""`config import-backups`: the gateway's own copies of the file, as versions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from triggerfish_cli.cli.config.common import RedactOpt, app, versions_store
from triggerfish_cli.cli.options import DryRunOpt, FormatOpt, QuietOpt, begin


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
    # lazy: cli.output and config.import_backups add 20 modules to `config --help`
    from triggerfish_cli.cli.output.text import Column, text_column
    from triggerfish_cli.config import import_backups as config_import

    st, out = begin(ctx, fmt, quiet)
    provider = versions_store(st, out, dry_run=dry_run)
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
    verb = "would import" if dry_run else "imported"

    def show() -> None:
        rows = [
            {
                "file": c.file,
                "created_at": c.created_at,
                "result": f"skipped: {c.skipped}" if c.skipped else f"{verb} as v{c.version}",
            }
            for c in plan.candidates
        ]
        out.rows(
            rows,
            [
                Column("file", "file", essential=True),
                Column("created_at", "time"),
                text_column("result", "result", essential=True),
            ],
            empty=f"no gateway backups in {where}",
        )
        count = len(plan.to_import)
        out.line(
            f"{verb} {count} {'copy' if count == 1 else 'copies'} from {where}"
            + (f"; removed {', '.join(f'v{n}' for n in evicted)}" if evicted else "")
        )

    out.result(plan.as_dict(dry_run, evicted), show)
