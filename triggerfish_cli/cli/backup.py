"""`triggerfish-admin backup`: create, list, verify, restore and prune backups."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from triggerfish_cli.cli import metrics
from triggerfish_cli.cli.backup_options import (
    AllStoresOpt,
    ArchiveArg,
    Compression,
    EndpointOpt,
    FromOpt,
    IdentityOpt,
    LatestOpt,
    ScratchOpt,
    SseKeyOpt,
    SseOpt,
    by_store,
    destination,
    identities,
    none_of,
    of_store,
    pick,
    sse_of,
    this_store,
)
from triggerfish_cli.cli.backup_output import show_entries, show_plan, show_verified
from triggerfish_cli.cli.context import AppState, state
from triggerfish_cli.cli.kv.common import RawTaintOpt
from triggerfish_cli.cli.metrics import MetricsOpt
from triggerfish_cli.cli.options import (
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    YesOpt,
    check_level,
    complete_level,
    fmt_value,
    sub_app,
)
from triggerfish_cli.errors import NotFoundError, UsageError

app = sub_app(
    "backup",
    "Back the store up; list, verify, restore and prune backups.\n\n"
    "Each backup is one file, triggerfish-<UTC time>.db.zst (SQLite, physical) or "
    ".jsonl.zst (logical: JSON Lines of every key, restorable into any backend), "
    "with its manifest at its end. Default destination: <base>/backups/store/.",
)


@app.command("create")
def create_cmd(
    ctx: typer.Context,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="DIR|s3://BUCKET/PREFIX",
            help="Destination directory (created 0700) or S3 prefix "
            "(default: <base>/backups/store/).",
            show_default=False,
        ),
    ] = None,
    endpoint_url: EndpointOpt = None,
    sse: SseOpt = None,
    sse_kms_key_id: SseKeyOpt = None,
    logical: Annotated[
        bool,
        typer.Option(
            "--logical",
            help="JSON Lines of every key and value, restorable into any backend "
            "(always so for Postgres and S3 stores).",
        ),
    ] = False,
    max_taint: Annotated[
        str | None,
        typer.Option(
            "--max-taint",
            metavar="LEVEL",
            callback=check_level,
            autocompletion=complete_level,
            help="With --logical: a partial backup for a lower clearance, without the "
            "memories (and other records) classified above LEVEL; the manifest says so.",
            show_default=False,
        ),
    ] = None,
    compression: Annotated[
        Compression, typer.Option("--compression", "-c", help="Compression of the archive.")
    ] = Compression.zstd,
    level: Annotated[
        int | None,
        typer.Option(
            "--level",
            min=0,
            max=19,
            metavar="N",
            help="Compression level (default: zstd 1, gzip 6).",
            show_default=False,
        ),
    ] = None,
    label: Annotated[
        str | None,
        typer.Option(
            "--label", metavar="TEXT", help="A label kept in the manifest.", show_default=False
        ),
    ] = None,
    recipient: Annotated[
        list[str] | None,
        typer.Option(
            "--recipient",
            "-r",
            metavar="KEY",
            help="Encrypt to this age public key (age1...) or SSH public key "
            "(ssh-ed25519/ssh-rsa ...); repeatable. Replaces backup: recipients.",
            show_default=False,
        ),
    ] = None,
    recipients_file: Annotated[
        list[Path] | None,
        typer.Option(
            "--recipients-file",
            "-R",
            metavar="FILE",
            help="Encrypt to the public keys in FILE, one a line (# comments); repeatable.",
            show_default=False,
        ),
    ] = None,
    no_encrypt: Annotated[
        bool,
        typer.Option(
            "--no-encrypt",
            help="Write an unencrypted archive even though backup: recipients (or "
            "require_encryption) is set.",
        ),
    ] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Verify the new backup at once (as backup verify).")
    ] = False,
    identity: IdentityOpt = None,
    metrics_file: MetricsOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Back the live store up: a consistent snapshot while the gateway writes.

    SQLite: SQLite's online backup in one step (never a file copy); other
    backends: a logical backup. Written under a temp name, fsynced, renamed
    (mode 0600). --format json prints the manifest.

    Encrypted (age) to --recipient/--recipients-file, else to the keys of
    backup: recipients in triggerfish.yaml: only public keys are needed.
    Where the settings require encryption, a plain archive is refused (exit
    4) unless --no-encrypt. --verify of an encrypted backup checks its
    contents only with --identity.

    --logical --max-taint LEVEL leaves out every memory above LEVEL (and
    every other record classified above it, such as conversation messages):
    a partial copy for a lower-clearance environment; list, verify and
    restore say it is partial.
    """
    from triggerfish_cli.backup.create import create_backup
    from triggerfish_cli.backup.settings import backup_settings, choose_recipients
    from triggerfish_cli.backup.verify import check, verify_in
    from triggerfish_cli.classification import parse_level

    if max_taint is not None and not logical:
        raise UsageError(
            "--max-taint needs --logical: a physical backup is a copy of the whole file"
        )
    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    run = metrics.begin(ctx, "backup_create", metrics_file)
    recipients = choose_recipients(
        backup_settings(st.settings()),
        recipient or [],
        recipients_file or [],
        no_encrypt=no_encrypt,
        origin=str(st.config_path),
    )
    keys = identities(identity) if verify else None
    provider = st.provider()  # first: a store that does not exist leaves no directory behind
    dest = destination(to, endpoint_url, create=True, sse=sse_of(st, sse, sse_kms_key_id))
    with out.progress("backing up") as bar:
        created = create_backup(
            provider,
            dest,
            logical=logical,
            compression=compression.value,
            level=level,
            label=label,
            progress=bar,
            recipients=recipients,
            max_taint=parse_level(max_taint) if max_taint is not None else None,
        )
    document = created.as_dict()
    metrics.backed_up(run, document)
    for note in created.notes:
        out.info(f"note: {note}")
    out.warn_all(created.warnings)
    if verify:
        result = verify_in(dest, created.name, identities=keys)
        document["verified"] = result.as_dict()
        metrics.backed_up(run, document)
        check([result])
    if out.fmt != "table":
        out.record(document)
        return
    if not out.quiet:
        manifest = created.manifest
        ratio = manifest.content_bytes / max(manifest.payload_bytes, 1)
        sealed = (
            f", encrypted to {len(manifest.recipients or [])} recipient(s)"
            if manifest.encrypted
            else ""
        )
        checked = ", verified" if verify else ""
        if verify and manifest.encrypted and keys is None:
            checked = ", verified outside the encryption (contents not checked: no --identity)"
        out.line(
            f"{dest.describe().rstrip('/')}/{created.name}: {manifest.kind}, {manifest.keys} keys, "
            f"{manifest.payload_bytes} bytes ({ratio:.1f}x {manifest.compression}){sealed} "
            f"in {created.seconds:.1f} s{checked}"
        )
        if created.partial is not None:
            out.line(
                f"partial: nothing above {created.partial['max_taint']} "
                f"({created.partial['left_out']} row(s) left out)"
            )


