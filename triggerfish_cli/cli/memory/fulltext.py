"""`triggerfish-admin memory search`: full-text search at a taint, through the index."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import typer

from triggerfish_cli.cli.memory.common import app, resolve_agent, warn_malformed
from triggerfish_cli.cli.memory.fields import Tag, record_columns
from triggerfish_cli.cli.options import (
    AgentOpt,
    AllAgentsOpt,
    FormatOpt,
    TaintOpt,
    begin,
    taint_level,
)
from triggerfish_cli.cli.output.text import Column, text_column
from triggerfish_cli.memory import records as memory


def _with_marks(row: dict[str, Any]) -> str:
    """The snippet with its matched terms in [brackets], for the table."""
    text, parts, last = row["snippet"], [], 0
    for start, end in row["highlights"]:
        parts += [text[last:start], "[", text[start:end], "]"]
        last = end
    return " ".join(("".join(parts) + text[last:]).split())


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
    columns = record_columns(
        ("key", "key"),
        ("level", "level"),
        ("tags", "tags"),
        ("updated_at", "updated"),
        agent=who is None,
        essential=("key",),
    )
    columns += [
        Column("score", "score", "right", lambda s: f"{s:.3g}"),
        replace(text_column("match", "match", essential=True), table_only=True),
        Column("storage_key", "storage key", wide=True),
    ]
    out.rows(rows, columns, empty="no memories match")
    warn_malformed(out, result.malformed)
