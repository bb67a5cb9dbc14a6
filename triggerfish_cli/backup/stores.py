"""Whose backup is this? Backups grouped by the store they were made of.

Every manifest records its source: the store's id (storage/identity.py),
its backend, its location (``sqlite:<real path>``, ``postgres:...``,
``s3://bucket/prefix``) and the host it was made on. Two stores backed up
into one destination (restic groups snapshots by host and paths the same
way) are told apart so that:

- ``backup restore`` refuses (exit 4) to put one store's backup over
  another store, unless ``--other-store``; ``--latest`` is the target's own
  newest backup;
- ``backup list``, ``verify --all`` and ``prune`` work on one store's backups
  (``--all-stores``: every store, ``prune`` applying its policy to each store
  separately), so pruning one store's backups never deletes another's.

The rule (:func:`same_store`): when both sides have an id, the ids decide.
Otherwise (a store we never wrote to, a backup older than ids) what both
sides have: the backend and location, and for a SQLite file also the host.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage.identity import read_id
from triggerfish_cli.storage.provider import StorageProvider


def hostname() -> str:
    # lazy: socket (+2 modules) is not loaded by `status` of a store with no backups
    import socket

    return socket.gethostname()


@dataclass(frozen=True)
class StoreRef:
    """A store as backups name it."""

    backend: str
    #: ``sqlite:<real path>``, ``postgres:<server>/<schema>``, ``s3://bucket/prefix``.
    source: str
    store_id: str | None
    host: str | None
    #: Whether the store exists (None: it could not be reached to find out).
    exists: bool | None = True
    #: Whether it holds no key (a restore into it loses nothing).
    empty: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "source": self.source,
            "store_id": self.store_id,
            "host": self.host,
        }

    def describe(self) -> str:
        ident = f"id {self.store_id}" if self.store_id else "no id yet"
        return f"{self.source} ({ident})"


def location(provider: StorageProvider) -> str:
    """Where a store is, as manifests record it (a SQLite path is made absolute and real)."""
    path = provider.database_file()
    if path is not None:  # a store in one file (SQLite): ``sqlite:<real path>``
        return f"{provider.backend}:{os.path.realpath(path)}"
    return provider.describe()


def config_location(config: StorageConfig) -> str:
    """:func:`location` of a store that is not open (missing or unreachable)."""
    if config.path is not None:  # a store in one file (only SQLite's config has a path)
        return f"{config.backend}:{os.path.realpath(config.path.expanduser())}"
    # lazy: locations (+1 module) is not loaded by `backup list` or `status`
    from triggerfish_cli.locations import describe_config

    return describe_config(config)


def ref_of(provider: StorageProvider) -> StoreRef:
    """The open store ``provider`` (reads only)."""
    empty = next(iter(provider.scan_keys(batch_size=1)), None) is None
    return StoreRef(
        provider.backend, location(provider), read_id(provider), hostname(), True, empty
    )


def ref_of_missing(config: StorageConfig, *, exists: bool | None = False) -> StoreRef:
    """A store that does not exist (``exists=False``) or could not be reached (None)."""
    return StoreRef(
        config.backend, config_location(config), None, hostname(), exists, exists is False
    )


def manifest_ref(manifest: Manifest) -> StoreRef:
    return StoreRef(manifest.backend, manifest.source, manifest.store_id, manifest.host)


def same_place(manifest: Manifest, store: StoreRef) -> bool:
    """The backup was made of a store at the same place (backend, location, host)."""
    # lazy: storage.backends adds 53 modules to backup.stores (backup list's groups)
    from triggerfish_cli.storage.backends import in_local_files

    if manifest.backend != store.backend or manifest.source != store.source:  # same backend?
        return False
    if in_local_files(store.backend) and manifest.host and store.host:  # a file: on this host
        return manifest.host == store.host
    return True


def same_store(manifest: Manifest, store: StoreRef) -> bool:
    """The backup is one of ``store``'s own (see the module docstring)."""
    if manifest.store_id and store.store_id:
        return manifest.store_id == store.store_id
    return same_place(manifest, store)


def group_key(manifest: Manifest) -> str:
    """The group a backup belongs to when every store's backups are shown."""
    if manifest.store_id:
        return manifest.store_id
    return f"{manifest.host or '?'}:{manifest.source}"


def label(manifest: Manifest | None) -> str:
    """A short name of the backup's store, for tables."""
    if manifest is None:
        return ""
    if manifest.store_id:
        return manifest.store_id[:8]
    where = manifest.source.removeprefix("sqlite:")
    return f"{manifest.host}:{where}" if manifest.host else where


def groups(manifests: Iterable[Manifest]) -> dict[str, list[Manifest]]:
    """Manifests by store; one without an id joins the id of its place when that is unique."""
    listed = list(manifests)
    ids_by_place: dict[tuple[str, str, str | None], set[str]] = {}
    for manifest in listed:
        if manifest.store_id:
            place = (manifest.backend, manifest.source, manifest.host)
            ids_by_place.setdefault(place, set()).add(manifest.store_id)
    found: dict[str, list[Manifest]] = {}
    for manifest in listed:
        key = group_key(manifest)
        if not manifest.store_id:
            ids = ids_by_place.get((manifest.backend, manifest.source, manifest.host), set())
            if len(ids) == 1:
                key = next(iter(ids))
        found.setdefault(key, []).append(manifest)
    return found


def new_identity(manifest: Manifest, target: StoreRef) -> str | None:
    """The id the store a restore produces keeps: the target's own; else the backup's,
    when it was made of a store at this very place (putting a store back where it
    was); else None (a fresh one is recorded: a copy elsewhere is another store)."""
    if target.store_id:
        return target.store_id
    if manifest.store_id and same_place(manifest, target):
        return manifest.store_id
    return None
