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

Here: the file's names and its trailer. The manifest is manifest.py; the
payload's streams, streams.py (hashing, compression) and decompress.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triggerfish_cli.backup.manifest import Manifest, manifest_json
from triggerfish_cli.backup.streams import HashingWriter
from triggerfish_cli.errors import InvalidDataError, NotFoundError, VerificationError

ENCRYPTED_EXTENSION = ".age"
MAGIC = b"TFBKMAN1"
TRAILER = struct.Struct("<Q8s")
ZSTD_SKIPPABLE = struct.Struct("<II")
ZSTD_SKIPPABLE_MAGIC = 0x184D2A5E
MAX_MANIFEST = 16 << 20
#: An encrypted manifest: MAX_MANIFEST and age's header and tags.
MAX_SEALED = MAX_MANIFEST + (1 << 20)
#: The longest line of a logical payload (one key and its value as JSON), newline
#: excluded: a longer one is refused by create and fails verify (exit 5) as soon as
#: it passes this, never held whole. The gateway's biggest records are messages,
#: bounded by a model's context (~1M tokens, a few MiB); 64 MiB holds a value of
#: at least 10 MiB even when ``ensure_ascii`` escapes every byte as six.
MAX_LINE = 64 << 20

EXTENSIONS = {"zstd": ".zst", "gzip": ".gz", "none": ""}
KIND_EXTENSIONS = {"physical": ".db", "logical": ".jsonl"}
KIND_EXTENSIONS = {"physical": ".db", "logical": ".jsonl"}
#: ``triggerfish-2026-11-30T01-22-33.123Z[-N].db.zst`` and the like.
NAME_RE = re.compile(
    r"^triggerfish-(?P<time>\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z)(?:-\d+)?"
    r"(?P<kind>\.db|\.jsonl)(?P<comp>\.zst|\.gz)?(?P<enc>\.age)?$"
)


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
    if manifest.sealed_bytes > MAX_SEALED:  # read whole and decrypted in memory
        raise InvalidDataError(
            f"{origin}: encrypted manifest length {manifest.sealed_bytes} is invalid"
        )
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
        label=inner.label,
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
    # lazy: backup/crypt.py costs ~6 ms to import (-X importtime); plain archives never need it
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
