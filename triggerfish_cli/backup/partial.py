"""``backup create --logical --max-taint LEVEL``: a copy fit for a lower clearance.

A partial backup leaves out every row classified above the level, so that
the copy can be handed to an environment cleared only up to it:

- memory rows (``memory:<agent>:<LEVEL>:<key>``) whose key names a level
  above it, whose level cannot be read from the key (``memory.may_name``:
  only RESTRICTED may see those), or whose record claims a level above it;
- any other record that says it is classified above it, by a top-level
  ``classification`` (a level name, or ``{"level": ...}`` as lineage records
  have): conversation messages (a memory read in a chat is in its tool
  result), trigger results, notifications, workflows and their versions,
  lineage. Rows that hold no content of their own (``lineage-session:``,
  ``conv-session:`` counters, session records) stay.

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


def level_of(value: str) -> Level | None:
    """The level a stored value says it is classified at (None: it says nothing)."""
    if '"classification"' not in value:  # the cheap test first: most values say nothing
        return None
    try:
        document: Any = json.loads(value)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    found = document.get("classification")
    if isinstance(found, dict):
        found = found.get("level")
    return LEVELS_BY_NAME.get(found) if isinstance(found, str) else None


def above(key: str, value: str, ceiling: Level) -> bool:
    """Whether the row is classified above ``ceiling`` (and so left out)."""
    if key.startswith(PREFIX) and not may_name(key, ceiling):
        return True
    level = level_of(value)
    return level is not None and level > ceiling


class Ceiling:
    """Rows let through at a ceiling, and counts per namespace of those left out."""

    def __init__(self, ceiling: Level) -> None:
        self.ceiling = ceiling
        self.left_out: Counter[str] = Counter()

    def admits(self, key: str, value: str) -> bool:
        if above(key, value, self.ceiling):
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
