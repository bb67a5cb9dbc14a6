"""`backup restore` and `backup restore --undo`: choose the way, confirm, run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from triggerfish_cli.cli.backup_output import show_restore
from triggerfish_cli.errors import InvalidDataError, TriggerfishError

if TYPE_CHECKING:
    from triggerfish_cli.backup_dest import Destination
    from triggerfish_cli.cli.context import AppState
    from triggerfish_cli.cli.output import Output


def run_restore(
    st: AppState,
    out: Output,
    dest: Destination,
    name: str,
    target: Path | None,
    *,
    options: dict[str, bool],
    dry_run: bool,
) -> None:
    entry = dest.entry(name)
    if entry.manifest is None:
        raise InvalidDataError(entry.error or f"{name}: not a backup")
    manifest = entry.manifest
    if manifest.kind == "physical" and target is not None:
        _physical(out, dest, name, target, manifest, options, dry_run)
    else:
        _logical(st, out, dest, name, target, manifest, options, dry_run)


def _physical(
    out: Output,
    dest: Destination,
    name: str,
    target: Path,
    manifest: Any,
    options: dict[str, bool],
    dry_run: bool,
) -> None:
    from triggerfish_cli.backup_restore import PRE_RESTORE, check_not_open, restore_physical

    force = options["force"]
    check_not_open(target, force)
    keep = f"{target.name}{PRE_RESTORE}<time>" if target.exists() else None
    if dry_run:
        show_restore(
            out,
            {
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
            f"Replace {target} with the backup of {manifest.created} ({manifest.keys} keys)? "
            f"The current store is kept as {keep}.",
            yes=options["yes"],
            what="the restore",
        )
    with out.progress("restoring") as bar, dest.local_copy(name, target.parent) as path:
        result = restore_physical(path, name, target, force=force, progress=bar)
    show_restore(out, result.as_dict())


def _logical(
    st: AppState,
    out: Output,
    dest: Destination,
    name: str,
    target: Path | None,
    manifest: Any,
    options: dict[str, bool],
    dry_run: bool,
) -> None:
    from triggerfish_cli.backup_dest import temp_dir
    from triggerfish_cli.backup_restore import load_logical, load_mode, safety_backup

    if target is not None:
        from triggerfish_cli.storage.sqlite import SqliteStorage

        # Key by key through the write gate, which pauses (or refuses) the live
        # writers for each short transaction: no need to refuse an open store.
        provider: Any = st.keep(SqliteStorage(target, create=True))
    else:
        provider = st.provider(create=True)
    mode = load_mode(
        provider, replace=options["replace"], merge=options["merge"], force=options["force"]
    )
    if dry_run:
        show_restore(
            out,
            {
                "target": provider.describe(),
                "mode": mode,
                "written": 0,
                "deleted": 0,
                "created": manifest.created,
                "keys": manifest.keys,
                "checks": [],
                "dry_run": True,
            },
        )
        return
    if mode != "empty":
        what = "replace every key of" if mode == "replace" else "merge the backup into"
        out.confirm(
            f"{what} {provider.describe()} ({manifest.keys} keys from the backup of "
            f"{manifest.created})?",
            yes=options["yes"],
            what="the restore",
        )
    kept = safety_backup(provider, mode)
    if kept:
        out.info(f"the store's keys as they were are saved in {kept}")
    try:
        with (
            out.progress("restoring", total=manifest.keys) as bar,
            temp_dir(dest.scratch_dir(), "restore") as work,
            dest.local_copy(name, work) as path,
        ):
            result = load_logical(path, name, provider, mode, scratch=work, on_progress=bar.advance)
    except (TriggerfishError, KeyboardInterrupt):
        if kept:
            out.info(
                "the restore stopped part way: put the store back with "
                f"`triggerfish-admin backup restore {kept} --replace --yes`"
            )
        raise
    show_restore(out, {**result.as_dict(), "kept": kept})


def run_undo(out: Output, target: Path, *, force: bool, yes: bool, dry_run: bool) -> None:
    from triggerfish_cli.backup_restore import check_not_open, pre_restores, undo

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
