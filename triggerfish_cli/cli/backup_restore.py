"""`backup restore` and `backup restore --undo`: choose the way, confirm, run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from triggerfish_cli.cli.backup_output import show_restore
from triggerfish_cli.errors import InvalidDataError, RefusedError, TriggerfishError

if TYPE_CHECKING:
    from triggerfish_cli.backup.crypt import Identities
    from triggerfish_cli.backup.dest import Destination
    from triggerfish_cli.backup.stores import StoreRef
    from triggerfish_cli.cli.context import AppState
    from triggerfish_cli.cli.output import Output


def target_store(st: AppState, target: Path | None) -> StoreRef:
    """The store a restore would replace, as backups name it (opened read-only, closed)."""
    from triggerfish_cli.backup.stores import ref_of, ref_of_missing
    from triggerfish_cli.cli.backup_options import this_store
    from triggerfish_cli.errors import MissingStoreError
    from triggerfish_cli.settings import StorageConfig
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    if target is None:
        config = st.storage_config()
        if config.backend != "sqlite":
            return this_store(st)
        target = config.path
        assert target is not None
    place = StorageConfig("sqlite", path=target)
    try:
        store = SqliteStorage(target, read_only=True)
    except MissingStoreError:
        return ref_of_missing(place)
    except TriggerfishError:  # damaged (what a restore is for): known by its place alone
        return ref_of_missing(place, exists=None)
    try:
        return ref_of(store)
    finally:
        store.close()


def check_store(manifest: Any, name: str, store: StoreRef, *, other_store: bool) -> None:
    """Refuse (exit 4) to put another store's backup over a store that holds keys."""
    from triggerfish_cli.backup.stores import manifest_ref, same_store

    if other_store or store.empty or same_store(manifest, store):
        return
    source = manifest_ref(manifest)
    host = f" on {manifest.host}" if manifest.host else ""
    raise RefusedError(
        f"{name} is a backup of another store, {source.describe()}{host}, "
        f"not of {store.describe()}: nothing restored",
        hint="pass --other-store to put it over this store anyway",
    )


def run_restore(
    st: AppState,
    out: Output,
    dest: Destination,
    name: str,
    target: Path | None,
    *,
    store: StoreRef,
    options: dict[str, Any],
    dry_run: bool,
    identities: Identities | None = None,
) -> None:
    from triggerfish_cli.backup.stores import manifest_ref

    entry = dest.entry(name)
    if entry.manifest is None:
        raise InvalidDataError(entry.error or f"{name}: not a backup")
    manifest = entry.manifest
    if manifest.sealed:  # what it holds and whose it is are inside the encryption
        from triggerfish_cli.backup.archive import open_sealed
        from triggerfish_cli.backup.restore import needs_identity

        if identities is None:
            raise needs_identity(name)
        manifest = open_sealed(
            manifest,
            lambda offset, length: dest.read_range(name, offset, length),
            identities,
            name,
        )
    options = {**options, "identities": identities}
    check_store(manifest, name, store, other_store=options["other_store"])
    named: dict[str, Any] = {"backup": name, "backup_store": manifest_ref(manifest).as_dict()}
    if manifest.partial:
        named.update(partial=True, max_taint=manifest.max_taint)
    if manifest.kind == "physical" and target is not None and not options["logical"]:
        _physical(out, dest, name, target, manifest, store, named, options, dry_run)
    else:
        _logical(st, out, dest, name, target, manifest, store, named, options, dry_run)


def _physical(
    out: Output,
    dest: Destination,
    name: str,
    target: Path,
    manifest: Any,
    store: StoreRef,
    named: dict[str, Any],
    options: dict[str, Any],
    dry_run: bool,
) -> None:
    from triggerfish_cli.backup.restore import PRE_RESTORE, check_not_open, restore_physical
    from triggerfish_cli.backup.stores import new_identity

    force = options["force"]
    check_not_open(target, force)
    keep = f"{target.name}{PRE_RESTORE}<time>" if target.exists() else None
    if dry_run:
        show_restore(
            out,
            {
                **named,
                "target": str(target),
                "kept": keep,
                "created": manifest.created,
                "keys": manifest.keys,
                "checks": [],
                "dry_run": True,
            },
        )
        return
    if target.exists():
        out.confirm(
            f"Replace {target} with {name} (made {manifest.created}, {manifest.keys} keys)? "
            f"The current store is kept as {keep}.",
            yes=options["yes"],
            what="the restore",
        )
    with out.progress("restoring") as bar, dest.local_copy(name, target.parent) as path:
        result = restore_physical(
            path,
            name,
            target,
            force=force,
            progress=bar,
            store_id=new_identity(manifest, store),
            identities=options.get("identities"),
        )
    show_restore(out, {**named, **result.as_dict()})


