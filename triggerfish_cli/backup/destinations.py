"""``--to``/``--from``: the destination of backups a command names, local or S3."""

from __future__ import annotations

from pathlib import Path

from triggerfish_cli.backup.dest import Destination, LocalDestination
from triggerfish_cli.errors import NotFoundError, UsageError
from triggerfish_cli.paths import store_backups_dir
from triggerfish_cli.storage.backends import s3_destination
from triggerfish_cli.storage.factory import missing_extra


def open_destination(
    spec: str | Path | None,
    *,
    endpoint_url: str | None = None,
    create: bool = False,
    sse: tuple[str | None, str | None] = (None, None),
    must_exist: bool = False,
) -> Destination:
    """``--to``/``--from``: a directory, or ``s3://bucket/prefix``; None: the default.

    ``sse``: S3 server-side encryption (mode, KMS key id) of what is written there.
    ``must_exist``: a named directory (or bucket) that does not exist is not found
    (exit 3), as restic and borg say of a missing repository: a typo in a cron
    job's --from is an error, not "no backups"."""
    if spec is None:
        return LocalDestination(store_backups_dir(), create=create)
    text = str(spec)
    if text.lower().startswith("s3://"):
        try:
            return s3_destination(text, endpoint_url=endpoint_url, sse=sse, reading=must_exist)
        except ModuleNotFoundError as exc:
            error = missing_extra(exc)
            if error is None:
                raise
            raise error from None
    if "://" in text:
        raise UsageError(f"{text}: a backup destination is a directory or s3://bucket/prefix")
    if endpoint_url is not None:
        raise UsageError("--endpoint-url only applies to s3:// destinations")
    destination = LocalDestination(Path(text).expanduser(), create=create)
    if must_exist and not destination.directory.is_dir():
        raise NotFoundError(f"{text}: no such directory of backups")
    return destination
