"""Which memory index serves a store, by its backend, and bringing it in line after a bulk load.

The backend table (storage/backends.py) names each backend's index. SQLite: the
gateway's own FTS5 tables; Postgres: a tsvector index; any other backend: no
stored index, a search indexes the visible memories in RAM.
"""

from __future__ import annotations

from collections.abc import Sequence

from triggerfish_cli.classification import Level
from triggerfish_cli.errors import TriggerfishError
from triggerfish_cli.memory.index import MemoryIndex
from triggerfish_cli.memory.keys import visible_levels
from triggerfish_cli.storage.backends import memory_index_for
from triggerfish_cli.storage.provider import StorageProvider


def index_for(provider: StorageProvider) -> MemoryIndex:
    return memory_index_for(provider)


def bring_in_line(provider: StorageProvider, levels: Sequence[Level] | None = None) -> str:
    """After a bulk load into ``provider``: its memory search index matches kv (at
    ``levels``; None: every level).

    The gateway searches its own SQLite index (``memory_fts``, ``memory_meta``):
    rows loaded behind its back would be missing from its results. The data is
    in place either way, so the outcome is a note for the operator, not an error.
    """
    try:
        index = index_for(provider)
        drift = index.repair(visible_levels(Level.RESTRICTED) if levels is None else levels)
    except TriggerfishError as exc:
        return f"the memory search index was not rebuilt ({exc.message}): run `memory reindex`"
    return f"memory search index ({index.kind}): {drift.fixed} row(s) brought in line"
