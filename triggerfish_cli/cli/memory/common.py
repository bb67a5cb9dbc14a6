"""What the `memory` commands share: the group, the agent option's meaning, warnings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def resolve_agent(agent: str | None, all_agents: bool) -> str | None:
    if all_agents and agent is not None:
        raise UsageError("give --agent or --all-agents, not both")
    return None if all_agents else (agent or DEFAULT_AGENT)


def warn_malformed(out: Output, keys: list[Any]) -> None:
    for item in keys[:10]:
        key = getattr(item, "storage_key", item)
        reason = getattr(item, "reason", "malformed record")
        out.warn(f"skipped {key}: {reason}")
    if len(keys) > 10:
        out.warn(f"... and {len(keys) - 10} more malformed memory record(s)")
