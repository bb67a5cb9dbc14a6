"""``backup create --logical --max-taint LEVEL``: a copy fit for a lower clearance.

A partial backup fails closed: a row is kept only when its level can be
established and is at or below the ceiling. Everything else is left out and
counted (per namespace, in the manifest), and ``backup verify`` checks the same
rule on every row of a partial archive.

A row's level is what it states:

- a memory row (``memory:<agent>:<LEVEL>:<key>``) the level in its key
  (``memory.keys.may_name``: a key whose level cannot be read is RESTRICTED's
  alone), and the level its record claims, when it claims one;
- any other row its top-level ``classification`` (a level name, or
  ``{"level": ...}`` as lineage records have) and, for a cron job,
  ``classificationCeiling``: the highest of them.

A stated level must be one of the four names exactly: ``"restricted"``,
``"TOP_SECRET"``, ``["RESTRICTED"]`` or null establish nothing, and the row is
left out. A row that states no level is kept only in a namespace whose records
hold no content of their own (:data:`NO_CONTENT`): ids, counters, taint levels,
pairing state, flags, the operator's configuration. Anything else that states
no level could carry data of any level (a todo list, a notification, a cron
run's error, an audit record naming memory keys or search queries, a key of an
unknown namespace) and is left out.

A logical backup holds kv only, never the gateway's search tables
(``memory_fts``, ``memory_meta``): a restore rebuilds them from the rows it
loads, so nothing left out here comes back through them.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from triggerfish_cli import namespaces
from triggerfish_cli.classification import Level
from triggerfish_cli.memory.keys import LEVELS_BY_NAME, PREFIX, may_name

#: Namespaces whose rows hold no content of their own: kept when they state no level.
NO_CONTENT = frozenset(
    {
        "sessions:",  # ids, channel, the taint and its changes
        "main-session-id",
        "session-id:",
        "taint:",
        "conv-session:",  # a message counter
        "lineage-session:",  # index keys: a bare lineage id
        "lineage-hash:",
        "lineage-fwd:",
        "pairing:",
        "skills:",  # installed skill metadata
        "config:",  # the operator's configuration (secrets redacted)
        "healthcheck:",
        "prefs:",
        "browser:",  # a level name (the profile's watermark)
    }
)

#: The fields that state a row's level; a cron job states its ceiling.
_LEVEL_FIELDS = ("classification", "classificationCeiling")


def level_of(value: str) -> tuple[bool, Level | None]:
    """``(states one, level)``: the level a stored value states (the highest of its
    level fields); ``(True, None)``: a stated level that is no level name."""
    if '"classification' not in value:  # the cheap test first: most values state nothing
        return False, None
    try:
        document: Any = json.loads(value)
    except ValueError:
        return False, None
    if not isinstance(document, dict):
        return False, None
    stated = [document[name] for name in _LEVEL_FIELDS if name in document]
    levels = []
    for level in stated:
        if isinstance(level, dict):  # lineage: {"level": ..., "reason": ...}
            level = level.get("level")
        found = LEVELS_BY_NAME.get(level) if isinstance(level, str) else None
        if found is None:
            return True, None
        levels.append(found)
    return bool(stated), max(levels, default=None)


def left_out(key: str, value: str, ceiling: Level) -> bool:
    """Whether a partial backup at ``ceiling`` leaves the row out (it fails closed)."""
    memory = key.startswith(PREFIX)
    if memory and not may_name(key, ceiling):
        return True
    states, level = level_of(value)
    if not states:  # a memory's level is in its key
        return not memory and namespaces.group_of(key) not in NO_CONTENT
    return level is None or level > ceiling


class Ceiling:
    """Rows let through at a ceiling, and counts per namespace of those left out."""

    def __init__(self, ceiling: Level) -> None:
        self.ceiling = ceiling
        self.left_out: Counter[str] = Counter()

    def admits(self, key: str, value: str) -> bool:
        if left_out(key, value, self.ceiling):
            self.left_out[namespaces.group_of(key)] += 1
            return False
        return True

    @property
    def count(self) -> int:
        return sum(self.left_out.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_taint": self.ceiling.name,
            "left_out": self.count,
            "left_out_by_namespace": dict(sorted(self.left_out.items())),
        }
