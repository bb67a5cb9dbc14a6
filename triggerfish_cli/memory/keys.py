"""Memory storage keys, ``memory:<agentId>:<LEVEL>:<key>``, and the levels a taint sees.

The memory key itself may hold ``:``, so a storage key splits on its first
three colons only. The one place that builds and parses these keys.
"""

from __future__ import annotations

import functools

from triggerfish_cli.classification import Level, can_flow_to

PREFIX = "memory:"
DEFAULT_AGENT = "main-session"


def storage_key(agent: str, level: Level, key: str) -> str:
    return f"{PREFIX}{agent}:{level.name}:{key}"


def agent_prefix(agent: str | None) -> str:
    return PREFIX if agent is None else f"{PREFIX}{agent}:"


LEVELS_BY_NAME = {level.name: level for level in Level}


def split_key(skey: str) -> tuple[str, Level, str] | None:
    """``memory:<agent>:<LEVEL>:<key>`` -> ``(agent, level, key)``; None if not that shape."""
    parts = skey.split(":", 3)
    if len(parts) != 4 or parts[0] != "memory" or not parts[1]:
        return None
    level = LEVELS_BY_NAME.get(parts[2])
    if level is None:
        return None
    return parts[1], level, parts[3]


@functools.cache
def visible_levels(taint: Level) -> tuple[Level, ...]:
    """Levels a session at ``taint`` reads, lowest first."""
    return tuple(level for level in Level if can_flow_to(level, taint))


def may_name(skey: str, taint: Level) -> bool:
    """Whether a storage key may be shown at ``taint``: its level is visible.

    A key whose level cannot be read from it (``memory:x:SECRET:y``) might
    be anything, so only RESTRICTED sees it.
    """
    return can_flow_to(naming_level(skey), taint)


def naming_level(skey: str) -> Level:
    """The lowest taint that may name a storage key: its level, else RESTRICTED."""
    parts = split_key(skey)
    return Level.RESTRICTED if parts is None else parts[1]
