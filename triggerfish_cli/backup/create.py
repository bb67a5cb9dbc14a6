"""``backup create``: a consistent snapshot of a live store, compressed, with its manifest.

SQLite (``physical``): the pages of one WAL read snapshot of the live store,
read straight from its files (the backend's snapshot source, reached through
storage/backends.py: it never blocks the gateway's writers), stream through
the compressor into the archive, hashed on the way, written under a temp
name, fsynced and renamed (mode 0600). Counts per namespace and memories per
level are read from the same snapshot, so they match it exactly.

The archive's name (its creation time) is claimed when it is published, never
replaced: of two runs that pick the same name, the later one takes the next
serial (``dest.NewName``).

Any backend (``logical``): every key and value as JSON Lines in key order
(SQLite: one read transaction; Postgres: one REPEATABLE READ transaction:
both a consistent snapshot; S3 is listed page after page), compressed the
same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli import audit
from triggerfish_cli.backup.archive import archive_name
from triggerfish_cli.backup.big_buffers import reuse_big_buffers
from triggerfish_cli.backup.counts import Counts, KeyCounter, SnapshotSource
from triggerfish_cli.backup.crypt import Recipient
from triggerfish_cli.backup.dest import Destination, NewName, temp_dir
from triggerfish_cli.backup.direct_file import open_archive
from triggerfish_cli.backup.manifest import COMPRESSIONS, Manifest
from triggerfish_cli.backup.partial import Ceiling
from triggerfish_cli.backup.payload import Payload, finish_payload, json_lines
from triggerfish_cli.backup.stores import hostname, location
from triggerfish_cli.backup.streams import HashingWriter, ZstdFrames, compress_stream
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import TriggerfishError, UsageError
from triggerfish_cli.fileio import nofollow
from triggerfish_cli.progress import SILENT, Reporter, counted
from triggerfish_cli.serialization import now_iso
from triggerfish_cli.storage.backends import snapshot_source
from triggerfish_cli.storage.identity import ensure_id, read_id
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.threads import cpu_workers


@dataclass
class Created:
    name: str
    destination: str
    manifest: Manifest
    seconds: float
    #: The audit record of the backup in the store (None: the store could not be written).
    audit_key: str | None = None
    notes: list[str] = field(default_factory=list)
    #: A partial backup: its level and what was left out (backup_partial.Ceiling.as_dict).
    partial: dict[str, Any] | None = None
    #: Rows holding a cell that is not UTF-8 text (cells.py), named (a logical backup).
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "destination": self.destination,
            "seconds": round(self.seconds, 3),
            "manifest": self.manifest.as_dict(),
            "audit_key": self.audit_key,
            "notes": self.notes,
            **({"partial": self.partial} if self.partial is not None else {}),
            "warnings": self.warnings,
        }


def choose_kind(provider: StorageProvider, logical: bool) -> str:
    if logical:
        return "logical"
    return "physical" if provider.database_file() is not None else "logical"


def create_backup(
    provider: StorageProvider,
    dest: Destination,
    *,
    logical: bool = False,
    compression: str = "zstd",
    level: int | None = None,
    threads: int | None = None,
    label: str | None = None,
    on_progress: Callable[[int], None] | None = None,
    progress: Reporter | None = None,
    record: bool = True,
    recipients: list[Recipient] | None = None,
    max_taint: Level | None = None,
) -> Created:
    """Back ``provider`` up into ``dest``; ``progress`` is told the phase and how far it got
    (bytes of the snapshot for a physical backup, keys for a logical one).

    With ``record`` (the default) the store's identity is recorded first
    when it has none (so the manifest names it), and an audit record of the
    backup is written afterwards (``status`` shows the last one); a store
    that cannot be written (read-only, or the write gate refuses) is backed
    up all the same, with a note saying what was not recorded.

    ``recipients``: the archive is encrypted to them (age; see backup_archive
    for the layout, backup_crypt for the stream).

    ``max_taint`` (logical backups only): a partial backup without the rows
    classified above that level (backup/partial.py); the manifest says so.
    """
    progress = progress or SILENT

    if compression not in COMPRESSIONS:
        raise UsageError(f"unknown compression {compression!r}: zstd, gzip or none")
    if level is not None and compression == "gzip" and not 0 <= level <= 9:
        raise UsageError(f"--level {level}: gzip levels are 0 to 9")
    if threads is None:
        threads = cpu_workers()
    if max_taint is not None and not logical:
        raise UsageError(
            "--max-taint needs --logical: a physical backup is a copy of the whole file"
        )
    started = time.perf_counter()
    reuse_big_buffers()  # the payload streams in 8 MiB chunks (backup/big_buffers.py)
    kind = choose_kind(provider, logical)
    source = snapshot_source(provider)
    notes: list[str] = []
    warnings: list[str] = []
    store_id = _identity(provider, notes) if record else _read_identity(provider)
    created = now_iso()
    recipients = recipients or []
    sealed = bool(recipients)
    name = NewName(lambda n: archive_name(created, kind, compression, n, encrypted=sealed))
    while dest.exists(name.name):  # names taken already; the claim itself is at publishing
        name.serial += 1
    manifest = Manifest(
        kind=kind,
        created=created,
        source=location(provider),
        backend=provider.backend,
        compression=compression,
        label=label,
        sqlite_version=source.sqlite_version if source is not None else None,
        store_id=store_id,
        host=hostname(),
        max_taint=max_taint.name if max_taint is not None else None,
    )
    options: dict[str, Any] = {"level": level, "threads": threads}
    if kind == "physical":
        # database_file(): a SQLite store, snapshotted by its backend
        assert source is not None
        progress.phase("snapshot", source.size(), unit="bytes")
        watched = progress

        def through(
            consume: Callable[[Iterator[bytes | memoryview]], HashingWriter],
        ) -> Callable[[Iterator[bytes | memoryview]], HashingWriter]:
            return lambda chunks: consume(counted(chunks, watched))

        payload = Payload(recipients)
        with dest.staging(name) as staged:
            with (
                temp_dir(dest.scratch_dir(), "snapshot") as scratch,
                open_archive(staged) as out,
            ):

                def compress(chunks: Iterator[bytes | memoryview]) -> HashingWriter:
                    out.seek(0)  # a second call (a fallback copy) starts afresh
                    out.truncate()
                    with payload.into(out) as sink:
                        done = compress_stream(chunks, sink, compression, stable=True, **options)
                    manifest.content_bytes, manifest.frames = done.read, done.frames
                    return sink

                sink = _physical(source, scratch / "snapshot.db", manifest, through(compress))
            finish_payload(sink, manifest)
            with open(staged, "ab", opener=nofollow) as tail:
                _trailer(tail, manifest, payload)
    else:
        counter = KeyCounter()
        progress.phase("backing up", provider.count(), unit="keys")
        reported = progress

        def advance(count: int) -> None:
            reported.advance(count)
            if on_progress is not None:
                on_progress(count)

        rows: Iterable[tuple[str, str]] = provider.snapshot_scan(batch_size=5000)
        if max_taint is not None:
            ceiling = Ceiling(max_taint)
            rows = (row for row in rows if ceiling.admits(*row))
        chunks = json_lines(rows, counter, advance, warnings)
        payload = Payload(recipients)
        with dest.writer(name) as handle:
            with payload.into(handle) as sink:
                done = compress_stream(chunks, sink, compression, **options)
            manifest.content_bytes, manifest.frames = done.read, done.frames
            _set_counts(manifest, counter.counts())
            if max_taint is not None:
                manifest.left_out = dict(ceiling.left_out)
            finish_payload(sink, manifest)
            _trailer(handle, manifest, payload)
    result = Created(
        name.name,
        dest.describe(),
        manifest,
        time.perf_counter() - started,
        notes=notes,
        warnings=warnings,
    )
    if max_taint is not None:
        result.partial = ceiling.as_dict()
    if record:
        result.audit_key = _audit(provider, result, notes)
    return result


def _identity(provider: StorageProvider, notes: list[str]) -> str | None:
    """The store's id, recorded now when it has none; None (and a note) when it cannot be."""
    try:
        return ensure_id(provider)
    except TriggerfishError as exc:
        notes.append(f"the store's id could not be recorded ({exc.message})")
        return _read_identity(provider)


