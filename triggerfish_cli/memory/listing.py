"""``memory list``: the visible memories, with shadowing, read no further than needed."""

from __future__ import annotations

import heapq
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter

from triggerfish_cli.classification import Level
from triggerfish_cli.memory.access import audit_read, check_agent, scan_visible
from triggerfish_cli.memory.keys import storage_key, visible_levels
from triggerfish_cli.memory.record import Malformed, MemoryRecord, parse_record
from triggerfish_cli.serialization import fast_loads
from triggerfish_cli.storage.provider import StorageProvider


@dataclass
class Listing:
    records: list[MemoryRecord] = field(default_factory=list)
    malformed: list[Malformed] = field(default_factory=list)



def list_memories(
    provider: StorageProvider,
    *,
    taint: Level,
    agent: str | None,
    tag: str | None = None,
    limit: int = 0,
) -> Listing:
    """Visible memories with shadowing, by agent then key; ``tag`` filters the shown version."""
    if agent is not None:
        check_agent(agent)
    listing = _first_of_agent(provider, taint=taint, agent=agent, tag=tag, limit=limit)
    if listing is None:
        listing = _read_all(provider, taint=taint, agent=agent, tag=tag, limit=limit)
    audit_read(provider, "list", taint, len(listing.records), agent=agent or "*", tag=tag)
    return listing


def _first_of_agent(
    provider: StorageProvider, *, taint: Level, agent: str | None, tag: str | None, limit: int
) -> Listing | None:
    """The first ``limit`` memories of one agent, reading no further than needed.

    A merge, by key, of the agent's range at each visible level (each range
    is in key order), with the shadowing of :func:`_read_all`: for each key
    the highest visible live well-formed version. It stops at the first row
    past the key of the ``limit``-th memory, so the malformed records it
    names are those up to that key (sorted by storage key). None when there
    is no limit, no single agent, or when the ranges run out before the
    limit: then the caller reads everything (and names every malformed
    record, as without a limit).
    """
    if not limit or agent is None:
        return None
    loads = fast_loads()

    def level_range(level: Level) -> Generator[tuple[str, str, str], None, None]:
        prefix = storage_key(agent, level, "")
        cut = len(prefix)
        # limit + 1 rows: the row after the last memory shown ends the merge
        # without a second query.
        for skey, value in provider.scan(prefix, batch_size=min(limit + 1, 2000)):
            yield skey[cut:], skey, value

    levels = visible_levels(taint)
    listing = Listing()
    if len(levels) == 1:  # one range, one version per key: no merge, no shadowing
        prefix = storage_key(agent, levels[0], "")
        records, malformed = listing.records, listing.malformed
        # A first page of limit rows (all shown unless some are expired, malformed or
        # without the tag) in one query; then the rest of the range, if needed.

        def fill(rows: Iterable[tuple[str, str]]) -> bool:
            """Add the shown ones of ``rows``; whether the limit is reached."""
            for skey, value in rows:
                item = parse_record(skey, value, loads)
                if isinstance(item, Malformed):
                    malformed.append(item)
                elif not item.expired and (tag is None or tag in item.tags):
                    records.append(item)
                    if len(records) == limit:
                        return True
            return False

        page = provider.head(prefix, limit)
        if len(page) < limit:
            return None  # the range runs out before the limit
        if fill(page):
            return listing
        rest = provider.scan(prefix, start_after=page[-1][0], batch_size=min(limit, 2000))
        try:  # some of the page are not shown: read on
            return listing if fill(rest) else None
        finally:
            rest.close()  # type: ignore[attr-defined]
    ranges = [level_range(level) for level in levels]
    merged = heapq.merge(*ranges, key=itemgetter(0))
    current: str | None = None
    best: MemoryRecord | None = None
    try:
        for key, skey, value in merged:
            if key != current:
                if best is not None and (tag is None or tag in best.tags):
                    listing.records.append(best)
                    if len(listing.records) == limit:
                        listing.malformed.sort(key=attrgetter("storage_key"))
                        return listing
                current, best = key, None
            item = parse_record(skey, value, loads)
            if isinstance(item, Malformed):
                listing.malformed.append(item)
            elif not item.expired and (best is None or item.level > best.level):
                best = item
    finally:
        for level_rows in ranges:
            level_rows.close()
    return None  # the ranges ran out before the limit


def _read_all(
    provider: StorageProvider, *, taint: Level, agent: str | None, tag: str | None, limit: int
) -> Listing:
    best: dict[tuple[str, str], MemoryRecord] = {}
    listing = Listing()
    for item in scan_visible(provider, taint=taint, agent=agent):
        if isinstance(item, Malformed):
            listing.malformed.append(item)
            continue
        if item.expired:
            continue
        seen = best.get((item.agent, item.key))
        if seen is None or item.level > seen.level:
            best[(item.agent, item.key)] = item
    records = [best[pair] for pair in sorted(best)]
    if tag is not None:
        records = [record for record in records if tag in record.tags]
    listing.records = records[:limit] if limit else records
    return listing


