"""``backup create``: a consistent snapshot of a live store, compressed, with its manifest.

SQLite (``physical``): the pages of one WAL read snapshot of the live store,
read straight from its files (backup_snapshot: it never blocks the gateway's
writers; the online backup API into a scratch copy is the fallback), stream
through the compressor into the archive, hashed on the way, written under a
temp name, fsynced and renamed (mode 0600). Counts per namespace and
memories per level are read from the same snapshot, so they match it
exactly.

Any backend (``logical``): every key and value as JSON Lines in key order
(SQLite: one read transaction; Postgres: one REPEATABLE READ transaction:
both a consistent snapshot; S3 is listed page after page), compressed the
same way.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from triggerfish_cli import cells, namespaces
from triggerfish_cli.backup.archive import archive_name, sealed_outer, trailer_bytes
from triggerfish_cli.backup.crypt import Recipient
from triggerfish_cli.backup.dest import Destination, temp_dir
from triggerfish_cli.backup.manifest import COMPRESSIONS, Manifest, manifest_json
from triggerfish_cli.backup.streams import HashingWriter, ZstdFrames, compress_stream
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import TriggerfishError, UsageError
from triggerfish_cli.memory.keys import LEVELS_BY_NAME
from triggerfish_cli.memory.keys import PREFIX as MEMORY_PREFIX
from triggerfish_cli.progress import Reporter
from triggerfish_cli.serialization import now_iso
from triggerfish_cli.storage.provider import StorageProvider, uncovered_ranges
from triggerfish_cli.storage.sqlite.snapshot import stream_snapshot
from triggerfish_cli.storage.sqlite.sql import gap_clause, range_clause
from triggerfish_cli.threads import cpu_workers

if TYPE_CHECKING:
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage


@dataclass
class Counts:
    keys: int
    namespaces: dict[str, int]
    memories: dict[str, int]


def count_rows(conn: sqlite3.Connection) -> Counts:
    """Keys per namespace (unknown ones by first segment) and memory records per level.

    Reads only the key index: range counts for the known namespaces, one
    grouped query per gap between them, the memory keys for their levels.
    """
    found: dict[str, int] = {}
    for prefix in namespaces.PREFIXES:
        where, params = range_clause(prefix)
        count = int(conn.execute(f"SELECT count(*) FROM kv WHERE {where}", params).fetchone()[0])
        if count:
            found[prefix] = count
    for low, high in uncovered_ranges(namespaces.PREFIXES):
        where, params = gap_clause(low, high)
        if low is None:  # NULL keys sort first: in the first gap
            where = f"({where}) OR key IS NULL"
        # As namespaces.group_of: a group that is not UTF-8 text (a NULL or BLOB key) is "".
        rows = conn.execute(
            "SELECT CASE WHEN typeof(key) != 'text' THEN x'' WHEN instr(key, ':') > 0 "
            "THEN CAST(substr(key, 1, instr(key, ':')) AS BLOB) "
            f"ELSE x'' END AS grp, count(*) FROM kv WHERE {where} GROUP BY grp",
            params,
        ).fetchall()
        for raw, count in rows:
            try:
                group = bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                group = ""
            found[group] = found.get(group, 0) + int(count)
    return Counts(sum(found.values()), found, memory_levels(conn))


def memory_levels(conn: sqlite3.Connection) -> dict[str, int]:
    """Memory records per level: ``memory:<agent>:<LEVEL>:<key>`` (``memory.split_key``).

    One pass over the memory keys in the key index, read as bytes (one may
    not be UTF-8, cells.py): cheap however many agents there are (every
    cron or webhook run is an agent of its own, so a store may hold as many
    agents as memories).
    """
    levels: Counter[str] = Counter()
    names = {level.encode(): level for level in LEVELS_BY_NAME}
    plain: dict[bytes, bool] = {}
    end = MEMORY_PREFIX[:-1] + chr(ord(MEMORY_PREFIX[-1]) + 1)
    skip = len(MEMORY_PREFIX)
    # TEXT keys only, as the range counts of count_rows (a BLOB sorts after every TEXT)
    rows = conn.execute(
        "SELECT CAST(key AS BLOB) FROM kv WHERE key >= ? AND key < ?", (MEMORY_PREFIX, end)
    )
    for (raw,) in rows:
        agent, colon, rest = bytes(raw)[skip:].partition(b":")
        level, tail, _ = rest.partition(b":")
        name = names.get(level)
        if name is None or not (agent and colon and tail):
            continue
        known = plain.get(agent)
        if known is None:  # an agent not UTF-8: no memory (memory_level)
            known = plain[agent] = _utf8(agent)
        if known:
            levels[name] += 1
    return {level: count for level, count in levels.items() if count}


def memory_level(key: str) -> str | None:
    """The level of ``memory:<agent>:<LEVEL>:<key>`` (as ``memory.split_key`` reads it).

    None too when the agent is not UTF-8 text (cells.py), as :func:`memory_levels` counts.
    """
    parts = key.split(":", 3)
    if len(parts) == 4 and parts[0] == "memory" and parts[1] and parts[2] in LEVELS_BY_NAME:
        return parts[2] if parts[1].isascii() or cells.is_plain(parts[1]) else None
    return None


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class KeyCounter:
    """The same counts as :func:`count_rows`, one key at a time (logical backups)."""

    def __init__(self) -> None:
        self.groups: Counter[str] = Counter()
        self.levels: Counter[str] = Counter()
        self.keys = 0

    def add(self, key: str) -> None:
        self.keys += 1
        self.groups[namespaces.group_of(key)] += 1
        if key.startswith(MEMORY_PREFIX):
            level = memory_level(key)
            if level is not None:
                self.levels[level] += 1

    def counts(self) -> Counts:
        return Counts(self.keys, dict(self.groups), dict(self.levels))


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
    import time

    from triggerfish_cli.backup.big_buffers import reuse_big_buffers
    from triggerfish_cli.backup.direct_file import open_archive
    from triggerfish_cli.backup.stores import hostname, location
    from triggerfish_cli.progress import SILENT, counted

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
    notes: list[str] = []
    warnings: list[str] = []
    store_id = _identity(provider, notes) if record else _read_identity(provider)
    created = now_iso()
    recipients = recipients or []
    sealed = bool(recipients)
    name = archive_name(created, kind, compression, encrypted=sealed)
    serial = 0
    while dest.exists(name):
        serial += 1
        name = archive_name(created, kind, compression, serial, encrypted=sealed)
    manifest = Manifest(
        kind=kind,
        created=created,
        source=location(provider),
        backend=provider.backend,
        compression=compression,
        label=label,
        sqlite_version=sqlite3.sqlite_version if provider.backend == "sqlite" else None,
        store_id=store_id,
        host=hostname(),
        max_taint=max_taint.name if max_taint is not None else None,
    )
    options: dict[str, Any] = {"level": level, "threads": threads}
    if kind == "physical":
        path = provider.database_file()
        assert path is not None
        progress.phase("snapshot", _store_bytes(path), unit="bytes")
        watched = progress

        def through(
            consume: Callable[[Iterator[bytes | memoryview]], HashingWriter],
        ) -> Callable[[Iterator[bytes | memoryview]], HashingWriter]:
            return lambda chunks: consume(counted(chunks, watched))

        payload = _Payload(recipients)
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

                # database_file(): a SQLite store, snapshotted by SQLite's backup API
                store = cast("SqliteStorage", provider)
                sink = _physical(store, scratch / "snapshot.db", manifest, through(compress))
            _finish_payload(sink, manifest)
            with staged.open("ab") as tail:
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
            from triggerfish_cli.backup.partial import Ceiling

            ceiling = Ceiling(max_taint)
            rows = (row for row in rows if ceiling.admits(*row))
        chunks = _json_lines(rows, counter, advance, warnings)
        payload = _Payload(recipients)
        with dest.writer(name) as handle:
            with payload.into(handle) as sink:
                done = compress_stream(chunks, sink, compression, **options)
            manifest.content_bytes, manifest.frames = done.read, done.frames
            _set_counts(manifest, counter.counts())
            _finish_payload(sink, manifest)
            _trailer(handle, manifest, payload)
    result = Created(
        name,
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
    from triggerfish_cli.storage.identity import ensure_id

    try:
        return ensure_id(provider)
    except TriggerfishError as exc:
        notes.append(f"the store's id could not be recorded ({exc.message})")
        return _read_identity(provider)


def _read_identity(provider: StorageProvider) -> str | None:
    from triggerfish_cli.storage.identity import read_id

    return read_id(provider)


def _audit(provider: StorageProvider, done: Created, notes: list[str]) -> str | None:
    """The backup's audit record in the store (best effort: the backup is made)."""
    from triggerfish_cli import audit

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


