"""`backup prune`: delete the backups no keep rule keeps."""

from __future__ import annotations

from typing import Annotated

import typer

from triggerfish_cli.cli import metrics
from triggerfish_cli.cli.backup.common import app
from triggerfish_cli.cli.backup.options import (
    EndpointOpt,
    FromOpt,
    destination,
    of_store,
    this_store,
)
from triggerfish_cli.cli.backup.output import show_plan
from triggerfish_cli.cli.metrics import MetricsOpt
from triggerfish_cli.cli.options import (
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    YesOpt,
    begin,
)


@app.command("prune")
def prune_cmd(
    ctx: typer.Context,
    keep_last: Annotated[
        int, typer.Option("--keep-last", min=0, metavar="N", help="Keep the N newest backups.")
    ] = 0,
    keep_daily: Annotated[
        int,
        typer.Option("--keep-daily", min=0, metavar="D", help="Keep the newest of each of D days."),
    ] = 0,
    keep_weekly: Annotated[
        int,
        typer.Option(
            "--keep-weekly", min=0, metavar="W", help="Keep the newest of each of W ISO weeks."
        ),
    ] = 0,
    keep_monthly: Annotated[
        int,
        typer.Option(
            "--keep-monthly", min=0, metavar="M", help="Keep the newest of each of M months."
        ),
    ] = 0,
    source: FromOpt = None,
    endpoint_url: EndpointOpt = None,
    all_stores: Annotated[
        bool,
        typer.Option(
            "--all-stores",
            help="Prune every store's backups in --from, the policy applied to each store "
            "separately (default: only this store's backups are looked at).",
        ),
    ] = False,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    metrics_file: MetricsOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Delete the backups no keep rule keeps (restic's rules, UTC); show why each stays.

    Only this store's backups are pruned: another store's in the same
    destination are never deleted (--all-stores: each store's by the same
    policy, separately). An empty policy is refused (exit 2). The newest
    verified backup of each store and unreadable files are never deleted.
    """
    # lazy: backup.prune adds 18 modules to `backup --help`
    from triggerfish_cli.backup.prune import KeepPolicy, plan_prune, plan_prune_by_store

    st, out = begin(ctx, fmt, quiet)
    policy = KeepPolicy(keep_last, keep_daily, keep_weekly, keep_monthly)
    policy.check()
    run = None if dry_run else metrics.begin(ctx, "backup_prune", metrics_file)
    store = None if all_stores else this_store(st)
    dest = destination(source, endpoint_url)
    if store is None:
        plan = plan_prune_by_store(dest.entries(), policy)
    else:
        plan = plan_prune(of_store(dest.entries(), store), policy)
    deletes = plan.deletes
    if dry_run or not deletes:
        metrics.pruned(run, 0, len(plan.decisions))
        show_plan(out, plan, dry_run=dry_run)
        return
    out.confirm(
        f"Delete {len(deletes)} backup(s) from {dest.describe()}?", yes=yes, what="the prune"
    )
    for decision in deletes:
        dest.delete(decision.entry.name)
    metrics.pruned(run, len(deletes), len(plan.decisions) - len(deletes))
    show_plan(out, plan, dry_run=False)
