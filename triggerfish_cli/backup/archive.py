"""The backup archive: one self-contained file, its manifest inside.

Layout of ``triggerfish-<UTC time>.<kind>.<compression>``::

    payload            the compressed stream (zstd, gzip) or the raw bytes (none)
    [zstd only]        8-byte header of a zstd *skippable frame* around what follows,
                       so that plain ``zstd -d`` decompresses the archive as it is
    manifest           UTF-8 JSON (see :class:`Manifest`)
    length             the manifest's length in bytes, 8 bytes little-endian
    magic              ``TFBKMAN1``

The payload is a SQLite database (``kind: physical``) or JSON Lines, one
``{"key": ..., "value": ...}`` per key in key order (``kind: logical``, the
format of ``kv export``). The manifest is written last, so it can hold the
payload's sha256 and size computed while the payload streamed out; it is
read from the end of the file without reading the payload.

An encrypted archive (``...<ext>.age``, format version 2) is laid out the
same way with two encrypted parts before its trailer::

    payload            the compressed stream, age-encrypted (one age stream)
    sealed manifest    the version-1 manifest above, age-encrypted on its own
    manifest           the outer manifest: only what list, prune and a keyless
                       verify need (format, time, store id, kind, compression,
                       the recipients' fingerprints, the size and sha256 of
                       both encrypted parts); no counts, no names, no paths
    length, magic      as above

The sealed manifest's ``payload_*`` fields are those of the compressed
stream inside the encryption; the outer ones, of the encrypted bytes.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from triggerfish_cli import __version__
from triggerfish_cli.errors import InvalidDataError, VerificationError
from triggerfish_cli.threads import block_signals, cpu_workers

FORMAT = "triggerfish-backup"
FORMAT_VERSION = 1
#: The outer manifest of an encrypted archive.
SEALED_FORMAT_VERSION = 2
ENCRYPTED_EXTENSION = ".age"
MAGIC = b"TFBKMAN1"
TRAILER = struct.Struct("<Q8s")
ZSTD_SKIPPABLE = struct.Struct("<II")
ZSTD_SKIPPABLE_MAGIC = 0x184D2A5E
MAX_MANIFEST = 16 << 20
CHUNK = 1 << 20

COMPRESSIONS = ("zstd", "gzip", "none")
KINDS = ("physical", "logical")
EXTENSIONS = {"zstd": ".zst", "gzip": ".gz", "none": ""}
KIND_EXTENSIONS = {"physical": ".db", "logical": ".jsonl"}
#: ``triggerfish-2026-11-30T01-22-33.123Z[-N].db.zst`` and the like.
NAME_RE = re.compile(
    r"^triggerfish-(?P<time>\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z)(?:-\d+)?"
    r"(?P<kind>\.db|\.jsonl)(?P<comp>\.zst|\.gz)?(?P<enc>\.age)?$"
)
DEFAULT_ZSTD_LEVEL = 1
DEFAULT_GZIP_LEVEL = 6


def archive_name(
    created: str, kind: str, compression: str, serial: int = 0, *, encrypted: bool = False
) -> str:
    """The file name of a backup created at ``created`` (the ISO ...Z form)."""
    stamp = created.replace(":", "-")
    suffix = f"-{serial}" if serial else ""
    sealed = ENCRYPTED_EXTENSION if encrypted else ""
    return f"triggerfish-{stamp}{suffix}{KIND_EXTENSIONS[kind]}{EXTENSIONS[compression]}{sealed}"


def is_archive_name(name: str) -> bool:
    return NAME_RE.match(name) is not None


@dataclass
class Manifest:
    """What a backup holds and how to check it."""

    kind: str
    created: str
    source: str
    backend: str
    compression: str
    label: str | None = None
    sqlite_version: str | None = None
    page_size: int | None = None
    page_count: int | None = None
    content_bytes: int = 0
    payload_bytes: int = 0
    payload_sha256: str = ""
    keys: int = 0
    namespaces: dict[str, int] = field(default_factory=dict)
    memories: dict[str, int] = field(default_factory=dict)
    #: zstd: the compressed size of each frame of the payload, in order (they
    #: decompress in parallel); None: one stream, read from the start.
    frames: list[int] | None = None
    #: The source store's id (storage/identity.py); None: it had none.
    store_id: str | None = None
    #: The host the backup was made on (a SQLite path means something on it alone).
    host: str | None = None
    #: A partial backup (``--max-taint``): rows classified above this level were left
    #: out (backup/partial.py); None: every row is in it.
    max_taint: str | None = None
    tool_version: str = __version__
    format_version: int = FORMAT_VERSION
    #: Encrypted archives: the recipients' fingerprints (backup_crypt.fingerprint).
    recipients: list[str] | None = None
    #: The outer manifest only (an encrypted archive not opened): its contents,
    #: counts, source, label are unknown; ``payload_*`` are of the encrypted bytes.
    sealed: bool = False
    #: The outer manifest only: size and sha256 of the encrypted manifest.
    sealed_bytes: int = 0
    sealed_sha256: str = ""
    #: An opened encrypted archive: its outer manifest.
    outer: Manifest | None = field(default=None, repr=False, compare=False)

    @property
    def encrypted(self) -> bool:
        return self.recipients is not None

    @property
    def archive_sha256(self) -> str:
        """The sha256 that names this very archive (of the encrypted bytes when encrypted)."""
        return (self.outer or self).payload_sha256

    def outer_dict(self) -> dict[str, Any]:
        """The outer manifest of an encrypted archive: nothing of its contents."""
        return {
            "format": FORMAT,
            "format_version": SEALED_FORMAT_VERSION,
            "tool_version": self.tool_version,
            "encrypted": True,
            "kind": self.kind,
            "created": self.created,
            "store_id": self.store_id,
            "compression": self.compression,
            "recipients": list(self.recipients or []),
            "payload_bytes": self.payload_bytes,
            "payload_sha256": self.payload_sha256,
            "manifest_bytes": self.sealed_bytes,
            "manifest_sha256": self.sealed_sha256,
        }

    def as_dict(self) -> dict[str, Any]:
        if self.sealed:
            return self.outer_dict()
        extra: dict[str, Any] = {}
        if self.outer is not None:
            extra = {"encrypted": True, "recipients": list(self.recipients or [])}
        return {
            "format": FORMAT,
            "format_version": self.format_version,
            "tool_version": self.tool_version,
            "kind": self.kind,
            "created": self.created,
            "label": self.label,
            "source": self.source,
            "backend": self.backend,
            "store_id": self.store_id,
            "host": self.host,
            "compression": self.compression,
            "sqlite_version": self.sqlite_version,
            "page_size": self.page_size,
            "page_count": self.page_count,
            "content_bytes": self.content_bytes,
            "payload_bytes": self.payload_bytes,
            "payload_sha256": self.payload_sha256,
            "keys": self.keys,
            "namespaces": dict(sorted(self.namespaces.items())),
            "memories": dict(sorted(self.memories.items())),
            **({"frames": self.frames} if self.frames is not None else {}),
            **extra,
            **({"partial": True, "max_taint": self.max_taint} if self.max_taint else {}),
        }

    @property
    def partial(self) -> bool:
        return self.max_taint is not None

    @classmethod
    def from_dict(cls, data: Any, origin: str) -> Manifest:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InvalidDataError(f"{origin}: not a triggerfish-admin backup manifest")
        version = data.get("format_version")
        if version == SEALED_FORMAT_VERSION and data.get("encrypted") is True:
            return cls._outer(data, origin)
        if version != FORMAT_VERSION:
            raise InvalidDataError(
                f"{origin}: backup format version {version!r} is not supported "
                f"(this tool reads version {FORMAT_VERSION})",
                hint="use the triggerfish-admin version that wrote it",
            )

        def need(name: str, kind: type | tuple[type, ...]) -> Any:
            value = data.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise InvalidDataError(f"{origin}: manifest field {name!r} is missing or invalid")
            return value

        counts: dict[str, dict[str, int]] = {}
        for name in ("namespaces", "memories"):
            table = need(name, dict)
            if not all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in table.items()):
                raise InvalidDataError(f"{origin}: manifest field {name!r} is invalid")
            counts[name] = table
        kind = need("kind", str)
        compression = need("compression", str)
        if kind not in KINDS or compression not in COMPRESSIONS:
            raise InvalidDataError(f"{origin}: manifest names an unknown kind or compression")
        sha = need("payload_sha256", str)
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise InvalidDataError(f"{origin}: manifest field 'payload_sha256' is invalid")
        optional_int = (int, type(None))
        frames = data.get("frames")
        if frames is not None and (
            compression != "zstd"
            or not isinstance(frames, list)
            or not all(type(size) is int and size > 0 for size in frames)
            or sum(frames) != data.get("payload_bytes")
        ):
            raise InvalidDataError(f"{origin}: manifest field 'frames' is invalid")
        return cls(
            kind=kind,
            created=need("created", str),
            source=need("source", str),
            backend=need("backend", str),
            compression=compression,
            label=data.get("label") if isinstance(data.get("label"), str) else None,
            sqlite_version=data.get("sqlite_version"),
            page_size=need("page_size", optional_int),
            page_count=need("page_count", optional_int),
            content_bytes=need("content_bytes", int),
            payload_bytes=need("payload_bytes", int),
            payload_sha256=sha,
            keys=need("keys", int),
            namespaces=counts["namespaces"],
            memories=counts["memories"],
            frames=frames,
            store_id=_optional_text(data, "store_id", origin),
            host=_optional_text(data, "host", origin),
            max_taint=_max_taint(data, origin),
            tool_version=str(data.get("tool_version", "")),
            format_version=version,
        )

    @classmethod
    def _outer(cls, data: dict[str, Any], origin: str) -> Manifest:
        def need(name: str, kind: type) -> Any:
            value = data.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise InvalidDataError(f"{origin}: manifest field {name!r} is missing or invalid")
            return value

        kind, compression = need("kind", str), need("compression", str)
        if kind not in KINDS or compression not in COMPRESSIONS:
            raise InvalidDataError(f"{origin}: manifest names an unknown kind or compression")
        for name in ("payload_sha256", "manifest_sha256"):
            if not re.fullmatch(r"[0-9a-f]{64}", need(name, str)):
                raise InvalidDataError(f"{origin}: manifest field {name!r} is invalid")
        recipients = need("recipients", list)
        if not recipients or not all(isinstance(r, str) and r for r in recipients):
            raise InvalidDataError(f"{origin}: manifest field 'recipients' is invalid")
        sizes = [need(name, int) for name in ("payload_bytes", "manifest_bytes")]
        if min(sizes) <= 0:
            raise InvalidDataError(f"{origin}: the manifest's sizes are invalid")
        return cls(
            kind=kind,
            created=need("created", str),
            source="",
            backend="",
            compression=compression,
            payload_bytes=sizes[0],
            payload_sha256=data["payload_sha256"],
            store_id=_optional_text(data, "store_id", origin),
            tool_version=str(data.get("tool_version", "")),
            format_version=SEALED_FORMAT_VERSION,
            recipients=recipients,
            sealed=True,
            sealed_bytes=sizes[1],
            sealed_sha256=data["manifest_sha256"],
        )

    def opened(self, inner: Manifest) -> Manifest:
        """The sealed manifest ``inner`` of this outer one, as the archive's manifest."""
        if (inner.kind, inner.created, inner.compression, inner.store_id) != (
            self.kind,
            self.created,
            self.compression,
            self.store_id,
        ):
            raise InvalidDataError(
                "the sealed manifest does not match the outer one (kind, time, store)"
            )
        inner.recipients = self.recipients
        inner.outer = self
        return inner


