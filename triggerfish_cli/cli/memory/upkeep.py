"""`triggerfish-admin memory stats|reindex|purge`: upkeep of the agent's memory."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from triggerfish_cli.cli import metrics
from triggerfish_cli.cli.memory.common import app, resolve_agent, warn_malformed
from triggerfish_cli.cli.metrics import MetricsOpt
from triggerfish_cli.cli.options import (
    AgentOpt,
    AllAgentsOpt,
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    TaintOpt,
    YesOpt,
    begin,
    taint_level,
)
from triggerfish_cli.cli.output.text import Column


@app.command("stats")
def stats_cmd(
    ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent", "-a", help="Only this agent (default: every agent).", show_default=False
        ),
    ] = None,
    taint: TaintOpt = "PUBLIC",
    fmt: FormatOpt = None,
) -> None:
    """Counts per agent and visible level, soft-deleted and malformed records, index drift."""
    from triggerfish_cli.memory import upkeep as memory  # lazy: 3.7 ms of `memory list`

    st, out = begin(ctx, fmt)
    result = memory.stats(st.provider(), taint=taint_level(taint), agent=agent)
    document = result.as_dict()
    columns = [Column("agent", "agent", essential=True), Column("level", "level", essential=True)]
    columns += [
        Column(name, name, "right", essential=name == "live")
        for name in ("live", "deleted", "shadowed")
    ]

    def show() -> None:
        footer = {name: document[name] for name in ("live", "deleted", "shadowed")}
        out.rows(
            result.rows(), columns, footer={"agent": "total", **footer}, empty="no memories visible"
        )
        out.line(f"malformed records: {document['malformed']}")
        out.line(_drift_line(document["index"]))
        warn_malformed(out, result.malformed)

    # csv: one row per agent and level (the JSON document has them all)
    out.result(document, show, always=True, rows=result.rows(), columns=columns)


def _drift_line(index: dict[str, Any]) -> str:
    if not index.get("indexed"):
        missing = (
            " (index tables missing: run `memory reindex`)" if index.get("tables_missing") else ""
        )
        return f"search index: none, searches read every memory{missing}"
    return (
        f"search index ({index['kind']}, {', '.join(index['levels'])}): "
        f"{index['in_sync']} in sync, {index['missing']} missing, {index['stale']} stale, "
        f"{index['orphaned']} orphaned, {index['duplicates']} duplicate row(s)"
    )


@app.command("reindex")
def reindex_cmd(
    ctx: typer.Context,
    taint: TaintOpt = "PUBLIC",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Only report how the index differs from kv.")
    ] = False,
    metrics_file: MetricsOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Rebuild the search index from kv for the visible levels (all agents).

    SQLite: the gateway's memory_fts and memory_meta; Postgres: our tfadmin_memory_fts
    table (created on first use); S3 has no index (search scans). Picks up memories
    saved without our tool (cron and trigger runs, the gateway on Postgres) and drops
    stale and orphaned rows. Use --taint RESTRICTED to rebuild every level.
    """
    from triggerfish_cli.memory import upkeep as memory  # lazy: 3.7 ms of `memory list`

    st, out = begin(ctx, fmt, quiet)
    run = None if dry_run else metrics.begin(ctx, "memory_reindex", metrics_file)
    with out.progress("reindexing") as bar:
        drift = memory.reindex(
            st.provider(), taint=taint_level(taint), dry_run=dry_run, on_batch=bar.advance
        )
    document = drift.as_dict()
    document["dry_run"] = dry_run
    metrics.reindexed(run, document)

    def show() -> None:
        out.line(_drift_line(document))
        verb = "would fix" if dry_run else "fixed"
        out.line(f"{verb} {drift.to_fix if dry_run else drift.fixed} record(s)")
        for category, keys in drift.samples.items():
            out.line(f"  {category}: {', '.join(keys)}")

    out.result(document, show)  # not with --quiet here or the global -q


@app.command("purge")
def purge_cmd(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Soft-deleted at least this long ago: 30d, 12h, 2w, 1d12h, ...",
            show_default=False,
        ),
    ],
    agent: AgentOpt = None,
    all_agents: AllAgentsOpt = False,
    taint: TaintOpt = "PUBLIC",
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Hard-delete soft-deleted memories at visible levels; nothing else is touched."""
    from triggerfish_cli.memory import upkeep as memory  # lazy: 3.7 ms of `memory list`

    st, out = begin(ctx, fmt, quiet)
    provider = st.provider()
    plan = memory.plan_purge(
        provider,
        memory.parse_duration(older_than),
        taint=taint_level(taint),
        agent=resolve_agent(agent, all_agents),
    )
    if plan.count == 0:
        out.outcome(plan.as_dict(0, dry_run), "no soft-deleted memories to purge")
        return
    summary = plan.as_dict(0, dry_run)
    if dry_run:  # the report is the result: stdout

        def show() -> None:
            out.line(f"would purge {plan.count} record(s) soft-deleted before {summary['cutoff']}")
            for key in summary["sample"]:
                out.line(f"  {key}", wrap=False)

        out.result(summary, show)
        return
    if not out.quiet:  # what the question is about: beside it, on stderr
        out.info(f"{plan.count} memory record(s) soft-deleted before {summary['cutoff']}, e.g.:")
        for key in summary["sample"]:
            out.info(f"  {key}")
    out.confirm(
        f"Purge {plan.count} record(s) for good?", yes=yes, what=f"purging {plan.count} record(s)"
    )
    with out.progress("purging", total=plan.count) as bar:
        deleted = memory.purge(provider, plan, on_batch=bar.advance)
    out.outcome(plan.as_dict(deleted, False), f"purged {deleted} record(s)")
