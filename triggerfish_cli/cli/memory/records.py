"""`triggerfish-admin memory search|get|list|save|delete|history`: the records."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggerfish_cli.cli.memory.common import app, resolve_agent, warn_malformed
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

if TYPE_CHECKING:
    pass

Key = Annotated[str, typer.Argument(help="The memory key, e.g. user-name.", show_default=False)]

Tag = Annotated[
    str | None,
    typer.Option("--tag", help="Only memories carrying this tag.", show_default=False),
]


def _one_line(text: Any) -> str:
    """Free text on one line (the table cuts it to the terminal with …)."""
    return " ".join(str(text or "").split())


def _with_marks(row: dict[str, Any]) -> str:
    """The snippet with its matched terms in [brackets], for the table."""
    text, parts, last = row["snippet"], [], 0
    for start, end in row["highlights"]:
        parts += [text[last:start], "[", text[start:end], "]"]
        last = end
    return " ".join(("".join(parts) + text[last:]).split())


def _columns(*fields: tuple[str, str], agent: bool = False) -> list[Any]:
    shown = ([("agent", "agent")] if agent else []) + list(fields)
    return [Column(name, header, kind="text" if name == "tags" else "") for name, header in shown]


@app.command("search")
def search_cmd(
    ctx: typer.Context,
    query: Annotated[
        list[str],
        typer.Argument(
            help="Words to find (all must occur), or the index's own syntax with --raw.",
            metavar="WORDS...",
        ),
    ],
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="Pass the query to the index as is, in its own syntax: FTS5 (SQLite, S3) "
            "or to_tsquery (Postgres).",
        ),
    ] = False,
    limit: Annotated[int, typer.Option("--limit", "-l", min=1, help="At most N hits.")] = 10,
    agent: AgentOpt = None,
    all_agents: AllAgentsOpt = False,
    tag: Tag = None,
    taint: TaintOpt = "PUBLIC",
    fmt: FormatOpt = None,
) -> None:
    """Full-text search (stemmed) over key, content and tags, best first."""
    st, out = begin(ctx, fmt)
    who = resolve_agent(agent, all_agents)
    result = memory.search(
        st.provider(),
        " ".join(query),
        taint=taint_level(taint),
        agent=who,
        raw=raw,
        tag=tag,
        limit=limit,
    )
    rows = [hit.as_dict() for hit in result.hits]
    for row in rows:
        row["match"] = _with_marks(row)
    columns = _columns(
        ("key", "key"),
        ("level", "level"),
        ("tags", "tags"),
        ("updated_at", "updated"),
        agent=who is None,
    )
    columns += [
        Column("score", "score", "right", lambda s: f"{s:.3g}"),
        text_column("match", "match"),
        Column("storage_key", "storage key", wide=True),
    ]
    if out.fmt != "table":
        for row in rows:
            row.pop("match")
    out.rows(rows, columns, empty="no memories match")
    if result.stale:
        out.warn(
            f"skipped {result.stale} index row(s) that no longer match the stored memory "
            "(run `memory reindex`)"
        )
    warn_malformed(out, result.malformed)


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
    columns = _columns(("key", "key"), ("level", "level"), ("tags", "tags"), agent=who is None)
    columns += [
        Column("updated_at", "updated"),
        text_column("content", "content", render=_one_line),
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
    columns = _columns(("level", "level"), ("status", "status"), agent=who is None)
    columns += [
        Column("updated_at", "updated"),
        text_column("tags", "tags"),
        text_column("content", "content", render=_one_line),
    ]
    out.rows((v.as_dict() for v in versions), columns, empty=f"no version of {key!r} visible")