def _max_taint(data: dict[str, Any], origin: str) -> str | None:
    value = _optional_text(data, "max_taint", origin)
    levels = ("PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED")
    if (value is not None and value not in levels) or bool(data.get("partial")) != bool(value):
        raise InvalidDataError(f"{origin}: manifest fields 'partial'/'max_taint' are invalid")
    return value


def _optional_text(data: dict[str, Any], name: str, origin: str) -> str | None:
    """A field older backups do not have: absent or null is None."""
    value = data.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidDataError(f"{origin}: manifest field {name!r} is invalid")
    return value


def manifest_json(manifest: Manifest) -> bytes:
    return json.dumps(manifest.as_dict(), ensure_ascii=False, indent=1).encode("utf-8")


def trailer_bytes(manifest: Manifest) -> bytes:
    """The trailer of ``manifest`` (the outer one when it is sealed)."""
    body = manifest_json(manifest)
    tail = body + TRAILER.pack(len(body), MAGIC)
    if manifest.compression == "zstd" and not manifest.sealed:
        return ZSTD_SKIPPABLE.pack(ZSTD_SKIPPABLE_MAGIC, len(tail)) + tail
    return tail


def read_manifest_tail(size: int, read_range: Callable[[int, int], bytes], origin: str) -> Manifest:
    """The manifest of an archive of ``size`` bytes, read by ``read_range(offset, length)``."""
    if size < TRAILER.size:
        raise InvalidDataError(f"{origin}: not a triggerfish-admin backup (too short)")
    length, magic = TRAILER.unpack(read_range(size - TRAILER.size, TRAILER.size))
    if magic != MAGIC:
        raise InvalidDataError(
            f"{origin}: not a triggerfish-admin backup (no manifest at its end: "
            "truncated, or some other file)"
        )
    if length > MAX_MANIFEST or length > size - TRAILER.size:
        raise InvalidDataError(f"{origin}: manifest length {length} is invalid")
    body = read_range(size - TRAILER.size - length, length)
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidDataError(f"{origin}: the manifest is not valid JSON ({exc})") from None
    manifest = Manifest.from_dict(data, origin)
    framing = ZSTD_SKIPPABLE.size if manifest.compression == "zstd" else 0
    if manifest.sealed:
        framing = manifest.sealed_bytes
    payload = size - TRAILER.size - length - framing
    if payload != manifest.payload_bytes:
        raise InvalidDataError(
            f"{origin}: the manifest says the payload is {manifest.payload_bytes} bytes, "
            f"the file holds {payload}"
        )
    return manifest


