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
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from triggerfish_cli import __version__
from triggerfish_cli.errors import InvalidDataError, VerificationError

FORMAT = "triggerfish-backup"
FORMAT_VERSION = 1
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
    r"(?P<kind>\.db|\.jsonl)(?P<comp>\.zst|\.gz)?$"
)
DEFAULT_ZSTD_LEVEL = 1
DEFAULT_GZIP_LEVEL = 6


def archive_name(created: str, kind: str, compression: str, serial: int = 0) -> str:
    """The file name of a backup created at ``created`` (the ISO ...Z form)."""
    stamp = created.replace(":", "-")
    suffix = f"-{serial}" if serial else ""
    return f"triggerfish-{stamp}{suffix}{KIND_EXTENSIONS[kind]}{EXTENSIONS[compression]}"


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
    tool_version: str = __version__
    format_version: int = FORMAT_VERSION

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": self.format_version,
            "tool_version": self.tool_version,
            "kind": self.kind,
            "created": self.created,
            "label": self.label,
            "source": self.source,
            "backend": self.backend,
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
        }

    @classmethod
    def from_dict(cls, data: Any, origin: str) -> Manifest:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InvalidDataError(f"{origin}: not a triggerfish-admin backup manifest")
        version = data.get("format_version")
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
            tool_version=str(data.get("tool_version", "")),
            format_version=version,
        )


def trailer_bytes(manifest: Manifest) -> bytes:
    body = json.dumps(manifest.as_dict(), ensure_ascii=False, indent=1).encode("utf-8")
    tail = body + TRAILER.pack(len(body), MAGIC)
    if manifest.compression == "zstd":
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


# -- streams ------------------------------------------------------------------------


class HashingWriter:
    """A file-like sink that hashes and counts what passes through it."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.count = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.sink.write(data)
        self.count += len(data)
        return len(data)

    def flush(self) -> None:
        self.sink.flush()


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
        while self.read(CHUNK):
            pass


def compress_stream(
    chunks: Iterable[bytes] | IO[bytes],
    sink: HashingWriter,
    compression: str,
    *,
    level: int | None = None,
    threads: int = 0,
) -> int:
    """Compress ``chunks`` (an iterable or a readable file) into ``sink``; the bytes read."""
    read = 0
    if compression == "zstd":
        import zstandard

        cctx = zstandard.ZstdCompressor(
            level=DEFAULT_ZSTD_LEVEL if level is None else level,
            threads=threads,
            write_checksum=True,
        )
        target: Any = sink
        if hasattr(chunks, "read"):
            source: Any = chunks
            read, _ = cctx.copy_stream(source, target, read_size=CHUNK, write_size=CHUNK)
            return int(read)
        with cctx.stream_writer(target, closefd=False, write_size=CHUNK) as writer:
            for chunk in _iterate(chunks):
                writer.write(chunk)
                read += len(chunk)
        return read
    if compression == "gzip":
        gzip_level = DEFAULT_GZIP_LEVEL if level is None else level
        deflate = zlib.compressobj(gzip_level, zlib.DEFLATED, 31)
        for chunk in _iterate(chunks):
            read += len(chunk)
            sink.write(deflate.compress(chunk))
        sink.write(deflate.flush())
        return read
    for chunk in _iterate(chunks):
        read += len(chunk)
        sink.write(chunk)
    return read


def _iterate(chunks: Iterable[bytes] | IO[bytes]) -> Iterator[bytes]:
    if hasattr(chunks, "read"):
        reader: Any = chunks
        while True:
            data = reader.read(CHUNK)
            if not data:
                return
            yield data
    else:
        yield from chunks


def decompress_chunks(source: LimitedHashingReader, compression: str) -> Iterator[bytes]:
    """The decompressed payload, chunk by chunk. Corrupt data raises VerificationError."""
    if compression == "zstd":
        import zstandard

        raw: Any = source
        reader = zstandard.ZstdDecompressor().stream_reader(
            raw, read_size=CHUNK, read_across_frames=True
        )
        try:
            while True:
                data = reader.read(CHUNK)
                if not data:
                    return
                yield data
        except zstandard.ZstdError as exc:
            raise VerificationError(f"zstd: {exc}") from None
    elif compression == "gzip":
        inflate = zlib.decompressobj(31)
        try:
            while True:
                data = source.read(CHUNK)
                if not data:
                    break
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
        while True:
            data = source.read(CHUNK)
            if not data:
                return
            yield data
