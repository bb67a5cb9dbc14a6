"""What the `memory` commands share: the group, its argument types, agents, warnings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggerfish_cli.cli.options import sub_app
from triggerfish_cli.errors import UsageError
from triggerfish_cli.memory.keys import DEFAULT_AGENT

if TYPE_CHECKING:
    from triggerfish_cli.cli.output import Output

app = sub_app(
    "memory",
    "Search and manage agent memories at a chosen taint.\n\n"
    "Every command acts as a session at --taint (default PUBLIC): it reads that level and "
    "below, with higher versions of a key shadowing lower ones, and writes at exactly that "
    "level. Reads above PUBLIC and every change leave an audit record.",
)

Key = Annotated[str, typer.Argument(help="The memory key, e.g. user-name.", show_default=False)]
Tag = Annotated[
    str | None,
    typer.Option("--tag", help="Only memories carrying this tag.", show_default=False),
]


def resolve_agent(agent: str | None, all_agents: bool) -> str | None:
    if all_agents and agent is not None:
        raise UsageError("give --agent or --all-agents, not both")
    return None if all_agents else (agent or DEFAULT_AGENT)


def one_line(text: Any) -> str:
    """Free text on one line (the table cuts it to the terminal with …)."""
    return " ".join(str(text or "").split())


def with_marks(row: dict[str, Any]) -> str:
    """The snippet with its matched terms in [brackets], for the table."""
    text, parts, last = row["snippet"], [], 0
    for start, end in row["highlights"]:
        parts += [text[last:start], "[", text[start:end], "]"]
        last = end
    return " ".join(("".join(parts) + text[last:]).split())


def warn_malformed(out: Output, keys: list[Any]) -> None:
    for item in keys[:10]:
        key = getattr(item, "storage_key", item)
        reason = getattr(item, "reason", "malformed record")
        out.warn(f"skipped {key}: {reason}")
    if len(keys) > 10:
        out.warn(f"... and {len(keys) - 10} more malformed memory record(s)")


def columns_of(*fields: tuple[str, str], agent: bool = False) -> list[Any]:
    from triggerfish_cli.cli.output import Column

    shown = ([("agent", "agent")] if agent else []) + list(fields)
    return [Column(name, header, kind="text" if name == "tags" else "") for name, header in shown]