def read_manifest(path: Path) -> Manifest:
    """The manifest of a local archive (reads only its end)."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size

            def read_range(offset: int, length: int) -> bytes:
                handle.seek(offset)
                return handle.read(length)

            return read_manifest_tail(size, read_range, str(path))
    except FileNotFoundError:
        from triggerfish_cli.errors import NotFoundError

        raise NotFoundError(f"{path}: no such backup") from None
    except IsADirectoryError:
        raise InvalidDataError(f"{path}: a directory, not a backup") from None
    except OSError as exc:
        raise InvalidDataError(f"{path}: cannot read: {exc.strerror}") from None


def sealed_outer(
    inner: Manifest, payload: HashingWriter, sealed: bytes, recipients: list[str]
) -> Manifest:
    """The outer manifest of an encrypted archive whose payload went through ``payload``."""
    return Manifest(
        kind=inner.kind,
        created=inner.created,
        source="",
        backend="",
        compression=inner.compression,
        payload_bytes=payload.count,
        payload_sha256=payload.sha.hexdigest(),
        store_id=inner.store_id,
        recipients=recipients,
        sealed=True,
        sealed_bytes=len(sealed),
        sealed_sha256=hashlib.sha256(sealed).hexdigest(),
    )


def open_sealed(
    outer: Manifest, read_range: Callable[[int, int], bytes], identities: Any, origin: str
) -> Manifest:
    """The whole manifest of an encrypted archive: its sealed part, checked and decrypted.

    Damage is exit 5; a key that opens none of it, exit 4 (backup_crypt.unseal).
    """
    from triggerfish_cli.backup.crypt import unseal

    sealed = read_range(outer.payload_bytes, outer.sealed_bytes)
    if hashlib.sha256(sealed).hexdigest() != outer.sealed_sha256:
        raise VerificationError(
            f"{origin}: the encrypted manifest's sha256 is not the one recorded "
            "(the archive is damaged)"
        )
    body = unseal(sealed, identities, origin, outer.recipients or [])
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidDataError(f"{origin}: the sealed manifest is not valid JSON ({exc})") from None
    inner = Manifest.from_dict(data, origin)
    if inner.sealed:
        raise InvalidDataError(f"{origin}: the sealed manifest is itself sealed")
    try:
        return outer.opened(inner)
    except InvalidDataError as exc:
        raise InvalidDataError(f"{origin}: {exc.message}") from None


def open_file_manifest(path: Path, identities: Any, origin: str | None = None) -> Manifest:
    """The manifest of a local archive; an encrypted one opened with ``identities``."""
    manifest = read_manifest(path)
    if not manifest.sealed or identities is None:
        return manifest
    with path.open("rb") as handle:

        def read_range(offset: int, length: int) -> bytes:
            handle.seek(offset)
            return handle.read(length)

        return open_sealed(manifest, read_range, identities, origin or str(path))


# -- streams ------------------------------------------------------------------------


def read_chunks(reader: Any, size: int = CHUNK) -> Iterator[bytes]:
    """``reader.read(size)`` until it returns nothing."""
    while True:
        data = reader.read(size)
        if not data:
            return
        yield data


class HashingWriter:
    """A file-like sink that hashes and counts what passes through it."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.count = 0

    def write(self, data: bytes | memoryview) -> int:
        self.sha.update(data)
        self.sink.write(data)
        self.count += len(data)
        return len(data)

    def flush(self) -> None:
        self.sink.flush()

    def write_all(self, chunks: Iterable[bytes | memoryview]) -> int:
        """:meth:`write` each chunk, the write on a thread while the chunk is hashed here;
        the bytes written.

        SHA-256 and the write each take about as long as the other (about 0.4 s
        a 700 MiB store here) and both let go of the GIL: side by side, an
        uncompressed payload costs the longer of the two, not their sum. Each
        write ends before the next chunk is asked for (its producer may then
        reuse it).
        """
        total = 0
        with ThreadPoolExecutor(
            1, thread_name_prefix="backup-write", initializer=block_signals
        ) as pool:
            for chunk in chunks:
                written = pool.submit(self.sink.write, chunk)
                try:
                    self.sha.update(chunk)
                finally:
                    written.result()  # the write's own error, if it failed
                self.count += len(chunk)
                total += len(chunk)
        return total