@app.command("list")
def list_cmd(
    ctx: typer.Context,
    source: FromOpt = None,
    endpoint_url: EndpointOpt = None,
    all_stores: AllStoresOpt = False,
    fmt: FormatOpt = None,
) -> None:
    """This store's backups in a destination, oldest first: time, size, kind, label, verified.

    Each backup names the store it was made of (its id, else its host and
    path); --all-stores lists every store's, grouped by store.
    """
    st = state(ctx)
    store = None if all_stores else this_store(st)
    dest = destination(source, endpoint_url)
    listed = dest.entries()
    entries = by_store(of_store(listed, store))
    where = dest.describe()
    if store is not None:
        others = len(listed) - len(entries)
        where = f"{where} of {store.describe()}" + (
            f" ({others} of other stores: --all-stores)" if others else ""
        )
    show_entries(st.output(fmt_value(fmt)), entries, where)


@app.command("verify")
def verify_cmd(
    ctx: typer.Context,
    file: ArchiveArg = None,
    latest: LatestOpt = False,
    all_: Annotated[
        bool, typer.Option("--all", help="Every backup of this store in --from.")
    ] = False,
    source: FromOpt = None,
    endpoint_url: EndpointOpt = None,
    all_stores: AllStoresOpt = False,
    scratch: ScratchOpt = None,
    identity: IdentityOpt = None,
    metrics_file: MetricsOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Checksum, decompress, integrity checks and counts against the manifest.

    Exit 5 naming what failed; exit 8 for a file that is no backup (or a
    broken manifest); exit 3 when it does not exist. The verdict shows in
    backup list. --all and --latest take this store's backups (with
    --all-stores: every store's).

    An encrypted backup is checked fully with --identity (a key that opens
    none of it: exit 4); without one, only what is outside the encryption
    (sizes, sha256 of the encrypted bytes), and it says the contents were
    not checked (exit 0; nothing recorded for backup list).
    """
    from triggerfish_cli.backup.verify import check, verify_in

    st = state(ctx)
    keys = identities(identity)
    out = st.output(fmt_value(fmt), quiet or None)
    run = metrics.begin(ctx, "backup_verify", metrics_file)
    store = None if all_stores or file else this_store(st)
    if all_:
        if file or latest:
            raise UsageError("--all verifies every backup: no FILE or --latest with it")
        dest = destination(source, endpoint_url, sse=sse_of(st))
        listed = dest.entries()
        names = [entry.name for entry in by_store(of_store(listed, store))]
        if not names:
            if store is not None:
                raise none_of(store, dest, listed)
            raise NotFoundError(f"{dest.describe()}: no backups")
    else:
        dest, name = pick(file, latest, source, endpoint_url, store, sse=sse_of(st))
        names = [name]
    results = []
    with out.progress("verifying") as bar:
        for name in names:
            results.append(verify_in(dest, name, scratch=scratch, progress=bar, identities=keys))
    metrics.verified(run, results)
    show_verified(out, results)
    check(results)


def _sqlite_target(st: AppState, to: str | None) -> Path | None:
    """The SQLite file a restore replaces (symlinks resolved), None when the store is not SQLite.

    ``--to`` takes a SQLite path in migrate's form (a ``/`` in it or a
    ``.db``/``.sqlite``/``.sqlite3`` name); a bare word is refused, and so is a
    Postgres or S3 location (restore into those through --config/--backend).
    """
    import os

    if to is None:
        config = st.storage_config()
        if config.backend != "sqlite" or config.path is None:
            return None
        path = config.path
    else:
        from triggerfish_cli.locations import parse_location

        config = parse_location(to, "to")
        if config.backend != "sqlite" or config.path is None:
            raise UsageError(
                f"--to {to}: backup restore --to takes a SQLite file",
                hint="restore into a Postgres or S3 store through the store of the command "
                "(--config, or --backend and its settings)",
            )
        path = config.path
    return Path(os.path.realpath(path.expanduser()))


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

    --latest is the newest backup of the target store; a backup of another
    store is refused (exit 4) over a store that holds keys, unless
    --other-store. The backup used is named, in the dry run too. The
    replaced store is kept as <db>.pre-restore-<time>; --undo puts it
    back. Refused (exit 6) while another process has the store open, unless
    --force. A logical backup (or a non-SQLite store) loads key by key:
    into an empty store, or with --replace (all or nothing) or --merge.
    A failed restore leaves the store as it was. An encrypted backup needs
    --identity (exit 2 without; exit 4 when it opens none of its recipients).

    --include PREFIX (repeatable) restores only the keys under those prefixes,
    key by key: a store holding none of them takes them as they are; else
    --merge writes the backup's over them, --replace makes them exactly the
    backup's (the store's keys under the prefixes are deleted first, in the
    same transaction). Keys under no included prefix are never touched. The
    dry run counts, per namespace, what would be written and deleted.
    """
    from triggerfish_cli.backup.include import normalize
    from triggerfish_cli.cli.backup_restore import run_restore, run_undo, target_store

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    prefixes = normalize(include) if include else ()
    if undo:
        if file or latest or replace or merge or logical or prefixes:
            raise UsageError(
                "--undo takes no FILE, --latest, --replace, --merge, --logical or --include"
            )
        target = _sqlite_target(st, to)
        if target is None:
            raise UsageError("--undo applies to a SQLite store (give --db or --to)")
        run_undo(out, target, force=force, yes=yes, dry_run=dry_run)
        return
    target = _sqlite_target(st, to)
    store = target_store(st, target)
    dest, name = pick(file, latest, source, endpoint_url, store)
    run_restore(
        st,
        out,
        dest,
        name,
        target,
        store=store,
        options={
            "replace": replace,
            "merge": merge,
            "force": force,
            "yes": yes,
            "other_store": other_store,
            "logical": logical or bool(prefixes),
            "include": prefixes,
        },
        dry_run=dry_run,
        identities=identities(identity),
    )


