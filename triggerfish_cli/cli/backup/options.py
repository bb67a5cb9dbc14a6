"""Options and archive selection shared by the `backup` commands."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from triggerfish_cli.errors import UsageError
from triggerfish_cli.storage.backends import has_sse_settings

if TYPE_CHECKING:
    from triggerfish_cli.backup.crypt import Identities
    from triggerfish_cli.backup.dest import Destination, Entry
    from triggerfish_cli.backup.stores import StoreRef
    from triggerfish_cli.cli.context import AppState


class Compression(str, enum.Enum):
    zstd = "zstd"
    gzip = "gzip"
    none = "none"


EndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint-url",
        metavar="URL",
        help="S3-compatible endpoint for s3:// destinations "
        "(default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS).",
        show_default=False,
    ),
]
FromOpt = Annotated[
    str | None,
    typer.Option(
        "--from",
        metavar="DIR|s3://BUCKET/PREFIX",
        help="Where the backups are (default: <base>/backups/store/); a directory or "
        "bucket that does not exist is exit 3.",
        show_default=False,
    ),
]
ArchiveArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[FILE]",
        help="A backup file, or the name of one in --from.",
        show_default=False,
    ),
]
LatestOpt = Annotated[
    bool, typer.Option("--latest", help="The newest backup of this store in --from.")
]
AllStoresOpt = Annotated[
    bool,
    typer.Option(
        "--all-stores",
        help="Every store's backups in --from, not only this store's "
        "(the store of --db/--config/--backend).",
    ),
]
ScratchOpt = Annotated[
    Path | None,
    typer.Option(
        "--scratch",
        metavar="DIR",
        help="Where to decompress for checking (default: the backup's directory, "
        "else the system temp directory).",
        show_default=False,
    ),
]
VerifyScratchOpt = Annotated[
    Path | None,
    typer.Option(
        "--scratch",
        metavar="DIR",
        help="Where to decompress for checking (default: in memory, /dev/shm, when the "
        "copy fits there and leaves twice its size of memory available; else the backup's "
        "directory, else the system temp directory).",
        show_default=False,
    ),
]

IdentityOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--identity",
        "-i",
        metavar="FILE",
        help="An age identity file (age-keygen, backup keygen) or an unencrypted OpenSSH "
        "private key, to open encrypted backups; repeatable (default: the file "
        "TRIGGERFISH_BACKUP_IDENTITY_FILE names).",
        show_default=False,
    ),
]


def identities(paths: list[Path] | None) -> Identities | None:
    # lazy: backup.crypt adds 5 modules to `backup --help` (and `status --help`)
    from triggerfish_cli.backup.crypt import identities_from

    return identities_from(paths)


class Sse(str, enum.Enum):
    aes256 = "AES256"
    kms = "aws:kms"


SseOpt = Annotated[
    Sse | None,
    typer.Option(
        "--sse",
        help="S3 server-side encryption of the uploaded backup (default: backup: sse, "
        "else the storage: section's for a store in S3).",
        show_default=False,
    ),
]
SseKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--sse-kms-key-id",
        metavar="KEY",
        help="The KMS key of --sse aws:kms (implies it).",
        show_default=False,
    ),
]


def sse_of(
    st: AppState, sse: Sse | None = None, key_id: str | None = None
) -> tuple[str | None, str | None]:
    """S3 server-side encryption for a backup destination: --sse/--sse-kms-key-id, else
    ``backup: sse``, else the ``storage:`` section's when the store is in S3."""
    # lazy: backup.settings adds 2 modules to `backup --help`
    from triggerfish_cli.backup.settings import backup_settings

    if sse is not None or key_id is not None:
        if key_id is not None and sse is Sse.aes256:
            raise UsageError("--sse-kms-key-id goes with --sse aws:kms")
        return (sse.value if sse is not None else Sse.kms.value), key_id
    found = backup_settings(st.settings())
    if found.sse is not None:
        return found.sse, found.sse_kms_key_id
    if has_sse_settings(st.settings().storage_section()):
        options = st.storage_config().options
        return options.get("sse"), options.get("sse_kms_key_id")
    return None, None


def destination(
    spec: str | None,
    endpoint_url: str | None,
    *,
    create: bool = False,
    sse: tuple[str | None, str | None] = (None, None),
) -> Destination:
    """A backup directory or S3 prefix; None: the default directory. One named to read
    from (not ``create``) must exist (exit 3)."""
    # lazy: backup.destinations adds 17 modules to `backup --help`
    from triggerfish_cli.backup.destinations import open_destination

    return open_destination(
        spec, endpoint_url=endpoint_url, create=create, sse=sse, must_exist=not create
    )


def this_store(st: AppState) -> StoreRef:
    """The store the command is on, as backups name it; one that does not exist (or
    cannot be reached) is known by its place alone. Reads only."""
    # lazy: backup.stores adds 14 modules to `backup --help`
    from triggerfish_cli.backup.stores import ref_of, ref_of_missing
    from triggerfish_cli.errors import BackendUnavailableError, MissingStoreError

    config = st.storage_config()
    try:
        return ref_of(st.provider())
    except MissingStoreError:
        return ref_of_missing(config, exists=False)
    except BackendUnavailableError:
        return ref_of_missing(config, exists=None)


def of_store(entries: list[Entry], store: StoreRef | None) -> list[Entry]:
    """The entries of ``store`` (None: all); unreadable ones are in every list."""
    # lazy: backup.stores adds 14 modules to `backup --help`
    from triggerfish_cli.backup.stores import same_store

    if store is None:
        return entries
    return [e for e in entries if e.manifest is None or same_store(e.manifest, store)]


def by_store(entries: list[Entry]) -> list[Entry]:
    """``entries`` grouped by store (backup_stores.groups), each group oldest first;
    unreadable ones first."""
    # lazy: backup.stores adds 14 modules to `backup --help`
    from triggerfish_cli.backup.stores import groups

    readable = [entry for entry in entries if entry.manifest is not None]
    by_manifest = {id(entry.manifest): entry for entry in readable}
    grouped = groups(entry.manifest for entry in readable if entry.manifest is not None)
    ordered = sorted((entry for entry in entries if entry.manifest is None), key=lambda e: e.name)
    for manifests in sorted(grouped.values(), key=lambda ms: min(m.created for m in ms)):
        group = [by_manifest[id(manifest)] for manifest in manifests]
        ordered.extend(sorted(group, key=lambda entry: (entry.created, entry.name)))
    return ordered
