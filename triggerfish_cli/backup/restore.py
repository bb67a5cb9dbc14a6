"""``backup restore``: a plan (which way, what it would do), then its apply.

:func:`plan_restore` reads the backup's manifest (opening an encrypted one),
refuses another store's backup over a store that holds keys, and chooses the
way: physical (a SQLite archive swapped in as a file, physical.py) or logical
(key by key through the StorageProvider, load.py). It writes nothing; the
plan holds the dry-run document and the question to confirm.

:meth:`RestorePlan.save_first` then makes the safety backup a logical restore
that cannot be one transaction needs, and :meth:`RestorePlan.apply` restores,
reporting progress. :func:`plan_undo` and :meth:`UndoPlan.apply` do the same
for ``--undo``. :func:`restore_target` finds the local file either replaces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli.backup.archive import open_sealed
from triggerfish_cli.backup.crypt import Identities, Recipient
from triggerfish_cli.backup.dest import Destination, temp_dir
from triggerfish_cli.backup.load import (
    load_logical,
    load_mode,
    needs_identity,
    plan_include,
    safety_backup,
)
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.backup.physical import (
    PRE_RESTORE,
    UNDONE,
    check_not_open,
    pre_restores,
    restore_physical,
    store_file,
    undo,
)
from triggerfish_cli.backup.settings import backup_settings, configured_recipients
from triggerfish_cli.backup.stores import (
    StoreRef,
    manifest_ref,
    new_identity,
    ref_of,
    ref_of_missing,
    same_store,
)
from triggerfish_cli.errors import (
    InvalidDataError,
    MissingStoreError,
    RefusedError,
    TriggerfishError,
    UsageError,
)
from triggerfish_cli.locations import open_source, parse_location
from triggerfish_cli.progress import Reporter
from triggerfish_cli.settings import Settings, StorageConfig
from triggerfish_cli.storage.backends import file_backend, local_file
from triggerfish_cli.storage.provider import StorageProvider


@dataclass(frozen=True)
class RestoreOptions:
    replace: bool = False
    merge: bool = False
    force: bool = False
    other_store: bool = False
    #: Key by key even a physical backup into a SQLite store (``--include`` too).
    logical: bool = False
    include: tuple[str, ...] = ()
    identities: Identities | None = None


def restore_target(to: str | None, configured: Callable[[], StorageConfig]) -> Path | None:
    """The local file a restore replaces (a symbolic link someone else could have planted
    refused, exit 4; others resolved: physical.store_file): ``--to``'s, else the one the
    store of the command (``configured()``) lives in; None when that store is not a local
    file (a restore loads into it key by key).

    ``--to`` takes a SQLite path in migrate's form (a ``/`` in it or a
    ``.db``/``.sqlite``/``.sqlite3`` name); a bare word is refused, and so is a
    Postgres or S3 location (restore into those through --config/--backend).
    """
    if to is None:
        path = local_file(configured())
        if path is None:
            return None
    else:
        path = local_file(parse_location(to, "to"))
        if path is None:
            raise UsageError(
                f"--to {to}: backup restore --to takes a SQLite file",
                hint="restore into a Postgres or S3 store through the store of the command "
                "(--config, or --backend and its settings)",
            )
    return store_file(path)


def target_store(target: Path) -> StoreRef:
    """The SQLite store a restore would replace, as backups name it (opened read-only)."""
    place = StorageConfig(file_backend(), path=target)
    try:
        store = open_source(place)
    except MissingStoreError:
        return ref_of_missing(place)
    except TriggerfishError:  # damaged (what a restore is for): known by its place alone
        return ref_of_missing(place, exists=None)
    try:
        return ref_of(store)
    finally:
        store.close()


def check_store(manifest: Manifest, name: str, store: StoreRef, *, other_store: bool) -> None:
    """Refuse (exit 4) to put another store's backup over a store that holds keys."""
    if other_store or store.empty or same_store(manifest, store):
        return
    source = manifest_ref(manifest)
    host = f" on {manifest.host}" if manifest.host else ""
    raise RefusedError(
        f"{name} is a backup of another store, {source.describe()}{host}, "
        f"not of {store.describe()}: nothing restored",
        hint="pass --other-store to put it over this store anyway",
    )


