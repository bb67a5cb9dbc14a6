"""The S3 backend's bulk and conditional writes.

There are no transactions: ``set_many`` is not atomic, a failure may leave
part of a batch written. ``delete_if_unchanged`` and ``replace_if_unchanged``
read each object's value and ETag and act with ``If-Match: <etag>``, so a
record the gateway rewrote in between is kept (on servers that honour
If-Match: AWS S3, MinIO, moto).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.errors import NotFoundError
from triggerfish_cli.storage.provider import DEFAULT_BATCH, BatchCallback, after_batch, batched
from triggerfish_cli.storage.s3.client import PreconditionFailed
from triggerfish_cli.storage.s3.objects import S3Objects


class S3Writes(S3Objects):
    """``set_many``, ``delete_many`` and the compare-and-swap writes, on the thread pool."""

    def set_many(self, items: Iterable[tuple[str, str]]) -> int:
        """Every item, in parallel. Not atomic: S3 has no multi-object transactions."""
        self._check_writable()
        staged = dict(items)
        for key, value in staged.items():  # before writing any of them
            cells.refuse(key, value, self.describe())
        for chunk in batched(list(staged.items()), 1000):
            self._map(self._put, chunk)
        return len(staged)

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
        except (NotFoundError, PreconditionFailed):
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

