"""Per-namespace counts and checksums of a store, and a side-by-side comparison of two.

The checksum of a namespace is order-independent: for every record,
``d = MD5(b"<len(key) in UTF-8 bytes>:" + key + value)`` (UTF-8; a cell
that is not UTF-8 text, cells.py, as its stored bytes), and the
namespace's checksum is the sum of the records' ``d[:8]`` (big-endian)
modulo 2**64, as 16 hex digits. MD5 serves here to detect damage and
differences (a chance of 2**-64 to miss one), not attackers. Every backend
computes exactly this; Postgres computes it in the server
(``StorageProvider.record_checksums``), the others while reading.

Namespaces are :func:`namespaces.group_of`: a known prefix, else the key's
first segment (``x:``), else ``""``.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from triggerfish_cli import cells, namespaces
from triggerfish_cli.storage.provider import (
    StorageProvider,
    batched,
    prefix_upper_bound,
    uncovered_ranges,
)
from triggerfish_cli.threads import background

_MOD = 1 << 64

Callback = Callable[[int], None]


def record_digest(key: bytes, value: bytes) -> int:
    """The first 8 bytes of ``MD5(b"<len(key)>:" + key + value)`` as an integer."""
    d = hashlib.md5(b"%d:%b%b" % (len(key), key, value), usedforsecurity=False).digest()
    return int.from_bytes(d[:8], "big")


@dataclass
class Sums:
    """Count and checksum of a set of records."""

    count: int = 0
    total: int = 0

    def add(self, key: bytes, value: bytes) -> None:
        self.count += 1
        self.total = (self.total + record_digest(key, value)) % _MOD

    def remove(self, key: bytes, value: bytes) -> None:
        self.count -= 1
        self.total = (self.total - record_digest(key, value)) % _MOD

    @property
    def hex(self) -> str:
        return f"{self.total % _MOD:016x}"

    def same(self, other: Sums) -> bool:
        return (self.count, self.hex) == (other.count, other.hex)


class Accumulator:
    """Per-namespace sums of records seen batch by batch, in any order."""

    def __init__(self) -> None:
        self._totals: dict[str, list[int]] = {}

    def add(self, rows: Iterable[tuple[str, str | bytes]]) -> None:
        """Add records; the hot loop of a migration, so written for speed."""
        md5 = hashlib.md5
        from_bytes = int.from_bytes
        for_key = namespaces.for_key
        totals = self._totals
        known: str | None = None  # the known prefix of the current run of keys
        current: list[int] = []
        for key, value in rows:
            if known is None or not key.startswith(known):
                found = for_key(key)
                known = found.prefix if found is not None else None
                group = known if known is not None else namespaces.group_of(key)
                current = totals.setdefault(group, [0, 0])
            try:
                key_bytes = key.encode("utf-8")
                data = value.encode("utf-8") if isinstance(value, str) else value
            except UnicodeEncodeError:  # a cell that is not UTF-8 text: its stored bytes
                key_bytes = cells.raw_bytes(key)
                data = cells.raw_bytes(value) if isinstance(value, str) else value
            d = md5(b"%d:%b%b" % (len(key_bytes), key_bytes, data), usedforsecurity=False)
            current[0] += 1
            current[1] += from_bytes(d.digest()[:8], "big")

    @property
    def sums(self) -> dict[str, Sums]:
        return {group: Sums(count, total % _MOD) for group, (count, total) in self._totals.items()}


def _stream_sums(rows: Iterable[tuple[str, bytes]], on_key: Callback | None) -> dict[str, Sums]:
    accumulator = Accumulator()
    for chunk in batched(rows, 10_000):
        accumulator.add(chunk)
        if on_key is not None:
            on_key(len(chunk))
    return accumulator.sums


def namespace_sums(
    provider: StorageProvider, *, batch_size: int = 10_000, on_key: Callback | None = None
) -> dict[str, Sums]:
    """Count and checksum per namespace, natively where the backend can."""
    native = provider.record_checksums(key_ranges())
    if native is not None:
        sums = _as_sums(native)
        if on_key is not None:
            on_key(sum(s.count for s in sums.values()))
        return sums
    return _stream_sums(provider.scan_stored(batch_size=batch_size), on_key)


KeyRange = tuple[str | None, str | None, str | None]


def key_ranges(known: Sequence[str] = namespaces.PREFIXES) -> list[KeyRange]:
    """The key space as ``(low, high, group)`` ranges in key order.

    Each known prefix is a range of its own (``group`` = the prefix); the
    gaps between them (``group`` None) are grouped by first segment.
    """
    ranges: list[KeyRange] = [(p, prefix_upper_bound(p), p) for p in known if p]
    ranges += [(low, high, None) for low, high in uncovered_ranges(known)]
    return sorted(ranges, key=lambda r: (r[0] is not None, r[0] or ""))


def _as_sums(found: dict[str, tuple[int, int]]) -> dict[str, Sums]:
    return {group: Sums(count, total % _MOD) for group, (count, total) in found.items()}


class RangeSums:
    """A target's checksums taken range by range on a second connection, during a copy.

    The copy writes keys in order: once it is past a range, the range is
    final, and its checksums are computed by the server on another
    connection while the copy goes on. Ranges holding ``hold`` (the
    migration's own progress record, rewritten after every batch) wait for
    :meth:`result`.
    """

    def __init__(self, target: Any, hold: str) -> None:
        self._pending = key_ranges()
        self._hold = hold
        self._found: dict[str, tuple[int, int]] = {}
        self._jobs: queue.Queue[list[KeyRange] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._connection = target.reopen(read_only=True)
        self._thread = background(self._work)

    def _holds(self, r: KeyRange) -> bool:
        return (r[0] is None or r[0] <= self._hold) and (r[1] is None or self._hold < r[1])

    def passed(self, key: str) -> None:
        """Every key <= ``key`` is written: hand over the ranges that ended."""
        done = [r for r in self._pending if r[1] is not None and r[1] <= key and not self._holds(r)]
        if done:
            self._pending = [r for r in self._pending if r not in done]
            self._jobs.put(done)

    def _work(self) -> None:
        try:
            while (job := self._jobs.get()) is not None:
                for group, (count, total) in self._connection.record_checksums(job).items():
                    before = self._found.get(group, (0, 0))
                    self._found[group] = (before[0] + count, before[1] + total)
        except BaseException as exc:  # handed to result()
            self._error = exc

    def result(self) -> dict[str, Sums]:
        """The rest of the ranges, then the sums of all of them."""
        self._jobs.put(self._pending)
        self._pending = []
        self._jobs.put(None)
        while self._thread.is_alive():
            self._thread.join(0.2)
        self.close()
        if self._error is not None:
            raise self._error
        return _as_sums(self._found)

    def close(self) -> None:
        if self._thread.is_alive():  # the copy failed or was interrupted: stop at once
            self._jobs.put(None)
            with contextlib.suppress(Exception):
                self._connection.connection.cancel()
            self._thread.join(5)
            if self._thread.is_alive():
                return  # still in a query: the connection goes with the process
        self._connection.close()


# -- side by side ---------------------------------------------------------------------


@dataclass
class NamespaceCheck:
    namespace: str
    source: Sums = field(default_factory=Sums)
    #: The target's records of the source's keys (extra target keys are counted apart).
    target: Sums = field(default_factory=Sums)
    #: Source keys absent from the target, and keys whose values differ.
    missing: int = 0
    different: int = 0
    #: Target keys that are not in the source (allowed with --merge).
    extra: int = 0

    def ok(self, merge: bool) -> bool:
        return (
            self.missing == 0
            and self.different == 0
            and self.source.same(self.target)
            and (merge or self.extra == 0)
        )

    def as_dict(self, merge: bool) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "source_keys": self.source.count,
            "target_keys": self.target.count,
            "missing": self.missing,
            "different": self.different,
            "extra": self.extra,
            "source_checksum": self.source.hex,
            "target_checksum": self.target.hex,
            "ok": self.ok(merge),
        }


def compare(
    source: StorageProvider,
    target: StorageProvider,
    *,
    prefix: str | None = None,
    only: str | None = None,
    ignore: Iterable[str] = (),
    batch_size: int = 5000,
    on_key: Callback | None = None,
) -> dict[str, NamespaceCheck]:
    """Both stores side by side in key order: per namespace sums and every difference.

    ``prefix`` limits the walk to keys under it, ``only`` to one namespace;
    ``ignore`` names target keys of our own (a progress record).
    """
    checks: dict[str, NamespaceCheck] = {}
    skipped = set(ignore)

    def check(key: str) -> NamespaceCheck | None:
        group = namespaces.group_of(key)
        if only is not None and group != only:
            return None
        found = checks.get(group)
        if found is None:
            found = checks[group] = NamespaceCheck(group)
        return found

    src = source.scan(prefix, batch_size=batch_size)
    tgt = (item for item in target.scan(prefix, batch_size=batch_size) if item[0] not in skipped)
    s, t = next(src, None), next(tgt, None)
    seen = 0
    while s is not None or t is not None:
        if t is None or (s is not None and cells.before(s[0], t[0])):
            assert s is not None
            entry = check(s[0])
            if entry is not None:
                entry.source.add(cells.raw_bytes(s[0]), cells.raw_bytes(s[1]))
                entry.missing += 1
            s = next(src, None)
            seen += 1
        elif s is None or cells.before(t[0], s[0]):
            entry = check(t[0])
            if entry is not None:
                entry.extra += 1
            t = next(tgt, None)
            continue
        else:
            entry = check(s[0])
            if entry is not None:
                key = cells.raw_bytes(s[0])
                entry.source.add(key, cells.raw_bytes(s[1]))
                entry.target.add(key, cells.raw_bytes(t[1]))
                entry.different += s[1] != t[1]
            s, t = next(src, None), next(tgt, None)
            seen += 1
        if on_key is not None and seen % 10_000 == 0:
            on_key(10_000)
    return dict(sorted(checks.items()))


def drill_down(
    source: StorageProvider,
    target: StorageProvider,
    namespace: str,
    *,
    ignore: Iterable[str] = (),
    batch_size: int = 5000,
) -> NamespaceCheck:
    """One namespace side by side, to count what differs where the checksums disagree."""
    known = namespaces.get(namespace) if namespace else None
    prefix = known.prefix if known is not None and known.prefix == namespace else namespace
    found = compare(
        source, target, prefix=prefix or None, only=namespace, ignore=ignore, batch_size=batch_size
    )
    return found.get(namespace, NamespaceCheck(namespace))
