"""The S3 backend's object access: one object per key, listed in key order.

Keys are encoded by :mod:`triggerfish_cli.storage.s3.keys` (long keys are
framed into the body); listing is paginated ListObjectsV2 (``Prefix`` for
key prefixes, ``StartAfter`` to resume), and counts and sizes come from the
listing alone. Lease objects (``#...``) are skipped. The store's identity
is the ``#tfadmin-store`` object (storage/identity.py).
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator, Sequence
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.errors import InvalidDataError, NotFoundError, TriggerfishError
from triggerfish_cli.serialization import now_iso
from triggerfish_cli.storage.s3.client import PreconditionFailed, S3Connection
from triggerfish_cli.storage.s3.keys import Entry, frame, unframe

#: Lease (lock) objects start with this; listings of keys skip them.
LEASE_MARK = "#"
#: The object holding the store's identity (storage/identity.py).
STORE_MARK = f"{LEASE_MARK}tfadmin-store"


class S3Objects(S3Connection):
    """Reading, writing, listing and deleting objects; the store's identity object."""

    #: Objects listed beyond the ones asked for before ``delete_many`` falls back to HEADs.
    list_budget = 1000

    def store_id(self) -> str | None:
        """This store's id, from its ``#tfadmin-store`` object; None when never recorded."""
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
        except PreconditionFailed:
            pass

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

