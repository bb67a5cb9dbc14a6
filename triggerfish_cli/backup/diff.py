"""``backup diff A B``: per namespace, the keys added, removed and changed (``restic diff``).

Each side is a backup (logical or physical) or the live store. A backup is
verified first, as ``backup verify`` does (a damaged one is exit 5, never a
diff); a physical one is decompressed into a private scratch file (0600, in
a 0700 directory removed afterwards) and read through a read-only
connection. Both sides are read in key order and compared in one pass:
only counts, and with ``keys`` the keys themselves, are kept; values are
compared, never shown (nothing of a memory's content comes out).

This tool's own audit records (``audit:<time>:admin_<action>``) are left
out, only counted: taking a backup writes one after its snapshot, and a
diff right after it must not say "changed" (the actions they record show
as the keys they changed).

Memory rows follow the raw view's rules (``kv.RawReads``): with a taint set,
memory rows above it are left out altogether (neither counted nor named);
without one, every row is counted, and naming memory keys above PUBLIC
(``keys``) leaves an audit record of them (keys and counts, never content).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli import audit, namespaces
from triggerfish_cli.backup.decompress import decompress_chunks
from triggerfish_cli.backup.load import verified
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.backup.verify import iter_lines, payload_stream
from triggerfish_cli.classification import Level
from triggerfish_cli.memory.keys import PREFIX, may_name
from triggerfish_cli.storage.backends import physical

KINDS = ("added", "removed", "changed")


@dataclass
class Side:
    """One side of a diff, as the result names it."""

    kind: str  # "backup" or "live"
    name: str
    created: str | None = None
    keys: int | None = None
    store_id: str | None = None
    #: A partial backup's level (``--max-taint``): it holds nothing above it.
    max_taint: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "created": self.created,
            "keys": self.keys,
            "store_id": self.store_id,
            **({"partial": True, "max_taint": self.max_taint} if self.max_taint else {}),
        }

    def describe(self) -> str:
        if self.kind == "live":
            return f"{self.name} (the live store)"
        partial = f", partial: nothing above {self.max_taint}" if self.max_taint else ""
        return f"{self.name} ({self.created}, {self.keys} keys{partial})"


def backup_side(name: str, manifest: Manifest) -> Side:
    return Side(
        "backup", name, manifest.created, manifest.keys, manifest.store_id, manifest.max_taint
    )


@dataclass
class Diff:
    """Counts per namespace of each kind of difference; the keys when asked for."""

    a: Side
    b: Side
    taint: Level | None = None
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    keys: dict[str, list[str]] | None = None
    #: This tool's own audit records that differ, left out of the counts.
    own_audit: int = 0

    def add(self, kind: str, key: str) -> None:
        if audit.is_own(key):
            self.own_audit += 1
            return
        self.counts.setdefault(namespaces.group_of(key), Counter())[kind] += 1
        if self.keys is not None:
            self.keys[kind].append(key)

    @property
    def totals(self) -> dict[str, int]:
        return {kind: sum(c[kind] for c in self.counts.values()) for kind in KINDS}

    @property
    def identical(self) -> bool:
        return not any(self.totals.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": self.a.as_dict(),
            "to": self.b.as_dict(),
            "taint": self.taint.name if self.taint is not None else None,
            "identical": self.identical,
            "namespaces": {
                name: {kind: counts[kind] for kind in KINDS}
                for name, counts in sorted(self.counts.items())
            },
            "totals": self.totals,
            "own_audit_left_out": self.own_audit,
            **({"keys": self.keys} if self.keys is not None else {}),
        }


def compare(
    a: Iterable[tuple[str, str]],
    b: Iterable[tuple[str, str]],
    found: Diff,
    *,
    admit: Any = None,
) -> Diff:
    """Merge the two key-ordered streams into ``found``.

    Memory rows above ``found.taint`` are skipped; ``admit(key)`` (the raw
    view's ``RawReads.admit``) is told each memory key that is named.
    """
    taint = found.taint

    def counted(key: str) -> bool:
        if not key.startswith(PREFIX):
            return True
        if taint is not None and not may_name(key, taint):
            return False
        if found.keys is not None and admit is not None:
            admit(key)
        return True

    left, right = iter(a), iter(b)
    x = next(left, None)
    y = next(right, None)
    while x is not None or y is not None:
        if y is None or (x is not None and x[0] < y[0]):
            assert x is not None
            if counted(x[0]):
                found.add("removed", x[0])
            x = next(left, None)
        elif x is None or y[0] < x[0]:
            if counted(y[0]):
                found.add("added", y[0])
            y = next(right, None)
        else:
            if x[1] != y[1] and counted(x[0]):
                found.add("changed", x[0])
            x, y = next(left, None), next(right, None)
    return found


@contextlib.contextmanager
def archive_rows(
    path: Path, name: str, work: Path, identities: Any = None
) -> Iterator[tuple[Manifest, Iterator[tuple[str, str]]]]:
    """The (opened) manifest and rows of a local archive in key order, once verified.

    Physical: decompressed (verified) into ``work/snapshot.db``, 0600, read
    read-only; the caller removes ``work``. An encrypted archive needs
    ``identities`` (backup_crypt.Identities).
    """
    result = verified(path, name, work, "no diff", identities=identities)
    manifest = result.manifest
    assert manifest is not None
    if manifest.kind == "physical":
        copy_rows = physical(manifest.backend).copy_rows
        assert copy_rows is not None
        with copy_rows(work / "snapshot.db") as rows:
            yield manifest, rows
        return
    with path.open("rb") as handle, payload_stream(handle, manifest, identities, name) as reader:
        chunks = decompress_chunks(
            reader, manifest.compression, manifest.frames, limit=manifest.content_bytes
        )
        yield manifest, ((key, value) for key, value, _n, _s in iter_lines(chunks))
