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

Credentials come only from the standard AWS chain (environment,
``~/.aws/credentials``, ``AWS_PROFILE``, SSO, instance or task roles), never
from triggerfish.yaml. ``endpoint_url`` points at an S3-compatible store
(MinIO, Ceph, R2, ...), which is then addressed path-style.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from triggerfish_cli import cells
from triggerfish_cli.errors import (
    BackendUnavailableError,
    BusyError,
    InvalidDataError,
    MissingStoreError,
    NotFoundError,
    RefusedError,
    TriggerfishError,
)
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.provider import (
    DEFAULT_BATCH,
    BatchCallback,
    PrefixStats,
    after_batch,
    batched,
    first_segment,
    uncovered_ranges,
)
from triggerfish_cli.storage.remote_settings import (
    CREDENTIALS_HINT,
    check_bucket,
    normalize_prefix,
)
from triggerfish_cli.storage.s3.keys import Entry, KeyCodec, frame, unframe
from triggerfish_cli.threads import block_signals

#: Lease (lock) objects start with this; listings of keys skip them.
LEASE_MARK = "#"
#: The object holding the store's identity (storage/identity.py).
STORE_MARK = f"{LEASE_MARK}tfadmin-store"

_T = TypeVar("_T")
_R = TypeVar("_R")

DEFAULT_WORKERS = 16
CONNECT_TIMEOUT = 5
#: Seconds to wait for each answer, and tries per request (botocore's "standard"
#: retries: a timeout, a dropped connection or a 5xx is tried again after a random
#: backoff of at most 2**attempt s). A request that never gets an answer fails
#: after at most max_attempts * (connect_timeout + read_timeout) + backoff.
READ_TIMEOUT = 20
MAX_ATTEMPTS = 3


class _PreconditionFailed(TriggerfishError):
    """An If-Match condition did not hold (the object changed)."""


def open_config(config: StorageConfig, create: bool) -> S3Storage:
    """The factory's opener for ``backend: s3``."""
    options = dict(config.options)
    if "bucket" not in options:
        from triggerfish_cli.errors import UsageError

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


