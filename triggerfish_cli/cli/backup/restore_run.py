"""`backup restore` and `backup restore --undo`: confirm, run, show (backup/restore.py plans)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from triggerfish_cli.backup import restore
from triggerfish_cli.backup.restore import (
    RestoreOptions,
    plan_restore,
    plan_undo,
    safety_recipients,
)
from triggerfish_cli.cli.backup.options import this_store
from triggerfish_cli.cli.backup.output import show_restore
from triggerfish_cli.errors import TriggerfishError
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage.backends import file_backend
from triggerfish_cli.storage.factory import open_provider

if TYPE_CHECKING:
    from triggerfish_cli.backup.dest import Destination
    from triggerfish_cli.backup.stores import StoreRef
    from triggerfish_cli.cli.context import AppState
    from triggerfish_cli.cli.output import Output
    from triggerfish_cli.storage.provider import StorageProvider


def target_store(st: AppState, target: Path | None) -> StoreRef:
    """The store a restore would replace, as backups name it."""
    return this_store(st) if target is None else restore.target_store(target)


def latest_of(st: AppState, target: StoreRef, to: str | None) -> StoreRef:
    """The store whose newest backup --latest means: the target's own; with a new or
    empty --to, the store of --db/--config (restoring it into a scratch file)."""
    if to is not None and target.empty:
        return this_store(st)
    return target


def run_restore(
    st: AppState,
    out: Output,
    dest: Destination,
    name: str,
    target: Path | None,
    *,
    store: StoreRef,
    options: RestoreOptions,
    yes: bool,
    dry_run: bool,
) -> None:
    def open_store() -> StorageProvider:
        if target is None:
            return st.provider(create=True)  # a restore into an empty target makes it
        return st.keep(open_provider(StorageConfig(file_backend(), path=target), create=True))

    plan = plan_restore(dest, name, target, store, options, open_store=open_store, dry_run=dry_run)
    if dry_run:
        show_restore(out, plan.as_dict())
        return
    if plan.question is not None:
        out.confirm(plan.question, yes=yes, what="the restore")
    kept = plan.save_first(lambda: safety_recipients(st.settings(), str(st.config_path)))
    if kept:
        out.info(f"the store's keys as they were are saved in {kept}")
    try:
        with out.progress("restoring", total=plan.total) as bar:
            document = plan.apply(bar)
    except (TriggerfishError, KeyboardInterrupt):
        if plan.way_back:
            out.info(plan.way_back)
        raise
    show_restore(out, document)


def run_undo(out: Output, target: Path, *, force: bool, yes: bool, dry_run: bool) -> None:
    plan = plan_undo(target, force=force, dry_run=dry_run)
    if dry_run:
        show_restore(out, plan.as_dict())
        return
    if plan.question is not None:
        out.confirm(plan.question, yes=yes, what="the undo")
    show_restore(out, plan.apply())