class LimitedHashingReader:
    """Reads at most ``limit`` bytes of ``source``, hashing them."""

    def __init__(self, source: IO[bytes], limit: int) -> None:
        self.source = source
        self.left = limit
        self.sha = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        wanted = self.left if size is None or size < 0 else min(size, self.left)
        data = self.source.read(wanted)
        self.left -= len(data)
        self.sha.update(data)
        return data

    def drain(self) -> None:
        for _ in read_chunks(self):
            pass


@dataclass
class Compressed:
    #: The bytes read (the payload's content size).
    read: int
    #: zstd: the compressed size of each frame (:attr:`Manifest.frames`).
    frames: list[int] | None = None


def compress_stream(
    chunks: Iterable[bytes | memoryview],
    sink: HashingWriter,
    compression: str,
    *,
    level: int | None = None,
    threads: int = 0,
    stable: bool = False,
) -> Compressed:
    """Compress ``chunks`` into ``sink``.

    The chunks may be views of a buffer their producer reuses: each is
    consumed (copied or compressed) before the next is asked for. With
    ``stable``, a chunk stays valid for as long as it is held: zstd then
    compresses a chunk of exactly one frame where it is, without a copy.
    """
    read = 0
    if compression == "zstd":
        sizes: list[int] = []
        with ZstdFrames(DEFAULT_ZSTD_LEVEL if level is None else level, threads) as frames:
            for chunk in chunks:
                read += len(chunk)
                for frame in frames.add(chunk, stable=stable):
                    sizes.append(sink.write(frame))
            for frame in frames.finish():
                sizes.append(sink.write(frame))
        return Compressed(read, sizes)
    if compression == "gzip":
        gzip_level = DEFAULT_GZIP_LEVEL if level is None else level
        deflate = zlib.compressobj(gzip_level, zlib.DEFLATED, 31)
        for chunk in chunks:
            read += len(chunk)
            sink.write(deflate.compress(chunk))
        sink.write(deflate.flush())
        return Compressed(read)
    return Compressed(sink.write_all(chunks))


