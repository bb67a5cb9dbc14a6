"""Which memory index serves a store, by its backend, and bringing it in line after a bulk load.

SQLite: the gateway's own FTS5 tables (fts.py); Postgres: a tsvector index
(pg.py, imported only for a Postgres store); any other backend: no stored
index, a search indexes the visible memories in RAM (fts.ScanIndex).
"""

from __future__ import annotations

from collections.abc import Sequence

from triggerfish_cli.classification import Level
from triggerfish_cli.memory.index import MemoryIndex
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.storage.sqlite.fts import ScanIndex

#: backend name -> "module:function(provider) -> MemoryIndex", imported lazily.
_INDEXES: dict[str, str] = {
    "sqlite": "triggerfish_cli.storage.sqlite.fts:for_sqlite",
    "postgres": "triggerfish_cli.storage.postgres.index:for_postgres",
}


def index_for(provider: StorageProvider) -> MemoryIndex:
    target = _INDEXES.get(provider.backend)
    if target is None:
        return ScanIndex(provider)
    import importlib

    module, _, function = target.partition(":")
    index: MemoryIndex = getattr(importlib.import_module(module), function)(provider)
    return index


def bring_in_line(provider: StorageProvider, levels: Sequence[Level] | None = None) -> str:
    """After a bulk load into ``provider``: its memory search index matches kv (at
    ``levels``; None: every level).

    The gateway searches its own SQLite index (``memory_fts``, ``memory_meta``):
    rows loaded behind its back would be missing from its results. The data is
    in place either way, so the outcome is a note for the operator, not an error.
    """
    from triggerfish_cli.errors import TriggerfishError
    from triggerfish_cli.memory.keys import visible_levels

    try:
        index = index_for(provider)
        drift = index.repair(visible_levels(Level.RESTRICTED) if levels is None else levels)
    except TriggerfishError as exc:
        return f"the memory search index was not rebuilt ({exc.message}): run `memory reindex`"
    return f"memory search index ({index.kind}): {drift.fixed} row(s) brought in line"