def safety_recipients(settings: Settings, origin: str) -> list[Recipient] | None:
    """The keys a pre-restore safety copy is encrypted to (those of backup: recipients);
    None when the settings require encryption but name no key (it is then refused)."""
    found = backup_settings(settings)
    if found.has_recipients:
        return configured_recipients(found, origin)
    return None if found.require_encryption else []


@dataclass
class RestorePlan:
    """What a restore will do, decided before anything is written."""

    dest: Destination
    name: str
    manifest: Manifest
    store: StoreRef
    options: RestoreOptions
    #: "physical" (the file swapped in) or "logical" (key by key).
    way: str
    #: The SQLite file restored into (None: the store of the command).
    target: Path | None
    #: Logical: the store loaded into (None: a dry run into a store that does not exist).
    provider: StorageProvider | None = None
    #: Logical: "empty", "replace" or "merge".
    mode: str = ""
    #: What a confirmation asks before anything is written; None: nothing to confirm.
    question: str | None = None
    #: The backup, its store, and (partial) its ceiling: in every document.
    named: dict[str, Any] = field(default_factory=dict)
    #: The safety backup made by :meth:`save_first` (its path), if any.
    kept: str | None = None

    @property
    def total(self) -> int | None:
        """The progress total of :meth:`apply` (None: unknown ahead)."""
        return self.manifest.keys if self.way == "logical" else None

    def as_dict(self) -> dict[str, Any]:
        """The dry-run document (an ``--include`` one reads the archive through)."""
        manifest = self.manifest
        if self.way == "physical":
            assert self.target is not None
            return {
                **self.named,
                "target": str(self.target),
                "kept": f"{self.target.name}{PRE_RESTORE}<time>" if self.target.exists() else None,
                "created": manifest.created,
                "keys": manifest.keys,
                "checks": [],
                "dry_run": True,
            }
        document = {
            **self.named,
            "target": self.provider.describe() if self.provider else self.store.source,
            "mode": self.mode,
            "written": 0,
            "deleted": 0,
            "created": manifest.created,
            "keys": manifest.keys,
            "checks": [],
            "dry_run": True,
        }
        if self.options.include:
            document.update(self._included())
        return document

    def _included(self) -> dict[str, Any]:
        """The dry run of --include: the archive read through, counted per namespace."""
        dest, name = self.dest, self.name
        with temp_dir(dest.scratch_dir(), "restore") as work, dest.local_copy(name, work) as path:
            found = plan_include(
                path,
                name,
                self.provider,
                self.mode,
                self.options.include,
                scratch=work,
                identities=self.options.identities,
            )
        return {**found.as_dict(), "checks": found.checks}

    def save_first(self, recipients: Callable[[], list[Recipient] | None]) -> str | None:
        """Before a logical --replace/--merge that cannot be one transaction: the store's
        keys as they are, in the default backup directory (see load.safety_backup),
        encrypted to ``recipients()`` (:func:`safety_recipients`)."""
        if self.way == "logical":
            assert self.provider is not None
            self.kept = safety_backup(self.provider, self.mode, recipients=recipients())
        return self.kept

    @property
    def way_back(self) -> str | None:
        """How to put the store back after a restore that stopped part way (None: no need)."""
        if not self.kept:
            return None
        return (
            "the restore stopped part way: put the store back with "
            f"`triggerfish-admin backup restore {self.kept} --replace --yes"
            + (" --identity FILE`" if self.kept.endswith(".age") else "`")
        )

    def apply(self, progress: Reporter) -> dict[str, Any]:
        """Restore; the document of what was done."""
        dest, name, manifest, options = self.dest, self.name, self.manifest, self.options
        store_id = new_identity(manifest, self.store)
        if self.way == "physical":
            assert self.target is not None
            with dest.local_copy(name, self.target.parent) as path:
                swapped = restore_physical(
                    path,
                    name,
                    self.target,
                    backend=manifest.backend,
                    force=options.force,
                    progress=progress,
                    store_id=store_id,
                    identities=options.identities,
                )
            return {**self.named, **swapped.as_dict()}
        assert self.provider is not None
        with temp_dir(dest.scratch_dir(), "restore") as work, dest.local_copy(name, work) as path:
            loaded = load_logical(
                path,
                name,
                self.provider,
                self.mode,
                scratch=work,
                on_progress=progress.advance,
                store_id=store_id,
                identities=options.identities,
                include=options.include,
            )
        document = {**self.named, **loaded.as_dict(), "kept": self.kept}
        if options.include:
            document["keys"] = loaded.written
        return document