class ZstdFrames:
    """zstd compression as a series of independent frames of ``FRAME`` bytes each.

    The frames are compressed ``threads`` at a time on a pool (zstd releases
    the GIL) and handed back in order; concatenated, they are one valid zstd
    stream (``zstd -d`` and every decoder read across frames), each with its
    content size and checksum. One-shot frames on a pool cost a third less
    CPU than libzstd's own multi-threaded streaming mode fed 1 MiB writes,
    at the same ratio (the level-1 window is far smaller than a frame).
    The input is gathered in a few buffers used over and over: fresh 8 MiB
    blocks would cost a page fault per 4 KiB.
    """

    FRAME = 8 << 20

    def __init__(self, level: int, threads: int) -> None:
        import zstandard

        self._local = threading.local()
        self._level = level
        self._zstd = zstandard
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        if self._threads > 1:
            self._pool = ThreadPoolExecutor(
                self._threads, thread_name_prefix="backup-zstd", initializer=block_signals
            )
        #: Frames on the pool, oldest first, each with the buffer it reads.
        self._pending: collections.deque[tuple[Future[bytes], bytearray | None]] = (
            collections.deque()
        )
        self._free: list[bytearray] = []
        self._buffer = bytearray(self.FRAME)
        self._filled = 0
        self._frames = 0

    def __enter__(self) -> ZstdFrames:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            for future, _ in self._pending:
                future.cancel()
            self._pool.shutdown(wait=True)

    def _compress(self, block: memoryview) -> bytes:
        compressor = getattr(self._local, "compressor", None)
        if compressor is None:
            compressor = self._zstd.ZstdCompressor(level=self._level, write_checksum=True)
            self._local.compressor = compressor
        return bytes(compressor.compress(block))

    def add(self, chunk: bytes | memoryview, *, stable: bool = False) -> Iterator[bytes]:
        """Take ``chunk``; the frames finished by now, in order.

        ``stable``: the chunk stays valid while held, so one of exactly a
        frame is compressed where it is.
        """
        view = memoryview(chunk).cast("B")
        if stable and not self._filled and len(view) == self.FRAME and self._pool is not None:
            yield from self._submit(view)
            return
        while view:
            room = self.FRAME - self._filled
            taken = view[:room]
            self._buffer[self._filled : self._filled + len(taken)] = taken
            self._filled += len(taken)
            view = view[room:]
            if self._filled == self.FRAME:
                yield from self._submit()

    def finish(self) -> Iterator[bytes]:
        if self._filled or not self._frames:  # an empty stream is one empty frame
            yield from self._submit()
        while self._pending:
            yield self._collect()

    def _submit(self, outside: memoryview | None = None) -> Iterator[bytes]:
        """Compress the gathered block, or ``outside`` (a whole frame held elsewhere)."""
        self._frames += 1
        block = None if outside is not None else self._buffer
        data = outside if outside is not None else memoryview(self._buffer)[: self._filled]
        if self._pool is None:
            self._filled = 0
            yield self._compress(data)
            return
        self._pending.append((self._pool.submit(self._compress, data), block))
        while self._pending and (
            self._pending[0][0].done() or len(self._pending) > 2 * self._threads
        ):
            yield self._collect()
        if block is not None:
            self._buffer = self._free.pop() if self._free else bytearray(self.FRAME)
            self._filled = 0

    def _collect(self) -> bytes:
        future, block = self._pending.popleft()
        frame = future.result()
        if block is not None:
            self._free.append(block)
        return frame