def _logical(
    st: AppState,
    out: Output,
    dest: Destination,
    name: str,
    target: Path | None,
    manifest: Any,
    store: StoreRef,
    named: dict[str, Any],
    options: dict[str, Any],
    dry_run: bool,
) -> None:
    from triggerfish_cli.backup.dest import temp_dir
    from triggerfish_cli.backup.restore import load_logical, load_mode, safety_backup
    from triggerfish_cli.backup.stores import new_identity

    include = options["include"]
    if include:
        named["include"] = list(include)

    def show_dry_run(target_name: str, mode: str, into: Any) -> None:
        document = {
            **named,
            "target": target_name,
            "mode": mode,
            "written": 0,
            "deleted": 0,
            "created": manifest.created,
            "keys": manifest.keys,
            "checks": [],
            "dry_run": True,
        }
        if include:
            document.update(_included(dest, name, into, mode, options))
        show_restore(out, document)

    if dry_run and store.exists is False:  # nothing made by a dry run
        show_dry_run(store.source, "empty", None)
        return
    if target is not None:
        from triggerfish_cli.storage.sqlite.backend import SqliteStorage

        # Key by key through the write gate, which pauses (or refuses) the live
        # writers for each short transaction: no need to refuse an open store.
        provider: Any = st.keep(SqliteStorage(target, create=True))
    else:
        provider = st.provider(create=True)  # a restore into an empty target makes it
    mode = load_mode(
        provider,
        replace=options["replace"],
        merge=options["merge"],
        force=options["force"],
        include=include,
    )
    if dry_run:
        show_dry_run(provider.describe(), mode, provider)
        return
    if mode != "empty":
        what = "replace every key of" if mode == "replace" else "merge the backup into"
        if include:
            what = (
                f"replace the keys under {', '.join(include)} of"
                if mode == "replace"
                else f"merge the backup's keys under {', '.join(include)} into"
            )
        partial = f", partial: nothing above {manifest.max_taint}" if manifest.partial else ""
        out.confirm(
            f"{what} {provider.describe()} ({manifest.keys} keys from {name}, made "
            f"{manifest.created}{partial})?",
            yes=options["yes"],
            what="the restore",
        )
    kept = safety_backup(provider, mode, recipients=_safety_recipients(st))
    if kept:
        out.info(f"the store's keys as they were are saved in {kept}")
    try:
        with (
            out.progress("restoring", total=manifest.keys) as bar,
            temp_dir(dest.scratch_dir(), "restore") as work,
            dest.local_copy(name, work) as path,
        ):
            result = load_logical(
                path,
                name,
                provider,
                mode,
                scratch=work,
                on_progress=bar.advance,
                store_id=new_identity(manifest, store),
                identities=options.get("identities"),
                include=include,
            )
    except (TriggerfishError, KeyboardInterrupt):
        if kept:
            out.info(
                "the restore stopped part way: put the store back with "
                f"`triggerfish-admin backup restore {kept} --replace --yes"
                + (" --identity FILE`" if kept.endswith(".age") else "`")
            )
        raise
    document = {**named, **result.as_dict(), "kept": kept}
    if include:
        document["keys"] = result.written
    show_restore(out, document)


def _included(
    dest: Destination, name: str, provider: Any, mode: str, options: dict[str, Any]
) -> dict[str, Any]:
    """The dry run of --include: the archive read through, counted per namespace."""
    from triggerfish_cli.backup.dest import temp_dir
    from triggerfish_cli.backup.restore import plan_include

    with temp_dir(dest.scratch_dir(), "restore") as work, dest.local_copy(name, work) as path:
        found = plan_include(
            path,
            name,
            provider,
            mode,
            options["include"],
            scratch=work,
            identities=options.get("identities"),
        )
    return {**found.as_dict(), "checks": found.checks}


def _safety_recipients(st: AppState) -> list[Any] | None:
    """The keys a pre-restore safety copy is encrypted to (those of backup: recipients);
    None when the settings require encryption but name no key (it is then refused)."""
    from triggerfish_cli.backup.settings import backup_settings, configured_recipients

    found = backup_settings(st.settings())
    if found.has_recipients:
        return configured_recipients(found, str(st.config_path))
    return None if found.require_encryption else []


def run_undo(out: Output, target: Path, *, force: bool, yes: bool, dry_run: bool) -> None:
    from triggerfish_cli.backup.restore import check_not_open, pre_restores, undo

    found = pre_restores(target)
    if not dry_run and found:
        check_not_open(target, force)
        out.confirm(
            f"Put {found[-1].name} back as {target}? The current store is kept as "
            f"{target.name}.undone-<time>.",
            yes=yes,
            what="the undo",
        )
    result = undo(target, force=force, dry_run=dry_run)
    show_restore(out, result.as_dict())
