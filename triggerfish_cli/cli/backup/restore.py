"""`backup restore`: the command and its options (restore_run.py runs it)."""

from __future__ import annotations

from typing import Annotated

import typer

from triggerfish_cli.cli.backup.common import app
from triggerfish_cli.cli.backup.options import (
    ArchiveArg,
    EndpointOpt,
    FromOpt,
    IdentityOpt,
    LatestOpt,
    identities,
)
from triggerfish_cli.cli.backup.selection import pick
from triggerfish_cli.cli.options import (
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    YesOpt,
    begin,
)
from triggerfish_cli.errors import UsageError


@app.command("restore")
def restore_cmd(
    ctx: typer.Context,
    file: ArchiveArg = None,
    latest: LatestOpt = False,
    source: FromOpt = None,
    endpoint_url: EndpointOpt = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="PATH",
            help="The SQLite file to restore into, a path with a / in it or a .db/.sqlite "
            "name (default: the store of --db/--config); a bare word is refused.",
            show_default=False,
        ),
    ] = None,
    undo: Annotated[
        bool,
        typer.Option("--undo", help="Put back the store the newest restore replaced."),
    ] = False,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Logical restore into a non-empty store: it becomes exactly the backup.",
        ),
    ] = False,
    merge: Annotated[
        bool,
        typer.Option("--merge", help="Logical restore into a non-empty store: backup values win."),
    ] = False,
    logical: Annotated[
        bool,
        typer.Option(
            "--logical",
            help="Load key by key even a physical backup into a SQLite store "
            "(as --replace/--merge do), instead of swapping the file in.",
        ),
    ] = False,
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            metavar="PREFIX",
            help="Restore only the keys under PREFIX (a key prefix, or a namespace name "
            "such as cron); repeatable. Loads key by key (as --logical); nothing else "
            "in the store changes.",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Restore even while another process has the store open."),
    ] = False,
    other_store: Annotated[
        bool,
        typer.Option(
            "--other-store",
            help="Restore FILE even though it is a backup of another store (by default "
            "refused, exit 4, unless the target is empty).",
        ),
    ] = False,
    identity: IdentityOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Verify a backup, restore it into a scratch file, check it, swap it in atomically.

    --latest is the newest backup of the target store; into a new or empty
    --to file, the newest of the store of --db/--config (a look at it in a
    scratch file). A backup of another store is refused (exit 4) over a
    store that holds keys, unless --other-store. The backup used is named,
    in the dry run too. The replaced store is kept as
    <db>.pre-restore-<time>; --undo puts it back (and keeps the store it
    replaces as <db>.undone-<time>). Refused (exit 6) while another process has the
    store open, unless --force. A logical backup (or a non-SQLite store)
    loads key by key: into an empty store, or with --replace (all or
    nothing) or --merge. A failed restore leaves the store as it was. An
    encrypted backup needs --identity (exit 2 without; exit 4 when it opens
    none of its recipients).

    --include PREFIX (repeatable) restores only the keys under those prefixes,
    key by key: a store holding none of them takes them as they are; else
    --merge writes the backup's over them, --replace makes them exactly the
    backup's (the store's keys under the prefixes are deleted first, in the
    same transaction). Keys under no included prefix are never touched. The
    dry run counts, per namespace, what would be written and deleted.
    """
    # lazy: backup.include, backup.restore and restore_run add 41 modules to `backup --help`
    from triggerfish_cli.backup.include import normalize
    from triggerfish_cli.backup.restore import RestoreOptions, restore_target
    from triggerfish_cli.cli.backup.restore_run import (
        latest_of,
        run_restore,
        run_undo,
        target_store,
    )

    st, out = begin(ctx, fmt, quiet)
    prefixes = normalize(include) if include else ()
    if undo:
        if file or latest or replace or merge or logical or prefixes:
            raise UsageError(
                "--undo takes no FILE, --latest, --replace, --merge, --logical or --include"
            )
        target = restore_target(to, st.storage_config)
        if target is None:
            raise UsageError("--undo applies to a SQLite store (give --db or --to)")
        run_undo(out, target, force=force, yes=yes, dry_run=dry_run)
        return
    target = restore_target(to, st.storage_config)
    store = target_store(st, target)
    newest_of = latest_of(st, store, to)
    why = None
    if newest_of is not store:
        why = "into a new or empty --to, --latest is the newest backup of --db/--config's store"
    dest, name = pick(file, latest, source, endpoint_url, newest_of, why=why)
    run_restore(
        st,
        out,
        dest,
        name,
        target,
        store=store,
        options=RestoreOptions(
            replace=replace,
            merge=merge,
            force=force,
            other_store=other_store,
            logical=logical or bool(prefixes),
            include=prefixes,
            identities=identities(identity),
        ),
        yes=yes,
        dry_run=dry_run,
    )
