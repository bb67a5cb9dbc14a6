"""A store's identity: a stable id kept in the store itself.

Backups record it (with the source's backend, path and host), so that a
restore can tell the target's own backups from another store's, and
``backup list``/``verify``/``prune`` can work per store. The id is a random
UUID, written the first time this tool writes to the store (``audit.record``
and ``backup create`` call :func:`ensure_id`); a store we never wrote has
none yet, and is then known by its backend, path and host alone.

Where each backend keeps it (the gateway never reads any of these):

- SQLite: table ``tfadmin_store (name TEXT PRIMARY KEY, value TEXT NOT NULL)``,
  rows ``id`` and ``created``, written in one transaction through the write
  gate (``provider.transaction()``);
- Postgres: the same table in the store's schema, ``<schema>.tfadmin_store``;
- S3: the object ``<prefix>#tfadmin-store`` (JSON ``{"id", "created"}``), put
  with ``If-None-Match: *``; listings of keys skip ``#`` objects, so ``kv
  clear`` keeps it. A prefix that holds it (or any key) is a store;
- memory: an id for the life of the store (one command).

Two tools racing to write it agree: the first one written wins, and both
read it back.
"""

from __future__ import annotations

import uuid
from typing import Any

from triggerfish_cli.storage.provider import StorageProvider

#: The table (SQLite, Postgres) that holds the id.
ID_TABLE = "tfadmin_store"
ID_TABLE_SQL = f"CREATE TABLE IF NOT EXISTS {ID_TABLE} (name TEXT PRIMARY KEY, value TEXT NOT NULL)"


def new_id() -> str:
    return str(uuid.uuid4())


def read_id(provider: StorageProvider) -> str | None:
    """The store's id; None when none was ever recorded. Reads only."""
    reader = getattr(provider, "store_id", None)
    if reader is not None:
        found: str | None = reader()
        return found
    return getattr(provider, "_tfadmin_store_id", None)


def ensure_id(provider: StorageProvider, candidate: str | None = None) -> str:
    """The store's id, recorded now if it has none (a write, through the write gate).

    ``candidate``: the id to record when there is none (a restore putting a
    store back where it was keeps the backup's); default a new one.
    """
    found = read_id(provider)
    if found:
        return found
    candidate = candidate or new_id()
    if hasattr(provider, "record_store_id"):  # SQLite, Postgres, S3: in the store
        provider.record_store_id(candidate)
    else:
        target: Any = provider
        target._tfadmin_store_id = candidate
        return candidate
    return read_id(provider) or candidate
