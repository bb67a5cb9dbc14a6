"""`backup create`: back the live store up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from triggerfish_cli.cli import metrics
from triggerfish_cli.cli.backup.common import app
from triggerfish_cli.cli.backup.options import (
    Compression,
    EndpointOpt,
    IdentityOpt,
    SseKeyOpt,
    SseOpt,
    destination,
    identities,
    sse_of,
)
from triggerfish_cli.cli.metrics import MetricsOpt
from triggerfish_cli.cli.options import (
    FormatOpt,
    QuietOpt,
    begin,
    check_level,
    complete_level,
)
from triggerfish_cli.errors import UsageError


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
            "--label",
            metavar="TEXT",
            help="A label kept in the manifest (in clear, also in an encrypted backup: "
            "backup list shows it).",
            show_default=False,
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

    --logical --max-taint LEVEL keeps only the records whose level is
    established and at or below LEVEL (memories, conversation messages,
    lineage, cron jobs' ceilings ...); the others, and records that could hold
    data of any level but state none (todos, notifications without one), are
    left out and counted: a partial copy for a lower-clearance environment;
    list, verify and restore say it is partial.
    """
    # lazy: backup.create, .settings and .verify add 38 modules to `backup --help`
    from triggerfish_cli.backup.create import create_backup
    from triggerfish_cli.backup.settings import backup_settings, choose_recipients
    from triggerfish_cli.backup.verify import check, verify_in
    from triggerfish_cli.classification import parse_level

    if max_taint is not None and not logical:
        raise UsageError(
            "--max-taint needs --logical: a physical backup is a copy of the whole file"
        )
    st, out = begin(ctx, fmt, quiet)
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

    def show() -> None:
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
            out.line(_partial_line(created.partial))

    out.result(document, show)


def _partial_line(partial: dict[str, Any]) -> str:
    counts = partial["left_out_by_namespace"]
    named = ", ".join(f"{namespace or '(none)'} {n}" for namespace, n in counts.items())
    return (
        f"partial: nothing above {partial['max_taint']} ({partial['left_out']} row(s) left "
        f"out, above it or of no established level{': ' + named if named else ''})"
    )