def _read_identity(provider: StorageProvider) -> str | None:
    return read_id(provider)


def _audit(provider: StorageProvider, done: Created, notes: list[str]) -> str | None:
    """The backup's audit record in the store (best effort: the backup is made)."""
    manifest = done.manifest
    try:
        return audit.record(
            provider,
            "backup_create",
            target=f"{done.destination.rstrip('/')}/{done.name}",
            counts={"keys": manifest.keys},
            details={
                "name": done.name,
                "destination": done.destination,
                "kind": manifest.kind,
                "created": manifest.created,
                "label": manifest.label,
                "payload_sha256": manifest.archive_sha256,
                "encrypted": manifest.encrypted,
                **({"partial": done.partial} if done.partial is not None else {}),
            },
        )
    except TriggerfishError as exc:
        notes.append(f"no audit record of this backup in the store ({exc.message})")
        return None


def _set_counts(manifest: Manifest, counts: Counts) -> None:
    manifest.keys, manifest.namespaces, manifest.memories = (
        counts.keys,
        counts.namespaces,
        counts.memories,
    )


def _trailer(handle: Any, manifest: Manifest, payload: Payload) -> None:
    """The manifest trailer, last: an archive without it is no backup (the kill -9
    tests pause here, with the archive half written)."""
    handle.write(payload.trailer(manifest))


def _physical(
    source: SnapshotSource,
    scratch: Path,
    manifest: Manifest,
    consume: Callable[[Iterator[bytes | memoryview]], HashingWriter],
) -> HashingWriter:
    """Stream a snapshot of the store through ``consume``; count its keys meanwhile.

    The counts are read from the same snapshot (the backend's snapshot source), so
    they match the archive exactly. ``scratch``: where a fallback copy may go.
    """
    sink, snapshot = source.stream(scratch, consume, chunk=ZstdFrames.FRAME)
    manifest.page_size, manifest.page_count = snapshot.page_size, snapshot.page_count
    _set_counts(manifest, snapshot.counts)
    return sink