def decompress_chunks(
    source: LimitedHashingReader, compression: str, frames: list[int] | None = None
) -> Iterator[bytes | memoryview]:
    """The decompressed payload, chunk by chunk. Corrupt data raises VerificationError.

    A chunk is only valid until the next one is asked for.

    ``frames`` (zstd): the compressed size of each frame; they are then
    decompressed in parallel, in order.
    """
    if compression == "zstd" and frames:
        yield from _zstd_frames(source, frames)
    elif compression == "zstd":
        import zstandard

        raw: Any = source
        reader = zstandard.ZstdDecompressor().stream_reader(
            raw, read_size=CHUNK, read_across_frames=True
        )
        try:
            yield from read_chunks(reader)
        except zstandard.ZstdError as exc:
            raise VerificationError(f"zstd: {exc}") from None
    elif compression == "gzip":
        inflate = zlib.decompressobj(31)
        try:
            for data in read_chunks(source):
                out = inflate.decompress(data)
                if out:
                    yield out
            tail = inflate.flush()
            if tail:
                yield tail
        except zlib.error as exc:
            raise VerificationError(f"gzip: {exc}") from None
        if not inflate.eof:
            raise VerificationError("gzip: the compressed stream ends early")
    else:
        yield from read_chunks(source)


def decompress_into(
    source: LimitedHashingReader, compression: str, frames: list[int] | None, fd: int
) -> Iterator[int]:
    """The decompressed payload written into the file ``fd`` from its start; yields
    how many bytes each step wrote, in order. Corrupt data raises VerificationError.

    zstd frames are each written by the thread that decompressed them, at
    their offset: the kernel's work of giving the file new pages (on a VM
    most of the cost of writing a scratch store) is spread over the cores
    like the decompression.
    """
    if compression == "zstd" and frames:
        yield from _zstd_frames(source, frames, fd)
        return
    offset = 0
    for chunk in decompress_chunks(source, compression, frames):
        _write_at(fd, chunk, offset)
        offset += len(chunk)
        yield len(chunk)


