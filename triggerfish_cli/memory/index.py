"""The memory search index: one small interface, one implementation per backend.

kv is the source of truth for memories. An index is derived from it and may
lag behind it (the gateway never indexes what cron and trigger runs save,
and an edit to kv alone leaves the index stale), so an index implementation
must check every hit against kv before returning it.

The interface, :class:`MemoryIndex`, holds no SQL. A backend's own index
is named in the backend table (storage/backends.py); a backend without one
gets the scan index, which reads every memory and gives the same results.

``search(request)``
    Hits for ``request`` at ``request.taint``, best first, at most
    ``request.limit``, and exactly that many whenever that many visible
    records match. Each hit is the version ``get`` would return for its agent
    and key (the highest visible live version), and is returned only when
    that version itself matches: a lower version never shows through.
    Nothing above the taint is returned, counted or named. Level, expiry,
    shadowing and tag filters apply before the limit. Complete: a memory the
    index lacks or holds stale is searched by its text in kv, so the hits are
    those of a freshly reindexed index.

``write(storage_key, update)``
    Read the current kv value of one memory, compute the new one with
    ``update(old) -> new`` (which may raise to abort), write it, and bring
    the index in step: a live record is indexed, anything else unindexed.
    Atomic where the backend can (one transaction on SQLite).

``reindex(storage_keys)``
    Bring the index rows of these storage keys in step with kv as it is now
    (after a bulk write of their kv rows: ``kv import``), in short
    transactions; returns the count of keys looked at. A store without index
    tables is left without them, as ``write`` leaves it.

``hard_delete(items)``
    Delete each ``(storage_key, value)`` whose value is still ``value``, and
    its index rows, in short transactions; returns the count deleted.

``check(levels, agent=)`` / ``repair(levels)``
    Compare the index rows of those levels with kv (:class:`Drift`); repair
    rewrites the rows that differ, so that afterwards the index holds
    exactly one row per live record of those levels. Rows of other levels
    are neither read nor touched.

Query language: ``request.text`` is plain words unless ``request.raw``. Plain
words: every word must occur, in the memory's key, content or tags, with the
index's stemming; any text is a valid query. Raw: the index's own syntax
(FTS5 for SQLite and the scan index), passed through; an invalid raw query
is a UsageError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from triggerfish_cli.classification import Level
from triggerfish_cli.memory.keys import storage_key
from triggerfish_cli.memory.record import MemoryRecord, parse_record
from triggerfish_cli.serialization import fast_loads

HIGHLIGHT_START, HIGHLIGHT_END = "\ue000", "\ue001"


@dataclass(frozen=True)
class SearchRequest:
    text: str
    raw: bool
    taint: Level
    agent: str | None  # None: every agent
    tag: str | None
    limit: int


@dataclass(frozen=True)
class Hit:
    record: MemoryRecord
    score: float  # higher is better (bm25, sign flipped)
    snippet: str
    highlights: tuple[tuple[int, int], ...]  # [start, end) spans of matched terms in snippet

    def as_dict(self) -> dict[str, Any]:
        record = self.record
        return {
            "agent": record.agent,
            "key": record.key,
            "level": record.level.name,
            "tags": list(record.tags),
            "updated_at": record.updated_at,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "highlights": [list(span) for span in self.highlights],
            "content": record.content,
            "storage_key": record.storage_key,
        }


@dataclass
class SearchResult:
    kind: str
    hits: list[Hit] = field(default_factory=list)
    #: index rows seen while searching that no longer match kv (skipped)
    stale: int = 0
    #: storage keys of malformed records seen while searching (visible levels only)
    malformed: list[str] = field(default_factory=list)
    #: visible memories in the search's scope that the index lacks or holds stale,
    #: searched from kv (SQLite)
    drifted: int = 0


@dataclass
class Drift:
    """How an index differs from kv, for the levels it was computed on."""

    kind: str
    levels: tuple[Level, ...]
    indexed: bool = True  # False: this backend has no index (or its tables are missing)
    tables_missing: bool = False
    records: int = 0  # live records that should be indexed
    in_sync: int = 0
    missing: int = 0  # live records without index rows
    stale: int = 0  # index rows that differ from kv
    orphaned: int = 0  # index rows for no live record
    duplicates: int = 0  # extra index rows for one record
    fixed: int = 0
    samples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def to_fix(self) -> int:
        return self.missing + self.stale + self.orphaned

    def note(self, category: str, skey: str) -> None:
        setattr(self, category, getattr(self, category) + 1)
        sample = self.samples.setdefault(category, [])
        if len(sample) < 5:
            sample.append(skey)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "levels": [level.name for level in self.levels],
            "indexed": self.indexed,
            "tables_missing": self.tables_missing,
            "records": self.records,
            "in_sync": self.in_sync,
            "missing": self.missing,
            "stale": self.stale,
            "orphaned": self.orphaned,
            "duplicates": self.duplicates,
            "fixed": self.fixed,
            "samples": self.samples,
        }


BatchCallback = Callable[[int], None]


class MemoryIndex(Protocol):
    """See the module docstring for the contract of each method."""

    kind: str

    def search(self, request: SearchRequest) -> SearchResult: ...

    def write(
        self, storage_key: str, update: Callable[[str | None], str]
    ) -> tuple[str | None, str]: ...

    def hard_delete(
        self, items: Sequence[tuple[str, str]], *, on_batch: BatchCallback | None = None
    ) -> int: ...

    def reindex(self, storage_keys: Sequence[str]) -> int: ...

    def check(self, levels: Sequence[Level], *, agent: str | None = None) -> Drift: ...

    def repair(
        self, levels: Sequence[Level], *, on_batch: BatchCallback | None = None
    ) -> Drift: ...


#: BM25's constants, and the fixed column length that stands in for its corpus average.
K1, B, REFERENCE_LENGTH = 1.2, 0.75, 16.0


def rank_score(matched: Sequence[int], lengths: Sequence[int | None]) -> float:
    """A row's score from the row alone: higher is better.

    bm25 as FTS5 computes it weighs each term by statistics over every row
    of the index (how many rows hold it, their average length), rows above
    the taint included, so a visible memory's score and order would depend
    on hidden ones. This keeps bm25's shape with neither statistic: per
    searched column (key, content, tags) that the query matches, bm25's
    term weight for one occurrence with length normalisation against a
    fixed reference length instead of the corpus average, and no IDF.
    ``matched`` says per column whether it matches (0 or 1), ``lengths``
    its token count (None: unknown, the reference).
    """
    score = 0.0
    for hit, length in zip(matched, lengths, strict=True):
        if hit:
            size = REFERENCE_LENGTH if length is None else float(length)
            score += (K1 + 1) / (1 + K1 * (1 - B + B * size / REFERENCE_LENGTH))
    return score


def column_sizes(blob: bytes | None, columns: Sequence[int]) -> list[int | None]:
    """Token counts of ``columns`` from an FTS5 ``_docsize`` blob (SQLite varints)."""
    if not blob:
        return [None] * len(columns)
    sizes: list[int] = []
    value, index = 0, 0
    data = bytes(blob)
    while index < len(data):
        byte = data[index]
        index += 1
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            sizes.append(value)
            value = 0
    return [sizes[col] if col < len(sizes) else None for col in columns]


def split_snippet(marked: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """Remove the highlight markers; return the text and the highlighted spans."""
    text: list[str] = []
    spans: list[tuple[int, int]] = []
    length = 0
    start: int | None = None
    for char in marked:
        if char == HIGHLIGHT_START:
            start = length
        elif char == HIGHLIGHT_END:
            if start is not None and length > start:
                spans.append((start, length))
            start = None
        else:
            text.append(char)
            length += 1
    return "".join(text), tuple(spans)


# -- the scan index: for backends without one ----------------------------------------


#: An index hit before it is checked: storage key, agent, level name, key, the
#: kv value it was indexed from, score (higher is better), marked snippet (or a
#: function that makes it, called only for the rows that become hits).
IndexRow = tuple[str, str, str, str, "str | None", float, "str | Callable[[], str] | None"]


def accept_rows(
    rows: Sequence[IndexRow],
    fetch: Callable[[list[str]], dict[str, str]],
    request: SearchRequest,
    levels: Sequence[Level],
    result: SearchResult,
    seen: set[str],
) -> None:
    """Add to ``result`` the rows whose kv record is the live, visible top version.

    The rules every index applies after its own match (the same as ``get``):
    the kv value must still be the one indexed and live; a live version at a
    higher visible level shadows it; the tag must be the record's own; each
    record once. ``fetch`` reads kv values in one go (``get_many``).
    """
    wanted: list[str] = []
    for _skey, agent, level_name, key, *_rest in rows:
        level = Level[level_name]
        wanted += [storage_key(agent, above, key) for above in levels if above >= level]
    values = fetch(wanted)
    loads = fast_loads()
    for skey, agent, level_name, key, indexed, score, marked in rows:
        if len(result.hits) >= request.limit:
            return
        value = values.get(skey)
        record = None if value is None else parse_record(skey, value, loads)
        if record is None:
            result.stale += 1  # kv row gone: an orphaned index row
            continue
        if not isinstance(record, MemoryRecord):
            if skey not in result.malformed:
                result.malformed.append(skey)
            continue
        if record.expired or indexed != value or (record.agent, record.key) != (agent, key):
            # kv changed since it was indexed (or the row is no record's: a ':' in its
            # agent_id makes its storage key name another record)
            result.stale += 1
            continue
        level = Level[level_name]
        if any(_live(values, agent, above, key, loads) for above in levels if above > level):
            continue  # shadowed: get returns a higher version
        if request.tag is not None and request.tag not in record.tags:
            continue
        if skey in seen:
            continue  # a duplicate index row
        seen.add(skey)
        snippet, spans = split_snippet((marked() if callable(marked) else marked) or "")
        result.hits.append(Hit(record, score, snippet, spans))


def _live(
    values: dict[str, str], agent: str, level: Level, key: str, loads: Callable[[str], Any]
) -> bool:
    skey = storage_key(agent, level, key)
    value = values.get(skey)
    if value is None:
        return False
    record = parse_record(skey, value, loads)
    return isinstance(record, MemoryRecord) and record.live
