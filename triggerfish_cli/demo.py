"""A realistic store to try the tool on: written exactly as the gateway writes.

``build_demo`` produces the key and value shapes of ``UPSTREAM.md``, record
for record: lowercase UUID v4 ids, compact ``JSON.stringify`` values with the
gateway's field order, ``...Z`` millisecond times spread over the last
``days`` days, bare-string values where the gateway writes them.

- Owner sessions (the main one is the oldest) with their conversations,
  numbered from 0 (:mod:`triggerfish_cli.demo_conversations`): user and
  assistant messages, ``tool_call`` messages each with its lineage record
  and index keys, ``compaction_summary`` messages in long sessions; the
  session's taint and history follow the tools' data. ``session-id:<channel>``
  names each channel's current session.
- Scheduler runs: cron jobs (``cron:``, ``cron-history:`` of up to 100 runs),
  the periodic trigger and webhooks. Each run has a fresh session id and no
  ``sessions:`` record, its own messages and lineage keys, sometimes a
  ``todos:scheduler-<channel>-<ms>`` list and memories of agent
  ``scheduler-<channel>-<ms>`` (with a ``lineageId``); the newest run of each
  source is ``trigger:last:<source>``, its output an undelivered
  notification.
- Memories in kv and (on SQLite) in ``memory_fts`` and ``memory_meta``, with
  the gateway's real gaps: scheduler agents' memories are in kv only,
  soft-deleted ones are only in kv, and a few index rows are stale.
- Pairing codes (mostly expired, one pending with an ``expiresAt`` ahead) and
  linked accounts, teams, workflows with their versions and runs,
  preferences and the browser watermark.

Not written, as on a real store: ``delegation:`` (not wired in the gateway
yet), ``healthcheck:test`` (deleted at once), and the design-only ``taint:``,
``audit:``, ``exec:``, ``skills:``, ``config:v<N>``.

It is deterministic: the same seed, record count, day span and anchor time
give the same bytes. The records are made by :mod:`triggerfish_cli.demo_records`
and :mod:`triggerfish_cli.demo_conversations`, from the random source of
:mod:`triggerfish_cli.demo_random`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from triggerfish_cli import demo_records
from triggerfish_cli.demo_conversations import Session, Writer
from triggerfish_cli.demo_random import Gen, quota, zipf_texts
from triggerfish_cli.demo_records import CHANNELS, FtsRows, MetaRows, Rows
from triggerfish_cli.errors import RefusedError, UsageError
from triggerfish_cli.namespaces import group_of
from triggerfish_cli.progress import SILENT, Reporter
from triggerfish_cli.serialization import dumps, to_iso
from triggerfish_cli.storage.provider import StorageProvider

#: Version of the generator's output: bench stores built by another are stale.
GENERATOR = 2


@dataclass
class DemoSummary:
    records: int = 0
    seed: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    memories_indexed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "seed": self.seed,
            "namespaces": dict(sorted(self.counts.items())),
            "memories_indexed": self.memories_indexed,
        }



def generate(
    records: int,
    *,
    seed: int = 0,
    now: datetime | None = None,
    days: int = 400,
    memories: int | None = None,
    memory_words: int | None = None,
) -> tuple[Rows, FtsRows, MetaRows]:
    """``(kv rows, memory_fts rows, memory_meta rows)`` for a store of ``records`` keys.

    ``memories`` (at most half of ``records``) sets the number of memory
    records instead of 8%; ``memory_words`` gives each memory about that many
    words, drawn from a large vocabulary with a Zipf distribution as natural
    text is, instead of a few short sentences. Without them the output is
    unchanged.
    """
    if memories is not None and not 0 <= memories <= records // 2:
        raise UsageError(f"memories must be between 0 and half the records ({records // 2})")
    anchor = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    g = Gen(seed, anchor, days)
    rng = g.rng
    rows: Rows = []
    fts: FtsRows = []
    meta: MetaRows = []
    owner = g.uuid()

    # Owner sessions: ids and times now, records once their conversations are known.
    main = Session(g.uuid(), anchor - timedelta(seconds=g.span), anchor, channel="webchat")
    sessions = [main]
    for _ in range(quota(records, 0.05) - 1):
        sessions.append(Session(g.uuid(), g.moment(), anchor, channel=rng.choice(CHANNELS)))
    rows.append(("main-session-id", dumps({"id": main.sid, "createdAt": to_iso(main.created)})))
    rows.append(("prefs:owner:bumpers_default", "true"))
    rows.append(("browser:profile:main-session:watermark", "CONFIDENTIAL"))
    rows.append(("todos:main-session", dumps({"todos": [demo_records.todo(g) for _ in range(3)]})))

    runs = demo_records.cron_and_runs(g, records, rows)
    demo_records.pairing(g, records, rows)
    demo_records.workflows(g, records, rows)

    # What is written after the conversations, reserved now.
    count = quota(records, 0.08) if memories is None else memories
    notes = quota(records, 0.02)
    channels = sorted({s.channel for s in sessions})
    sources = sorted({run.source for run in runs})
    todo_runs = {run.sid for run in runs if rng.random() < 0.3}
    reserved = count + notes + len(sessions) + len(channels) + len(sources) + len(todo_runs)

    writer = Writer(g, owner, rows)
    budget = records - len(rows) - reserved
    for run in runs:
        planned, used = writer.plan(run, budget)
        writer.write(run, planned)
        budget -= used
    # A few long sessions, many short ones; the main session alone has a twentieth.
    weights = [rng.paretovariate(1.3) for _ in sessions]
    weights[0] = sum(weights[1:]) / 19 if len(weights) > 1 else 1.0
    total = sum(weights)
    floor = 3 if budget >= 3 * len(sessions) else 0  # a counter, a question and its answer
    spread = budget - floor * len(sessions)
    left, cumulative, given = 0, 0.0, 0
    for index in [*range(1, len(sessions)), 0]:  # the main session last: it takes what is left
        cumulative += weights[index]
        share = round(spread * cumulative / total) - given
        given += share
        planned, used = writer.plan(sessions[index], floor + share + left)
        writer.write(sessions[index], planned)
        left = floor + share + left - used
    for session in sessions:
        rows.append((f"sessions:{session.sid}", demo_records.session_record(g, session, owner)))
    for channel in channels:
        current = max((s for s in sessions if s.channel == channel), key=lambda s: s.created)
        value = {"id": current.sid, "createdAt": to_iso(current.created)}
        rows.append((f"session-id:{channel}", dumps(value)))
    for run in runs:
        if run.sid in todo_runs:
            rows.append(writer.todos(run))
    for source in sources:
        newest = max((run for run in runs if run.source == source), key=lambda r: r.created)
        rows.append(demo_records.trigger_result(g, newest))

    texts = zipf_texts(seed, memory_words) if memory_words else None
    rows.extend(demo_records.memories(g, count, sessions, runs, fts, meta, texts))

    for _ in range(notes):
        rows.append(demo_records.notification(g, owner, runs))
    while len(rows) < records:  # lineage-hash keys that coincided, a counter that did not fit
        rows.append(demo_records.notification(g, owner, runs))
    del rows[records:]  # only tiny stores: the fixed records alone outgrow them
    rng.shuffle(rows)  # the gateway writes in time order, not key order
    return rows, fts, meta



def build_demo(
    provider: StorageProvider,
    *,
    records: int,
    seed: int = 0,
    now: datetime | None = None,
    days: int = 400,
    memories: int | None = None,
    memory_words: int | None = None,
    progress: Reporter | None = None,
) -> DemoSummary:
    """Fill an empty store with ``records`` gateway-shaped keys (see :func:`generate`).

    ``progress`` is told the phases: generating, then writing (with the key count).
    """
    progress = progress or SILENT
    if provider.count() > 0:
        raise RefusedError(
            f"{provider.describe()} already holds data; demo create only fills an empty store",
            hint="use another --db path",
        )
    progress.phase("generating")
    rows, fts, meta = generate(
        records, seed=seed, now=now, days=days, memories=memories, memory_words=memory_words
    )
    summary = DemoSummary(records=len(rows), seed=seed)
    for key, _value in rows:
        group = group_of(key)
        summary.counts[group] = summary.counts.get(group, 0) + 1
    progress.phase("writing", len(rows), unit="keys")
    summary.memories_indexed = provider.fill(_reported(rows, progress), fts, meta)
    return summary


def _reported(rows: list[tuple[str, str]], progress: Reporter) -> Iterator[tuple[str, str]]:
    for start in range(0, len(rows), 5000):
        yield from rows[start : start + 5000]
        progress.advance(len(rows[start : start + 5000]))
