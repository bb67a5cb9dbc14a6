"""The S3 backend (boto3, imported lazily; ``pip install 'triggerfish-admin[s3]'``).

One object per key, under a bucket and a key prefix of the store's own
(``prefix: prod/`` -> ``s3://bucket/prod/<encoded key>``). Keys are encoded
by :mod:`triggerfish_cli.storage.s3.keys` so that any key round-trips and
ListObjectsV2 returns them in key order; the object body is the value's
UTF-8 bytes.

- Listing is paginated ListObjectsV2 (``Prefix`` for key prefixes,
  ``StartAfter`` to resume); counts and sizes come from the listing alone.
- Values are read and written by a small thread pool (S3 is one request
  per object; latency, not bandwidth, is the limit).
- ``clear`` deletes every object under the store's prefix with batched
  DeleteObjects (1000 a request). The prefix belongs to the store: foreign
  objects under it are an error when listing, and are deleted by ``clear``.
- ``delete_if_unchanged`` reads each object's value and ETag and deletes it
  with ``If-Match: <etag>``, so a record the gateway rewrote in between is
  kept (on servers that honour If-Match on DeleteObject: AWS S3, MinIO, moto).
- There are no transactions: ``set_many`` is not atomic, a failure may leave
  part of a batch written (``migrate`` resumes and verifies; ``kv import``
  checks every line before writing any).
- The bucket must exist; it is checked when the store is opened.

The backend's parts: :mod:`.client` (boto3, errors, the thread pool),
:mod:`.objects` (object access, listing, the store's id), :mod:`.writes`
(bulk and conditional writes); this module holds the class itself, the five,
scans, locks and stats.

Credentials come only from the standard AWS chain (environment,
``~/.aws/credentials``, ``AWS_PROFILE``, SSO, instance or task roles), never
from triggerfish.yaml. ``endpoint_url`` points at an S3-compatible store
(MinIO, Ceph, R2, ...), which is then addressed path-style.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TypeVar

from triggerfish_cli.backup.settings import sse_args
from triggerfish_cli.errors import MissingStoreError, UsageError
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage.identity import new_id
from triggerfish_cli.storage.provider import (
    DEFAULT_BATCH,
    PrefixStats,
    batched,
    first_segment,
    uncovered_ranges,
)
from triggerfish_cli.storage.remote_settings import check_bucket, normalize_prefix
from triggerfish_cli.storage.s3.client import (
    CONNECT_TIMEOUT,
    DEFAULT_WORKERS,
    MAX_ATTEMPTS,
    READ_TIMEOUT,
    PreconditionFailed,
)
from triggerfish_cli.storage.s3.keys import KeyCodec
from triggerfish_cli.storage.s3.lease import lease, lease_name
from triggerfish_cli.storage.s3.objects import LEASE_MARK, STORE_MARK
from triggerfish_cli.storage.s3.writes import S3Writes

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_WORKERS",
    "LEASE_MARK",
    "MAX_ATTEMPTS",
    "READ_TIMEOUT",
    "STORE_MARK",
    "S3Storage",
    "open_config",
]

_T = TypeVar("_T")


def open_config(config: StorageConfig, create: bool) -> S3Storage:
    """The factory's opener for ``backend: s3``."""
    options = dict(config.options)
    if "bucket" not in options:
        raise UsageError(
            "the s3 backend needs a bucket",
            hint="set storage.bucket in triggerfish.yaml (see --config)",
        )
    return S3Storage(
        options["bucket"],
        options.get("prefix", ""),
        endpoint_url=options.get("endpoint_url"),
        region=options.get("region"),
        read_only=bool(options.get("read_only", False)),
        connect_timeout=int(options.get("connect_timeout", CONNECT_TIMEOUT)),
        read_timeout=int(options.get("read_timeout", READ_TIMEOUT)),
        max_attempts=int(options.get("max_attempts", MAX_ATTEMPTS)),
        create=create,
        sse=options.get("sse"),
        sse_kms_key_id=options.get("sse_kms_key_id"),
    )


# -- the backend ------------------------------------------------------------------