class S3Storage(BaseStorage):
    backend = "s3"
    #: Objects listed beyond the ones asked for before ``delete_many`` falls back to HEADs.
    list_budget = 1000
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
        from triggerfish_cli.backup.settings import sse_args

        #: ServerSideEncryption / SSEKMSKeyId of every put (storage: sse).
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
        self._pool: ThreadPoolExecutor | None = None
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
            from triggerfish_cli.storage.identity import new_id

            self.record_store_id(new_id())

    # -- plumbing ---------------------------------------------------------------

    def _make_client(
        self,
        endpoint_url: str | None,
        region: str | None,
        connect_timeout: int,
        read_timeout: int,
        attempts: int,
    ) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": attempts, "mode": "standard"},
            max_pool_connections=self.workers + 4,
            s3={"addressing_style": "path"} if endpoint_url else {},
            user_agent_extra="triggerfish-admin",
        )
        with self.errors("open"):
            session = boto3.session.Session(region_name=region)
            client: Any = session.client("s3", endpoint_url=endpoint_url, config=config)
        return client

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _where(self) -> str:
        endpoint = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"{self.describe()}{endpoint}"

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        from botocore import exceptions

        try:
            yield
        except exceptions.ClientError as exc:
            raise self._client_error(exc, what) from exc
        except exceptions.NoCredentialsError:
            raise BackendUnavailableError(
                f"{self._where()}: {what}: no AWS credentials found", hint=CREDENTIALS_HINT
            ) from None
        except (
            exceptions.EndpointConnectionError,
            exceptions.ConnectTimeoutError,
            exceptions.ReadTimeoutError,
            exceptions.ConnectionClosedError,
        ) as exc:
            connect, read, attempts = self.timeouts
            raise BackendUnavailableError(
                f"{self._where()}: {what}: cannot reach S3: {exc} ({attempts} attempt(s), "
                f"connect_timeout {connect} s, read_timeout {read} s)",
                hint="check storage.endpoint_url and the network; completed work is kept",
            ) from None
        except exceptions.BotoCoreError as exc:
            raise BackendUnavailableError(f"{self._where()}: {what}: {exc}") from None

    def _client_error(self, exc: Any, what: str) -> TriggerfishError:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message") or code)
        where = f"{self._where()}: {what}"
        if code in ("NoSuchBucket", "404") and what == "open":
            return BackendUnavailableError(
                f"{where}: bucket {self.bucket!r} not found",
                hint="create the bucket first; triggerfish-admin never creates buckets",
            )
        if code in (
            "AccessDenied",
            "403",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "ExpiredToken",
            "InvalidToken",
        ):
            return BackendUnavailableError(
                f"{where}: access denied ({code})", hint=CREDENTIALS_HINT
            )
        if code in ("SlowDown", "ServiceUnavailable", "RequestTimeout", "503"):
            return BusyError(f"{where}: S3 is throttling ({code})", hint="retry later")
        if code in ("NoSuchKey", "404"):
            return NotFoundError(f"{where}: {message}")
        if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            return _PreconditionFailed(f"{where}: {message}")
        return TriggerfishError(f"{where}: {code}: {message}")

    # -- identity (storage/identity.py) ----------------------------------------------

    def store_id(self) -> str | None:
        """This store's id, from its ``#tfadmin-store`` object; None when never recorded."""
        import json

        found = self._read(STORE_MARK)
        if found is None:
            return None
        try:
            data = json.loads(found[0])
        except ValueError:
            return None
        value = data.get("id") if isinstance(data, dict) else None
        return value if isinstance(value, str) and value else None

    def record_store_id(self, candidate: str) -> None:
        """Put the identity object unless it exists (If-None-Match: first one wins)."""
        import json

        from triggerfish_cli.serialization import now_iso

        self._check_writable()
        body = json.dumps({"id": candidate, "created": now_iso()}).encode()
        try:
            with self.errors("record the store's id"):
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=self._object(STORE_MARK),
                    Body=body,
                    IfNoneMatch="*",
                    **self.put_extra,
                )
        except _PreconditionFailed:
            pass

    def _check_writable(self) -> None:
        if self.read_only:
            raise RefusedError(f"{self.describe()}: the store was opened read-only")

    def _map(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        """``fn`` over ``items`` on the thread pool, results in order."""
        if len(items) <= 1 or self.workers <= 1:
            return [fn(item) for item in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self.workers, thread_name_prefix="triggerfish-s3", initializer=block_signals
            )
        return list(self._pool.map(fn, items))

    def _object(self, name: str) -> str:
        return self.prefix + name

    # -- object access ------------------------------------------------------------

    def _read(self, name: str) -> tuple[bytes, str] | None:
        """Body and ETag of an object, None when it does not exist."""
        try:
            with self.errors("get"):
                response = self.client.get_object(Bucket=self.bucket, Key=self._object(name))
                return response["Body"].read(), str(response.get("ETag", ""))
        except NotFoundError:
            return None

    def _value(self, key: str, name: str, body: bytes) -> str:
        if self.codec.is_long(name):
            stored_key, value = unframe(body, name)
            if stored_key != key:
                raise InvalidDataError(f"object {name!r} holds key {stored_key!r}, not {key!r}")
            return value
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidDataError(f"{self.describe()}: {key!r}: value is not UTF-8") from None

    def _read_long(self, name: str) -> tuple[str, str] | None:
        found = self._read(name)
        return None if found is None else unframe(found[0], name)

    def _body(self, key: str, value: str) -> bytes:
        name = self.codec.name(key)
        return frame(key, value) if self.codec.is_long(name) else value.encode("utf-8")

    def _put(self, item: tuple[str, str]) -> None:
        key, value = item
        cells.refuse(key, value, self.describe())
        with self.errors("set"):
            self.client.put_object(
                Bucket=self.bucket,
                Key=self._object(self.codec.name(key)),
                Body=self._body(key, value),
                **self.put_extra,
            )

    def _listing(
        self, name_prefix: str = "", after: str | None = None, page_size: int = 1000
    ) -> Iterator[tuple[str, int]]:
        """``(name, size)`` of every object under the store prefix, in name order."""
        paginator = self.client.get_paginator("list_objects_v2")
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + name_prefix}
        if after is not None:
            kwargs["StartAfter"] = self.prefix + after
        cut = len(self.prefix)
        with self.errors("list"):
            for page in paginator.paginate(**kwargs, PaginationConfig={"PageSize": page_size}):
                for item in page.get("Contents", ()):
                    name = item["Key"][cut:]
                    if not name.startswith(LEASE_MARK):  # our locks, not keys
                        yield name, int(item["Size"])

    def entries(
        self,
        prefix: str | None = None,
        *,
        start_after: str | None = None,
        from_key: str | None = None,
        until: str | None = None,
        page_size: int = 1000,
    ) -> Iterator[Entry]:
        """Stored keys in key order, with value sizes, from the listing alone.

        ``prefix``: keys under it; ``start_after``: keys > it; ``from_key``:
        keys >= it; ``until``: keys < it.
        """
        after = None
        if start_after is not None:
            after = self.codec.list_after(start_after)
        elif from_key is not None:
            after = self.codec.list_from(from_key)
        listed = self._listing(self.codec.list_prefix(prefix), after, page_size)
        for entry in self.codec.restore_order(listed, self._read_long):
            key = entry.key
            if start_after is not None and key <= start_after:
                continue
            if from_key is not None and key < from_key:
                continue
            if until is not None and key >= until:
                return
            if prefix:
                if key < prefix:
                    continue
                if not key.startswith(prefix):
                    return
            yield entry

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

    def _delete_names(self, names: Sequence[str]) -> None:
        if not names:
            return
        with self.errors("delete"):
            response = self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self._object(n)} for n in names], "Quiet": True},
            )
        errors = response.get("Errors") or []
        if errors:
            first = errors[0]
            raise TriggerfishError(
                f"{self._where()}: delete: {len(errors)} object(s) not deleted, e.g. "
                f"{first.get('Key')!r}: {first.get('Code')}: {first.get('Message')}"
            )

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

    def set_many(self, items: Iterable[tuple[str, str]]) -> int:
        """Every item, in parallel. Not atomic: S3 has no multi-object transactions."""
        self._check_writable()
        staged = dict(items)
        for key, value in staged.items():  # before writing any of them
            cells.refuse(key, value, self.describe())
        for chunk in batched(list(staged.items()), 1000):
            self._map(self._put, chunk)
        return len(staged)

    def _exists(self, name: str) -> bool:
        try:
            with self.errors("get"):
                self.client.head_object(Bucket=self.bucket, Key=self._object(name))
        except NotFoundError:
            return False
        return True

    def _heads(self, names: builtins.list[str]) -> builtins.list[str]:
        exists = self._map(self._exists, names)
        return [name for name, ok in zip(names, exists, strict=True) if ok]

    def _existing(self, names: Sequence[str]) -> builtins.list[str]:
        """Which of ``names`` exist (sorted): one listing across their range, HEADs if sparse."""
        wanted = sorted(dict.fromkeys(names))
        if len(wanted) < 16:
            return self._heads(wanted)
        wanted_set = frozenset(wanted)
        found = self._heads(wanted[:1])
        budget = 4 * len(wanted) + self.list_budget
        for name, _size in self._listing(after=wanted[0]):
            if name > wanted[-1]:
                break
            if name in wanted_set:
                found.append(name)
            budget -= 1
            if budget <= 0:
                found += self._heads([n for n in wanted if n > name])
                break
        return found

    def delete_many(
        self,
        keys: Iterable[str],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:

        self._check_writable()
        deleted = 0
        for batch in batched(keys, max(1, min(batch_size, 1000))):
            existing = self._existing([self.codec.name(k) for k in batch])
            self._delete_names(existing)
            deleted += len(existing)
            after_batch(len(existing), pause, on_batch)
        return deleted

    def _if_unchanged(
        self, key: str, expected: str, what: str, act: Callable[[str, str], object]
    ) -> bool:
        """Read the object's value and ETag; when the value is ``expected``, run
        ``act(name, etag)`` (a request with ``If-Match: etag``). False when the
        value differs, or the object was deleted or rewritten meanwhile."""
        name = self.codec.name(key)
        found = self._read(name)
        if found is None or self._value(key, name, found[0]) != expected:
            return False
        try:
            with self.errors(what):
                act(name, found[1])
        except (NotFoundError, _PreconditionFailed):
            return False  # deleted or rewritten meanwhile: whoever wrote it wins
        return True

    def _delete_if(self, item: tuple[str, str]) -> bool:
        key, expected = item
        return self._if_unchanged(
            key,
            expected,
            "delete",
            lambda name, etag: self.client.delete_object(
                Bucket=self.bucket, Key=self._object(name), IfMatch=etag
            ),
        )

    def _replace_if(self, item: tuple[str, str, str]) -> bool:
        key, expected, new = item
        return self._if_unchanged(
            key,
            expected,
            "set",
            lambda name, etag: self.client.put_object(
                Bucket=self.bucket,
                Key=self._object(name),
                Body=self._body(key, new),
                IfMatch=etag,
                **self.put_extra,
            ),
        )

    def _each_batch(
        self,
        items: Iterable[Any],
        work: Callable[[Any], bool],
        batch_size: int,
        pause: float,
        on_batch: BatchCallback | None,
    ) -> int:
        """``work`` on every item, a batch at a time on the thread pool; how many did."""
        self._check_writable()
        total = 0
        for batch in batched(items, batch_size):
            done = sum(self._map(work, batch))
            total += done
            after_batch(done, pause, on_batch)
        return total

    def delete_if_unchanged(
        self,
        items: Iterable[tuple[str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        """Delete per object with ``If-Match`` on the ETag read with the value."""
        return self._each_batch(items, self._delete_if, batch_size, pause, on_batch)

    def replace_if_unchanged(
        self,
        items: Iterable[tuple[str, str, str]],
        *,
        batch_size: int = DEFAULT_BATCH,
        pause: float = 0.0,
        on_batch: BatchCallback | None = None,
    ) -> int:
        """Compare-and-swap per object: read value and ETag, put with ``If-Match``.

        A record rewritten between the read and the put is kept (412), and a
        deleted one is not re-created (the put needs an existing ETag).
        """
        return self._each_batch(items, self._replace_if, batch_size, pause, on_batch)

    def _any_key(self, probe: tuple[str, str | None]) -> bool:
        prefix, after = probe
        entries = self.entries(prefix or None, start_after=after, page_size=8)
        return next(entries, None) is not None

    def any_keys(self, probes: Sequence[tuple[str, str | None]]) -> builtins.list[bool]:
        """One short listing per probe (8 names a page), on the thread pool."""
        return self._map(self._any_key, list(probes))

    def lock(self, name: str, wait: float = 0.0) -> AbstractContextManager[None]:
        """A lease object with an expiry (see :mod:`~triggerfish_cli.storage.s3.lease`)."""
        from triggerfish_cli.storage.s3.lease import lease, lease_name

        self._check_writable()
        return lease(
            self.client,
            self.bucket,
            self._object(lease_name(name)),
            wait,
            f"{name} on {self.describe()}",
            errors=self.errors,
            precondition=_PreconditionFailed,
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