def _write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _zstd_frames(
    source: LimitedHashingReader, sizes: list[int], fd: int | None = None
) -> Iterator[Any]:
    """Each frame of ``sizes`` read in turn (hashed), decompressed on a pool, in order.

    Without ``fd``: the frames' contents (each valid until the next is asked
    for). With it: each frame is written into ``fd`` at its offset by the
    thread that decompressed it, and what is yielded is its length (a frame
    whose header does not give its size, and every one after it, is written
    here, in order). Frames are decompressed into a few buffers used over and
    over: fresh 8 MiB outputs would cost a page fault per 4 KiB.
    """
    import zstandard

    local = threading.local()
    free: list[bytearray] = []

    def decompress(
        data: bytes, size: int, buffer: bytearray, offset: int | None
    ) -> tuple[bytearray, int]:
        context = getattr(local, "context", None)
        if context is None:
            context = local.context = zstandard.ZstdDecompressor()
        try:
            if size < 0:  # not in the header: as a stream, to its end
                stream = context.decompressobj()
                buffer = bytearray(stream.decompress(data))
                size = len(buffer)
                if not stream.eof or stream.unused_data:
                    raise VerificationError("zstd: a frame ends early, or more follows it")
            else:
                if len(buffer) < size:
                    buffer = bytearray(size)
                _frame_into(context, data, memoryview(buffer), size)
        except zstandard.ZstdError as exc:
            raise VerificationError(f"zstd: {exc}") from None
        if fd is not None and offset is not None:
            _write_at(fd, memoryview(buffer)[:size], offset)
        return buffer, size

    threads = cpu_workers()
    pending: collections.deque[Future[tuple[bytearray, int]]] = collections.deque()
    #: Where the next frame goes in fd; None once a frame did not say its size.
    offset: int | None = 0
    written = 0  # bytes in fd so far (frames written here, in order)

    def landed(future: Future[tuple[bytearray, int]]) -> Any:
        nonlocal written
        buffer, count = future.result()
        free.append(buffer)
        if fd is None:
            return memoryview(buffer)[:count]
        if offset is None:
            _write_at(fd, memoryview(buffer)[:count], written)
        written += count
        return count

    with ThreadPoolExecutor(
        threads, thread_name_prefix="backup-unzstd", initializer=block_signals
    ) as pool:
        try:
            for size in sizes:
                data = source.read(size)
                if len(data) != size:
                    raise VerificationError("zstd: the payload ends inside a frame")
                content, at = _content_size(data), None
                if fd is not None and offset is not None:
                    if content < 0:
                        while pending:  # from here on every frame is written in order
                            yield landed(pending.popleft())
                        offset = None
                    else:
                        at, offset = offset, offset + content
                buffer = free.pop() if free else bytearray()
                pending.append(pool.submit(decompress, data, content, buffer, at))
                while pending and (pending[0].done() or len(pending) > 2 * threads):
                    yield landed(pending.popleft())
            while pending:
                yield landed(pending.popleft())
        finally:
            for future in pending:
                future.cancel()


def _content_size(data: bytes) -> int:
    """The content size a zstd frame's header gives (-1: none, or not a frame: the
    stream decompression then says what is wrong with it)."""
    import zstandard

    try:
        return int(zstandard.frame_content_size(data))
    except zstandard.ZstdError:
        return -1


def _frame_into(context: Any, data: bytes, view: memoryview, size: int) -> None:
    """One frame decompressed into ``view``: exactly ``size`` bytes, else VerificationError."""
    filled = 0
    with context.stream_reader(data, read_across_frames=False) as reader:
        while filled < size:
            count = reader.readinto(view[filled:size])
            if not count:
                break
            filled += count
        if filled != size or reader.read(1):  # short, or more after it
            raise VerificationError(
                f"zstd: a frame holds other than the {size} bytes its header says"
            )