class S3Storage(S3Writes):
    backend = "s3"
    #: Seconds a lock's lease lasts without renewal (a crashed holder's is taken over after).
    lease_ttl = 60.0

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        read_only: bool = False,
        workers: int = DEFAULT_WORKERS,
        name_limit: int | None = None,
        connect_timeout: int = CONNECT_TIMEOUT,
        read_timeout: int = READ_TIMEOUT,
        max_attempts: int = MAX_ATTEMPTS,
        create: bool = False,
        as_store: bool = True,
        sse: str | None = None,
        sse_kms_key_id: str | None = None,
    ) -> None:
        """``as_store``: the prefix must hold a store (its identity object or any key),
        or is made one with ``create``; False: plain object access (backups).
        ``sse``/``sse_kms_key_id``: server-side encryption of every object written."""
        self.put_extra = sse_args(sse, sse_kms_key_id)
        self.bucket = check_bucket(bucket, "bucket")
        self.prefix = normalize_prefix(prefix, "prefix")
        # boto3 also takes the endpoint from the environment: name it in messages,
        # and address such a (non-AWS) store path-style too.
        self.endpoint_url = (
            endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
            or None
        )
        self.read_only = read_only
        budget = 1024 - len(self.prefix.encode("utf-8"))
        self.codec = KeyCodec(budget if name_limit is None else min(name_limit, budget))
        self.workers = workers
        self._pool = None
        self.timeouts = (connect_timeout, read_timeout, max_attempts)
        self.client = self._make_client(
            self.endpoint_url, region, connect_timeout, read_timeout, max_attempts
        )
        # A first request that gives up quickly: an unreachable or silent endpoint is
        # an error within seconds, not after the retries of a long read timeout.
        probe = self._make_client(self.endpoint_url, region, connect_timeout, connect_timeout, 1)
        self.timeouts = (connect_timeout, connect_timeout, 1)  # named in its errors
        with self.errors("open"):
            probe.head_bucket(Bucket=self.bucket)
            if as_store:
                listed = probe.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        self.timeouts = (connect_timeout, read_timeout, max_attempts)
        if as_store and not listed.get("Contents"):
            if not create or read_only:
                raise MissingStoreError(
                    f"no Triggerfish store at {self._where()} (nothing under the prefix)",
                    hint="check storage.bucket and storage.prefix; `migrate --to` makes a "
                    "store there",
                )
            self.record_store_id(new_id())

    # -- the five ----------------------------------------------------------------------

    def get(self, key: str) -> str | None:
        name = self.codec.name(key)
        found = self._read(name)
        return None if found is None else self._value(key, name, found[0])

    def set(self, key: str, value: str) -> None:
        self._check_writable()
        self._put((key, value))

    def delete(self, key: str) -> None:
        self._check_writable()
        with self.errors("delete"):
            self.client.delete_object(Bucket=self.bucket, Key=self._object(self.codec.name(key)))

    def list(self, prefix: str | None = None) -> list[str]:
        return [entry.key for entry in self.entries(prefix)]

    def clear(self) -> None:
        """Delete every object under the store's prefix, 1000 a request."""
        self._check_writable()
        for batch in batched((name for name, _ in self._listing()), 1000):
            self._delete_names(batch)

    # -- native admin operations ---------------------------------------------------------

    def scan(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> Iterator[tuple[str, str]]:
        for chunk in _growing(
            self.entries(prefix, start_after=start_after), self.workers, batch_size
        ):
            missing = [entry for entry in chunk if entry.value is None]
            names = [entry.name for entry in missing]
            bodies = dict(zip(names, self._map(self._read, names), strict=True))
            for entry in chunk:
                if entry.value is not None:
                    yield entry.key, entry.value
                    continue
                found = bodies.get(entry.name)
                if found is not None:  # else deleted since it was listed
                    yield entry.key, self._value(entry.key, entry.name, found[0])

    def scan_keys(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        batch_size: int = DEFAULT_BATCH,
    ) -> Iterator[str]:
        for entry in self.entries(prefix, start_after=start_after):
            yield entry.key

    def get_many(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        found: dict[str, str] = {}
        for chunk in batched(wanted, 1000):
            for key, value in zip(chunk, self._map(self.get, chunk), strict=True):
                if value is not None:
                    found[key] = value
        return found

    def _any_key(self, probe: tuple[str, str | None]) -> bool:
        prefix, after = probe
        entries = self.entries(prefix or None, start_after=after, page_size=8)
        return next(entries, None) is not None

    def any_keys(self, probes: Sequence[tuple[str, str | None]]) -> builtins.list[bool]:
        """One short listing per probe (8 names a page), on the thread pool."""
        return self._map(self._any_key, list(probes))

    def lock(self, name: str, wait: float = 0.0) -> AbstractContextManager[None]:
        """A lease object with an expiry (see :mod:`~triggerfish_cli.storage.s3.lease`)."""
        self._check_writable()
        return lease(
            self.client,
            self.bucket,
            self._object(lease_name(name)),
            wait,
            f"{name} on {self.describe()}",
            errors=self.errors,
            precondition=PreconditionFailed,
            ttl=self.lease_ttl,
        )

    def count(self, prefix: str | None = None) -> int:
        return sum(1 for _ in self.entries(prefix))

    def prefix_stats(self, prefixes: Sequence[str]) -> dict[str, PrefixStats]:
        stats: dict[str, PrefixStats] = {}
        for prefix in prefixes:
            count = size = 0
            for entry in self.entries(prefix):
                count += 1
                size += entry.size
            stats[prefix] = PrefixStats(count, size)
        return stats

    def other_stats(self, known: Sequence[str], sep: str = ":") -> dict[str, PrefixStats]:
        """List only the key ranges between the known prefixes."""
        groups: dict[str, PrefixStats] = {}
        for low, high in uncovered_ranges(known):
            for entry in self.entries(from_key=low, until=high):
                group = first_segment(entry.key, sep)
                groups[group] = groups.get(group, PrefixStats()) + PrefixStats(1, entry.size)
        return groups


def _growing(items: Iterator[_T], first: int, most: int) -> Iterator[builtins.list[_T]]:
    """Chunks of ``first`` items, doubling up to ``most``: a reader that stops
    early (``kv list --limit 3``) does not pay for a thousand GETs."""
    size = max(1, min(first, most))
    chunk: builtins.list[_T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
            size = min(size * 2, max(most, 1))
    if chunk:
        yield chunk
