"""`triggerfish-admin memory get|list|save|delete|history`: the records."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from triggerfish_cli.cli.memory.common import app, resolve_agent, warn_malformed
from triggerfish_cli.cli.memory.fields import Key, Tag, one_line, record_columns
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
from triggerfish_cli.cli.output.text import Column, text_column
from triggerfish_cli.errors import UsageError
from triggerfish_cli.memory import records as memory
from triggerfish_cli.memory.keys import DEFAULT_AGENT


@app.command("get")
def get_cmd(
    ctx: typer.Context,
    key: Key,
    agent: AgentOpt = None,
    taint: TaintOpt = "PUBLIC",
    fmt: FormatOpt = None,
) -> None:
    """The highest visible version of one memory (exit 3 if none is visible)."""
    st, out = begin(ctx, fmt)
    found = memory.get_memory(
        st.provider(), key, taint=taint_level(taint), agent=agent or DEFAULT_AGENT
    )
    warn_malformed(out, found.malformed)
    assert found.record is not None
    document = found.record.as_dict()
    document["shadows"] = [record.level.name for record in found.shadowed]
    out.record(document)


@app.command("list")
def list_cmd(
    ctx: typer.Context,
    agent: AgentOpt = None,
    all_agents: AllAgentsOpt = False,
    tag: Tag = None,
    limit: Annotated[
        int, typer.Option("--limit", "-l", min=0, help="Show at most N memories (0: all).")
    ] = 0,
    taint: TaintOpt = "PUBLIC",
    fmt: FormatOpt = None,
) -> None:
    """Every visible memory (the version get would return), by agent and key."""
    st, out = begin(ctx, fmt)
    who = resolve_agent(agent, all_agents)
    listing = memory.list_memories(
        st.provider(), taint=taint_level(taint), agent=who, tag=tag, limit=limit
    )
    columns = record_columns(
        ("key", "key"), ("level", "level"), ("tags", "tags"), agent=who is None, essential=("key",)
    )
    columns += [
        Column("updated_at", "updated"),
        text_column("content", "content", render=one_line, essential=True),
        Column("storage_key", "storage key", wide=True),
    ]
    out.rows((r.as_dict() for r in listing.records), columns, empty="no memories visible")
    warn_malformed(out, listing.malformed)


@app.command("save")
def save_cmd(
    ctx: typer.Context,
    key: Key,
    content: Annotated[
        str | None,
        typer.Argument(help="The text to remember; omit it (or give -) to read stdin."),
    ] = None,
    tags: Annotated[
        list[str] | None,
        typer.Option("--tags", help="Tags, comma-separated or repeated.", show_default=False),
    ] = None,
    agent: AgentOpt = None,
    taint: TaintOpt = "PUBLIC",
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Save a memory at exactly the taint's level (keeps createdAt, revives a deleted key)."""
    st, out = begin(ctx, fmt, quiet)
    if content is None or content == "-":
        if sys.stdin.isatty():
            raise UsageError("no content: give CONTENT or pipe it on stdin")
        content = sys.stdin.read()
        content = content[:-1] if content.endswith("\n") else content
    result = memory.save_memory(
        st.provider(),
        key,
        content,
        tags or [],
        taint=taint_level(taint),
        agent=agent or DEFAULT_AGENT,
    )
    out.outcome(
        result.as_dict(),
        f"{result.status} {key} at {result.record.level.name} for {result.record.agent}",
    )


@app.command("delete")
def delete_cmd(
    ctx: typer.Context,
    key: Key,
    agent: AgentOpt = None,
    taint: TaintOpt = "PUBLIC",
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Soft-delete a memory at exactly the taint's level (kept in the store for audit)."""
    st, out = begin(ctx, fmt, quiet)
    level, who, provider = taint_level(taint), agent or DEFAULT_AGENT, st.provider()
    if not dry_run:
        memory.check_deletable(provider, key, taint=level, agent=who)  # exit 3/4 before asking
        out.confirm(
            f"Soft-delete memory {key!r} of {who} at {level.name}?",
            yes=yes,
            what=f"deleting {key}",
        )
    result = memory.delete_memory(provider, key, taint=level, agent=who, dry_run=dry_run)
    verb = "would soft-delete" if dry_run else "soft-deleted"
    out.outcome(result.as_dict(), f"{verb} {key} at {level.name} for {who}")


@app.command("history")
def history_cmd(
    ctx: typer.Context,
    key: Key,
    agent: AgentOpt = None,
    all_agents: AllAgentsOpt = False,
    taint: TaintOpt = "PUBLIC",
    fmt: FormatOpt = None,
) -> None:
    """Every version of a key at visible levels, soft-deleted ones included."""
    st, out = begin(ctx, fmt)
    who = resolve_agent(agent, all_agents)
    versions = memory.history(st.provider(), key, taint=taint_level(taint), agent=who)
    columns = record_columns(
        ("level", "level"), ("status", "status"), agent=who is None, essential=("status",)
    )
    columns += [
        Column("updated_at", "updated", essential=True),
        text_column("tags", "tags"),
        text_column("content", "content", render=one_line, essential=True),
    ]
    out.rows((v.as_dict() for v in versions), columns, empty=f"no version of {key!r} visible")
