"""The backup manifest: what an archive holds and how to check it, and its JSON.

Written last into the archive (archive.py has the layout); an encrypted
archive carries two: the sealed one (this whole manifest, encrypted) and the
outer one (:meth:`Manifest.outer_dict`: nothing of its contents; the
operator's ``--label``, in clear, so that ``backup list`` shows it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from triggerfish_cli import __version__
from triggerfish_cli.errors import InvalidDataError

FORMAT = "triggerfish-backup"
FORMAT_VERSION = 1
#: The outer manifest of an encrypted archive.
SEALED_FORMAT_VERSION = 2
COMPRESSIONS = ("zstd", "gzip", "none")
KINDS = ("physical", "logical")


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
    #: A partial backup: the rows left out, per namespace (None: not recorded, older
    #: archives); their level was above ``max_taint`` or could not be established.
    left_out: dict[str, int] | None = None
    tool_version: str = __version__
    format_version: int = FORMAT_VERSION
    #: Encrypted archives: the recipients' fingerprints (backup_crypt.fingerprint).
    recipients: list[str] | None = None
    #: The outer manifest only (an encrypted archive not opened): its contents,
    #: counts, source are unknown (the operator's label is in clear); ``payload_*``
    #: are of the encrypted bytes.
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
            **({"label": self.label} if self.label is not None else {}),
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
            **self._left_out(),
        }

    def _left_out(self) -> dict[str, Any]:
        if self.left_out is None:
            return {}
        found = dict(sorted(self.left_out.items()))
        return {"left_out": sum(found.values()), "left_out_by_namespace": found}

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
        if need("content_bytes", int) < 0:
            raise InvalidDataError(f"{origin}: manifest field 'content_bytes' is invalid")
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
            left_out=_left_out(data, origin),
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
            label=data.get("label") if isinstance(data.get("label"), str) else None,
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
        ) or (self.label is not None and self.label != inner.label):
            raise InvalidDataError(
                "the sealed manifest does not match the outer one (kind, time, store, label)"
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


def _left_out(data: dict[str, Any], origin: str) -> dict[str, int] | None:
    """A partial backup's counts of rows left out (absent in older ones)."""
    found = data.get("left_out_by_namespace")
    if found is None and "left_out" not in data:
        return None
    if (
        not data.get("partial")
        or not isinstance(found, dict)
        or not all(isinstance(k, str) and type(v) is int and v > 0 for k, v in found.items())
        or data.get("left_out") != sum(found.values())
    ):
        raise InvalidDataError(f"{origin}: manifest field 'left_out' is invalid")
    return found


def _optional_text(data: dict[str, Any], name: str, origin: str) -> str | None:
    """A field older backups do not have: absent or null is None."""
    value = data.get(name)
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidDataError(f"{origin}: manifest field {name!r} is invalid")
    return value


def manifest_json(manifest: Manifest) -> bytes:
    return json.dumps(manifest.as_dict(), ensure_ascii=False, indent=1).encode("utf-8")