def plan_restore(
    dest: Destination,
    name: str,
    target: Path | None,
    store: StoreRef,
    options: RestoreOptions,
    *,
    open_store: Callable[[], StorageProvider],
    dry_run: bool = False,
) -> RestorePlan:
    """Decide the restore of backup ``name`` of ``dest``; write nothing.

    ``target``: the SQLite file restored into (None: the store is not SQLite);
    ``store``: the store it replaces, as backups name it (:func:`target_store`);
    ``open_store``: opens (creating it) the store a logical restore loads into,
    which a dry run into a store that does not exist never calls.
    """
    entry = dest.entry(name)
    if entry.manifest is None:
        raise InvalidDataError(entry.error or f"{name}: not a backup")
    manifest = entry.manifest
    if manifest.sealed:  # what it holds and whose it is are inside the encryption
        if options.identities is None:
            raise needs_identity(name)
        manifest = open_sealed(
            manifest,
            lambda offset, length: dest.read_range(name, offset, length),
            options.identities,
            name,
        )
    check_store(manifest, name, store, other_store=options.other_store)
    named: dict[str, Any] = {"backup": name, "backup_store": manifest_ref(manifest).as_dict()}
    if manifest.partial:
        named.update(partial=True, max_taint=manifest.max_taint)
    plan = RestorePlan(dest, name, manifest, store, options, "logical", target, named=named)
    if manifest.kind == "physical" and target is not None and not options.logical:
        plan.way = "physical"
        check_not_open(target, options.force, manifest.backend)
        if target.exists():
            plan.question = (
                f"Replace {target} with {name} (made {manifest.created}, {manifest.keys} keys)? "
                f"The current store is kept as {target.name}{PRE_RESTORE}<time>."
            )
        return plan
    include = options.include
    if include:
        named["include"] = list(include)
    if dry_run and store.exists is False:  # nothing made by a dry run
        plan.mode = "empty"
        return plan
    # Key by key through the write gate, which pauses (or refuses) the live
    # writers for each short transaction: no need to refuse an open store.
    plan.provider = provider = open_store()
    plan.mode = mode = load_mode(
        provider,
        replace=options.replace,
        merge=options.merge,
        force=options.force,
        include=include,
    )
    if mode != "empty":
        what = "replace every key of" if mode == "replace" else "merge the backup into"
        if include:
            what = (
                f"replace the keys under {', '.join(include)} of"
                if mode == "replace"
                else f"merge the backup's keys under {', '.join(include)} into"
            )
        partial = f", partial: nothing above {manifest.max_taint}" if manifest.partial else ""
        plan.question = (
            f"{what} {provider.describe()} ({manifest.keys} keys from {name}, made "
            f"{manifest.created}{partial})?"
        )
    return plan


@dataclass
class UndoPlan:
    """``--undo``: the newest ``<db>.pre-restore-<time>`` put back as the store."""

    target: Path
    #: The pre-restore files found, oldest first.
    found: list[Path]
    force: bool = False

    @property
    def question(self) -> str | None:
        if not self.found:
            return None
        return (
            f"Put {self.found[-1].name} back as {self.target}? The current store is kept as "
            f"{self.target.name}{UNDONE}<time>."
        )

    def as_dict(self) -> dict[str, Any]:
        """The dry-run document."""
        return undo(self.target, force=self.force, dry_run=True).as_dict()

    def apply(self) -> dict[str, Any]:
        return undo(self.target, force=self.force).as_dict()


def plan_undo(target: Path, *, force: bool, dry_run: bool = False) -> UndoPlan:
    """Refuses (exit 6) while another process has the store open, unless ``force``."""
    found = pre_restores(target)
    if not dry_run and found:
        check_not_open(target, force, file_backend())
    return UndoPlan(target, found, force)
