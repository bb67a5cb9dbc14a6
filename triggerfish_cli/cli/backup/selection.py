"""Which backup a command means: a FILE, or --latest of a store in a destination."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from triggerfish_cli.cli.backup.options import destination, of_store
from triggerfish_cli.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from triggerfish_cli.backup.dest import Destination, Entry
    from triggerfish_cli.backup.stores import StoreRef


def none_of(
    store: StoreRef, dest: Destination, entries: list[Entry], why: str | None = None
) -> NotFoundError:
    """No backups of ``store`` in ``dest`` (exit 3); ``why``: why that store's were looked for."""
    others = len([e for e in entries if e.manifest is not None])
    hints = [why] if why else []
    if others:
        hints.append(f"{others} backup(s) of other stores there: `backup list --all-stores`")
    return NotFoundError(
        f"{dest.describe()}: no backups of {store.describe()}", hint="; ".join(hints) or None
    )


def pick(
    file: str | None,
    latest: bool,
    source: str | None,
    endpoint_url: str | None,
    store: StoreRef | None = None,
    sse: tuple[str | None, str | None] = (None, None),
    why: str | None = None,
) -> tuple[Destination, str]:
    """The destination and archive name a FILE or --latest (of ``store``: ``why`` says why
    that store's, in the error when it has none) designates."""
    # lazy: backup.dest adds 16 modules to `backup --help`
    from triggerfish_cli.backup.dest import LocalDestination

    if file and latest:
        raise UsageError("give a FILE or --latest, not both")
    if file:
        path = Path(file).expanduser()
        if source is None and ("/" in file or path.exists()):
            if not path.is_file():
                raise NotFoundError(f"{file}: no such backup file")
            return LocalDestination(path.parent), path.name
        return destination(source, endpoint_url, sse=sse), file
    if not latest:
        raise UsageError("which backup? give a FILE or --latest")
    dest = destination(source, endpoint_url, sse=sse)
    listed = dest.entries()
    entries = [entry for entry in of_store(listed, store) if entry.manifest is not None]
    if not entries:
        if store is not None:
            raise none_of(store, dest, listed, why)
        raise NotFoundError(f"{dest.describe()}: no backups")
    newest = max(entries, key=lambda entry: (entry.created, entry.name))
    return dest, newest.name
