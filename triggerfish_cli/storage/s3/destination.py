"""Backups in S3: ``--to/--from s3://bucket/prefix``.

The archive is built in a local scratch directory exactly as for a local
destination, then uploaded (multipart above 64 MiB, each part with an S3
SHA-256 checksum the server checks on receipt) with the archive's sha256 in
the object's metadata; after the upload a HEAD compares the size, the
metadata and S3's own SHA-256 checksum of what it stored (of the whole
object, or the composite of its parts) with the local file; a mismatching
object is deleted. Manifests are read with two
ranged GETs from the object's end; verify and restore download the archive
to scratch first. Credentials come from the standard AWS chain;
``--endpoint-url`` (or ``AWS_ENDPOINT_URL``) reaches S3-compatible stores.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from triggerfish_cli.backup.archive import is_archive_name, read_manifest_tail
from triggerfish_cli.backup.dest import MARKER_SUFFIX, Entry, NewName, parse_marker, temp_dir
from triggerfish_cli.backup.streams import read_chunks
from triggerfish_cli.errors import NotFoundError, TriggerfishError, VerificationError
from triggerfish_cli.storage.remote_settings import check_endpoint, parse_s3_url
from triggerfish_cli.storage.s3.backend import S3Storage
from triggerfish_cli.storage.s3.client import MissingBucketError

MULTIPART = 64 << 20


class S3Destination:
    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        endpoint_url: str | None = None,
        sse: str | None = None,
        sse_kms_key_id: str | None = None,
        reading: bool = False,
    ) -> None:
        """``reading``: backups are read from it, so a missing bucket is not found (exit 3)."""
        try:
            self.store = S3Storage(
                bucket,
                prefix,
                endpoint_url=endpoint_url,
                workers=4,
                as_store=False,
                sse=sse,
                sse_kms_key_id=sse_kms_key_id,
            )
        except MissingBucketError as exc:
            if not reading:
                raise
            raise NotFoundError(exc.message) from None
        self.bucket = self.store.bucket
        self.prefix = self.store.prefix
        self.client: Any = self.store.client

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        endpoint_url: str | None = None,
        sse: tuple[str | None, str | None] = (None, None),
        reading: bool = False,
    ) -> S3Destination:
        options = parse_s3_url(url)
        if endpoint_url is not None:
            endpoint_url = check_endpoint(endpoint_url, "--endpoint-url")
        return cls(
            options["bucket"],
            options["prefix"],
            endpoint_url=endpoint_url,
            sse=sse[0],
            sse_kms_key_id=sse[1],
            reading=reading,
        )

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _key(self, name: str) -> str:
        return self.prefix + name

    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        return self.store.errors(what)

    def _head(self, name: str, *, checksums: bool = False) -> dict[str, Any] | None:
        # lazy: botocore is banned at module level (TID253)
        from botocore.exceptions import ClientError

        extra = {"ChecksumMode": "ENABLED"} if checksums else {}
        try:
            with self._errors("head"):
                return dict(
                    self.client.head_object(Bucket=self.bucket, Key=self._key(name), **extra)
                )
        except NotFoundError:
            return None
        except TriggerfishError as exc:
            if isinstance(exc.__cause__, ClientError):
                code = exc.__cause__.response.get("Error", {}).get("Code")
                if code in ("404", "NoSuchKey", "NotFound"):
                    return None
            raise

    def exists(self, name: str) -> bool:
        return self._head(name) is not None

    def _names(self) -> tuple[dict[str, int], set[str]]:
        archives: dict[str, int] = {}
        markers: set[str] = set()
        paginator = self.client.get_paginator("list_objects_v2")
        with self._errors("list"):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
                for item in page.get("Contents", []):
                    name = item["Key"][len(self.prefix) :]
                    if "/" in name:
                        continue
                    if is_archive_name(name):
                        archives[name] = int(item["Size"])
                    elif name.endswith(MARKER_SUFFIX):
                        markers.add(name)
        return archives, markers

    def entries(self) -> list[Entry]:
        archives, markers = self._names()
        return [
            self._entry(name, size, name + MARKER_SUFFIX in markers)
            for name, size in sorted(archives.items())
        ]

    def entry(self, name: str) -> Entry:
        head = self._head(name)
        if head is None:
            raise NotFoundError(f"{self.describe()}{name}: no such backup")
        return self._entry(name, int(head["ContentLength"]), True)

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        if length == 0:
            return b""
        with self._errors("get"):
            response = self.client.get_object(
                Bucket=self.bucket,
                Key=self._key(name),
                Range=f"bytes={offset}-{offset + length - 1}",
            )
            return bytes(response["Body"].read())

    def _entry(self, name: str, size: int, has_marker: bool) -> Entry:
        entry = Entry(name, size)

        def read_range(offset: int, length: int) -> bytes:
            return self.read_range(name, offset, length)

        try:
            entry.manifest = read_manifest_tail(size, read_range, self.describe() + name)
        except TriggerfishError as exc:
            entry.error = str(exc)
        if has_marker:
            with contextlib.suppress(TriggerfishError):
                with self._errors("get"):
                    body = self.client.get_object(
                        Bucket=self.bucket, Key=self._key(name + MARKER_SUFFIX)
                    )["Body"].read()
                entry.marker = parse_marker(body.decode("utf-8", "replace"))
        return entry

    @contextlib.contextmanager
    def writer(self, name: NewName) -> Iterator[IO[bytes]]:
        """A local scratch file, uploaded and checked when the block ends without error."""
        with temp_dir(None, "upload") as work:
            path = work / name.name
            with path.open("wb") as handle:
                yield handle
            self.upload(path, name)

    @contextlib.contextmanager
    def staging(self, name: NewName) -> Iterator[Path]:
        """A local scratch path, uploaded and checked when the block ends without error."""
        with temp_dir(None, "upload") as work:
            path = work / name.name
            yield path
            self.upload(path, name)

    def upload(self, path: Path, claim: NewName) -> None:
        """Upload ``path`` under ``claim.name``, the first of its names no object has: the
        put is conditional (``If-None-Match: *``), so an archive another run stored under
        the same name meanwhile is never replaced (the next serial is taken). A server
        that does not implement conditional writes (501) is written without one."""
        digest, expected = _digests(path, MULTIPART)
        conditional = True
        while True:
            try:
                if self._put(path, claim.name, digest, conditional):
                    break
                claim.serial += 1
            except _NoConditionalWrites:
                conditional = False
        name = claim.name
        head = self._head(name, checksums=True)
        size = path.stat().st_size
        stored = str((head or {}).get("ChecksumSHA256") or "").split("-")[0]
        if (
            head is None
            or int(head["ContentLength"]) != size
            or head.get("Metadata", {}).get("sha256") != digest
            or (stored and stored != expected)
        ):
            with contextlib.suppress(TriggerfishError), self._errors("delete"):
                self.client.delete_object(Bucket=self.bucket, Key=self._key(name))
            raise VerificationError(
                f"{self.describe()}{name}: the uploaded object does not match the archive "
                f"(size or sha256): removed"
            )

    def _put(self, path: Path, name: str, digest: str, conditional: bool) -> bool:
        """Upload ``path`` as ``name``; False when ``conditional`` and an object has it."""
        # lazy: boto3 (~300 ms) is banned at module level (TID253)
        from boto3.exceptions import S3UploadFailedError
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=MULTIPART, multipart_chunksize=MULTIPART)
        extra = {
            "Metadata": {"sha256": digest},
            "ChecksumAlgorithm": "SHA256",
            **self.store.put_extra,
        }
        key = self._key(name)
        # upload_file takes no IfNoneMatch: it is added to the calls that create the object
        events = self.client.meta.events
        for call in _CREATING_CALLS if conditional else ():
            events.register(call, _if_none_match(key), unique_id=f"{call}:{key}")
        try:
            with self._errors("upload"):
                self.client.upload_file(str(path), self.bucket, key, ExtraArgs=extra, Config=config)
        except S3UploadFailedError as exc:
            code = _error_code(exc)
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return False
            if conditional and code in ("NotImplemented", "501"):
                raise _NoConditionalWrites from exc
            raise
        finally:
            for call in _CREATING_CALLS if conditional else ():
                events.unregister(call, unique_id=f"{call}:{key}")
        return True

    @contextlib.contextmanager
    def local_copy(self, name: str, scratch: Path | None) -> Iterator[Path]:
        head = self._head(name)
        if head is None:
            raise NotFoundError(f"{self.describe()}{name}: no such backup")
        with temp_dir(scratch, "download") as work:
            path = work / name
            with self._errors("download"):
                self.client.download_file(self.bucket, self._key(name), str(path))
            expected = head.get("Metadata", {}).get("sha256")
            if expected and _sha256(path) != expected:
                raise VerificationError(f"{self.describe()}{name}: download does not match")
            yield path

    def delete(self, name: str) -> None:
        with self._errors("delete"):
            self.client.delete_objects(
                Bucket=self.bucket,
                Delete={
                    "Objects": [{"Key": self._key(name)}, {"Key": self._key(name + MARKER_SUFFIX)}]
                },
            )

    def write_marker(self, name: str, marker: dict[str, Any]) -> None:
        with contextlib.suppress(TriggerfishError), self._errors("put"):
            self.client.put_object(
                Bucket=self.bucket,
                Key=self._key(name + MARKER_SUFFIX),
                Body=(json.dumps(marker) + "\n").encode("utf-8"),
                **self.store.put_extra,
            )

    def scratch_dir(self) -> Path | None:
        return None


#: The calls that create an object (one part or several), made conditional.
_CREATING_CALLS = (
    "before-parameter-build.s3.PutObject",
    "before-parameter-build.s3.CompleteMultipartUpload",
)


class _NoConditionalWrites(Exception):
    """The server answered a conditional put with 501 Not Implemented."""


def _if_none_match(key: str) -> Callable[..., None]:
    def add(params: dict[str, Any], **_: Any) -> None:
        if params.get("Key") == key:
            params["IfNoneMatch"] = "*"

    return add


def _error_code(exc: BaseException) -> str:
    """The S3 error code of the ClientError behind boto3's S3UploadFailedError."""
    cause = exc.__cause__ or exc.__context__
    response = getattr(cause, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for data in read_chunks(handle):
            sha.update(data)
    return sha.hexdigest()


def _digests(path: Path, part_size: int) -> tuple[str, str]:
    """The file's sha256 (hex), and the SHA-256 checksum S3 keeps for it (base64): of the
    whole object for a single-part upload, else of the concatenated part digests."""
    whole = hashlib.sha256()
    parts: list[bytes] = []
    size = 0
    with path.open("rb") as handle:
        for data in read_chunks(handle, part_size):
            whole.update(data)
            parts.append(hashlib.sha256(data).digest())
            size += len(data)
    single = size < part_size
    stored = whole.digest() if single else hashlib.sha256(b"".join(parts)).digest()
    return whole.hexdigest(), base64.b64encode(stored).decode("ascii")
