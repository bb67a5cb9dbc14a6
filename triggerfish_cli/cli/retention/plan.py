"""`triggerfish-admin retention plan`: what a sweep would do now."""

from __future__ import annotations

from typing import Annotated

import typer

from triggerfish_cli.cli.kv.common import RawTaintOpt
from triggerfish_cli.cli.options import FormatOpt, begin, taint_level
from triggerfish_cli.cli.retention.common import (
    AsOfOpt,
    NamespaceOpt,
    app,
    as_of_time,
    only_of,
    policies_of,
)
from triggerfish_cli.cli.retention.output import audit_names, show_plan
from triggerfish_cli.retention.plan import hides, seen_at
from triggerfish_cli.retention.reading import read_plan


@app.command("plan")
def plan_cmd(
    ctx: typer.Context,
    namespace: NamespaceOpt = None,
    list_keys: Annotated[
        bool,
        typer.Option("--list", "-l", help="One row per key: deletions, trims, ages unknown."),
    ] = False,
    as_of: AsOfOpt = None,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            help="Exit 1 when a sweep would delete or trim something, 0 when "
            "there is nothing to do (for cron alerts); with -q print nothing",
        ),
    ] = False,
    taint: RawTaintOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """What a sweep would do now, per namespace (count, bytes, oldest, rule).

    With --taint (or TRIGGERFISH_TAINT), memory rows above it are neither named,
    counted nor sized (--exit-code too). Writes nothing, except the audit record of
    the memory keys above PUBLIC that --list names (as kv list).
    """
    st, out = begin(ctx, fmt)
    policies = policies_of(st)
    only, now = only_of(namespace), as_of_time(as_of, future=True)
    level = taint_level(taint) if taint is not None else None
    whole = read_plan(st.provider(), policies, now, only=only, keep=st.owns_process)
    plan = seen_at(whole, level)
    if not (exit_code and out.quiet):
        if list_keys:
            audit_names(st.provider(), plan, level)
        show_plan(out, plan, list_keys, hidden=level if hides(whole, level) else None)
    if exit_code and (plan.deletes or plan.trims):
        raise typer.Exit(1)