def _store_bytes(path: Path) -> int | None:
    """About what a snapshot of the file reads: the database and its WAL."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    wal = Path(f"{path}-wal")
    return size + (wal.stat().st_size if wal.exists() else 0)


def _set_counts(manifest: Manifest, counts: Counts) -> None:
    manifest.keys, manifest.namespaces, manifest.memories = (
        counts.keys,
        counts.namespaces,
        counts.memories,
    )


def _finish_payload(sink: HashingWriter, manifest: Manifest) -> None:
    manifest.payload_bytes = sink.count
    manifest.payload_sha256 = sink.sha.hexdigest()


class _Payload:
    """Where the compressed payload goes: straight into the archive, or through age."""

    def __init__(self, recipients: list[Recipient]) -> None:
        self.recipients = recipients
        #: Encrypted: hashes and counts the encrypted bytes (the outer manifest's).
        self.outer: HashingWriter | None = None

    @contextlib.contextmanager
    def into(self, out: Any) -> Iterator[HashingWriter]:
        """A sink for the payload (hashing the plaintext); encrypted once the block ends."""
        if not self.recipients:
            self.outer = None
            yield HashingWriter(out)
            return
        from triggerfish_cli.backup.crypt import Encryptor

        self.outer = HashingWriter(out)
        encryptor = Encryptor(self.outer, self.recipients)
        try:
            yield HashingWriter(encryptor)
        except BaseException:
            encryptor.abort()
            raise
        encryptor.close()

    def trailer(self, manifest: Manifest) -> bytes:
        if self.outer is None:
            return trailer_bytes(manifest)
        from triggerfish_cli.backup.crypt import seal

        sealed = seal(manifest_json(manifest), self.recipients)
        fingerprints = [recipient.fingerprint for recipient in self.recipients]
        outer = sealed_outer(manifest, self.outer, sealed, fingerprints)
        manifest.recipients, manifest.outer = fingerprints, outer
        return sealed + trailer_bytes(outer)


def _trailer(handle: Any, manifest: Manifest, payload: _Payload) -> None:
    """The manifest trailer, last: an archive without it is no backup (the kill -9
    tests pause here, with the archive half written)."""
    handle.write(payload.trailer(manifest))


def _physical(
    provider: SqliteStorage,
    scratch: Path,
    manifest: Manifest,
    consume: Callable[[Iterator[bytes | memoryview]], HashingWriter],
) -> HashingWriter:
    """Stream a snapshot of the store through ``consume``; count its keys meanwhile.

    The counts are read from the same snapshot (backup_snapshot), so they
    match the archive exactly. ``scratch``: where a fallback copy may go.
    """
    # the counts read the key index through the page cache: through the map,
    # every page near an index page would stay in our resident set
    with provider.unmapped():
        sink, snapshot = stream_snapshot(
            provider, scratch, consume, inspect=count_rows, chunk=ZstdFrames.FRAME
        )
    manifest.page_size, manifest.page_count = snapshot.page_size, snapshot.page_count
    _set_counts(manifest, snapshot.inspected)
    return sink


def _json_lines(
    rows: Iterable[tuple[str, str]],
    counter: KeyCounter,
    on_progress: Callable[[int], None] | None,
    notes: list[str] | None = None,
) -> Iterator[bytes]:
    """The logical payload: ``{"key", "value"}`` lines, ASCII; a cell that is not UTF-8
    text in its JSON form (cells.py, ``{"$bytes": <base64>, "type": ...}``), named in ``notes``."""
    import json

    from triggerfish_cli import cells

    encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
    buffer: list[str] = []
    size = 0
    for key, value in rows:
        counter.add(key)
        if cells.is_plain(key) and cells.is_plain(value):
            line = encode({"key": key, "value": value})
        else:
            if notes is not None:
                notes.append(cells.note(key, value, "backed up"))
            line = encode({"key": cells.to_json(key), "value": cells.to_json(value)})
        buffer.append(line)
        size += len(line)
        if size >= 1 << 20:
            yield ("\n".join(buffer) + "\n").encode("ascii")
            if on_progress is not None:
                on_progress(len(buffer))
            buffer, size = [], 0
    if buffer:
        yield ("\n".join(buffer) + "\n").encode("ascii")
        if on_progress is not None:
            on_progress(len(buffer))