@app.command("diff")
def diff_cmd(
    ctx: typer.Context,
    a: Annotated[
        str | None,
        typer.Argument(
            metavar="[A]",
            help="From: a backup file, the name of one in --from, or `current` (the live "
            "store). With --latest this is B.",
            show_default=False,
        ),
    ] = None,
    b: Annotated[
        str | None,
        typer.Argument(
            metavar="[B]",
            help="To: a backup as A, or `current`: the live store (default).",
            show_default=False,
        ),
    ] = None,
    latest: Annotated[
        bool, typer.Option("--latest", help="A is the newest backup of this store in --from.")
    ] = False,
    source: FromOpt = None,
    endpoint_url: EndpointOpt = None,
    keys: Annotated[
        bool,
        typer.Option(
            "--keys",
            help="List the keys too: + added, - removed, M changed (control characters "
            "escaped). Naming memory keys above PUBLIC writes an audit record, as kv list.",
        ),
    ] = False,
    taint: RawTaintOpt = None,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            help="Exit 1 when they differ, 0 when identical (as git diff --exit-code); "
            "with -q print nothing",
        ),
    ] = False,
    scratch: ScratchOpt = None,
    identity: IdentityOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Keys added, removed and changed per namespace between two backups, or a backup
    and the live store (as restic diff); values are compared, never shown.

    Logical and physical backups alike; each backup is verified first (exit 5
    when damaged). Exit 0 whether or not they differ, unless --exit-code.
    --format json gives {"from", "to", "identical", "namespaces": {NS: {"added",
    "removed", "changed"}}, "totals"} and with --keys "keys": {"added": [...], ...}.
    With --taint, memory rows above it are left out (neither counted nor named).
    An encrypted backup needs --identity.
    """
    from triggerfish_cli.cli.backup_diff import run_diff

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    differ = run_diff(
        st,
        out,
        (a, b, latest),
        (source, endpoint_url),
        keys=keys,
        taint=taint,
        exit_code=exit_code,
        scratch=scratch,
        identities=identities(identity),
    )
    if exit_code and differ:
        raise typer.Exit(1)


@app.command("prune")
def prune_cmd(
    ctx: typer.Context,
    keep_last: Annotated[
        int, typer.Option("--keep-last", min=0, metavar="N", help="Keep the N newest backups.")
    ] = 0,
    keep_daily: Annotated[
        int,
        typer.Option("--keep-daily", min=0, metavar="D", help="Keep the newest of each of D days."),
    ] = 0,
    keep_weekly: Annotated[
        int,
        typer.Option(
            "--keep-weekly", min=0, metavar="W", help="Keep the newest of each of W ISO weeks."
        ),
    ] = 0,
    keep_monthly: Annotated[
        int,
        typer.Option(
            "--keep-monthly", min=0, metavar="M", help="Keep the newest of each of M months."
        ),
    ] = 0,
    source: FromOpt = None,
    endpoint_url: EndpointOpt = None,
    all_stores: Annotated[
        bool,
        typer.Option(
            "--all-stores",
            help="Prune every store's backups in --from, the policy applied to each store "
            "separately (default: only this store's backups are looked at).",
        ),
    ] = False,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    metrics_file: MetricsOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Delete the backups no keep rule keeps (restic's rules, UTC); show why each stays.

    Only this store's backups are pruned: another store's in the same
    destination are never deleted (--all-stores: each store's by the same
    policy, separately). An empty policy is refused (exit 2). The newest
    verified backup of each store and unreadable files are never deleted.
    """
    from triggerfish_cli.backup.prune import KeepPolicy, plan_prune, plan_prune_by_store

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    policy = KeepPolicy(keep_last, keep_daily, keep_weekly, keep_monthly)
    policy.check()
    run = None if dry_run else metrics.begin(ctx, "backup_prune", metrics_file)
    store = None if all_stores else this_store(st)
    dest = destination(source, endpoint_url)
    if store is None:
        plan = plan_prune_by_store(dest.entries(), policy)
    else:
        plan = plan_prune(of_store(dest.entries(), store), policy)
    deletes = plan.deletes
    if dry_run or not deletes:
        metrics.pruned(run, 0, len(plan.decisions))
        show_plan(out, plan, dry_run=dry_run)
        return
    out.confirm(
        f"Delete {len(deletes)} backup(s) from {dest.describe()}?", yes=yes, what="the prune"
    )
    for decision in deletes:
        dest.delete(decision.entry.name)
    metrics.pruned(run, len(deletes), len(plan.decisions) - len(deletes))
    show_plan(out, plan, dry_run=False)


@app.command("keygen")
def keygen_cmd(
    ctx: typer.Context,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Where to write the new identity (created 0600; an existing file is "
            "never overwritten).",
            show_default=False,
        ),
    ],
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Make an age identity for encrypted backups; print its public key.

    The identity (the private key) goes to FILE, mode 0600, in age-keygen's
    format; keep it off the backup host. The public key printed is what
    --recipient and backup: recipients take: backing up needs only it.
    """
    from triggerfish_cli.backup.crypt import keygen
    from triggerfish_cli.serialization import now_iso

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    public = keygen(output.expanduser(), created=now_iso())
    if out.fmt != "table":
        out.record({"identity_file": str(output), "public_key": public})
        return
    out.line(public)
    out.info(f"identity written to {output} (0600): keep it off the backup host")
