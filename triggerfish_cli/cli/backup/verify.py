"""`backup verify`: checksum, decompress, check and count a backup."""

from __future__ import annotations

from typing import Annotated

import typer

from triggerfish_cli.cli import metrics
from triggerfish_cli.cli.backup.common import app
from triggerfish_cli.cli.backup.options import (
    AllStoresOpt,
    ArchiveArg,
    EndpointOpt,
    FromOpt,
    IdentityOpt,
    LatestOpt,
    VerifyScratchOpt,
    by_store,
    destination,
    identities,
    of_store,
    sse_of,
    this_store,
)
from triggerfish_cli.cli.backup.output import show_verified
from triggerfish_cli.cli.backup.selection import none_of, pick
from triggerfish_cli.cli.metrics import MetricsOpt
from triggerfish_cli.cli.options import (
    FormatOpt,
    QuietOpt,
    begin,
)
from triggerfish_cli.errors import NotFoundError, UsageError


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
    scratch: VerifyScratchOpt = None,
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
    not checked (exit 0; recorded as verified keyless, which never replaces
    the verdict of a verify with the key, made here or on another host).
    """
    # lazy: backup.verify adds 27 modules to `backup --help`
    from triggerfish_cli.backup.verify import check, verify_in

    st, out = begin(ctx, fmt, quiet)
    keys = identities(identity)
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
