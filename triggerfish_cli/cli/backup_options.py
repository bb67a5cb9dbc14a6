"""Options and archive selection shared by the `backup` commands."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from triggerfish_cli.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from triggerfish_cli.backup_dest import Destination


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
        help="Where the backups are (default: <base>/backups/store/).",
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
LatestOpt = Annotated[bool, typer.Option("--latest", help="The newest backup in --from.")]
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


def destination(spec: str | None, endpoint_url: str | None, *, create: bool = False) -> Destination:
    """A backup directory or S3 prefix; None: the default directory."""
    from triggerfish_cli.backup_dest import open_destination

    return open_destination(spec, endpoint_url=endpoint_url, create=create)


def pick(
    file: str | None, latest: bool, source: str | None, endpoint_url: str | None
) -> tuple[Destination, str]:
    """The destination and archive name a FILE or --latest designates."""
    from triggerfish_cli.backup_dest import LocalDestination

    if file and latest:
        raise UsageError("give a FILE or --latest, not both")
    if file:
        path = Path(file).expanduser()
        if source is None and ("/" in file or path.exists()):
            if not path.is_file():
                raise NotFoundError(f"{file}: no such backup file")
            return LocalDestination(path.parent), path.name
        return destination(source, endpoint_url), file
    if not latest:
        raise UsageError("which backup? give a FILE or --latest")
    dest = destination(source, endpoint_url)
    entries = [entry for entry in dest.entries() if entry.manifest is not None]
    if not entries:
        raise NotFoundError(f"{dest.describe()}: no backups")
    newest = max(entries, key=lambda entry: (entry.created, entry.name))
    return dest, newest.name
