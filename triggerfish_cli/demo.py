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
give the same bytes.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from triggerfish_cli.demo_conversations import Session, Writer
from triggerfish_cli.errors import RefusedError, UsageError
from triggerfish_cli.namespaces import group_of
from triggerfish_cli.progress import Reporter
from triggerfish_cli.serialization import dumps, to_iso
from triggerfish_cli.storage.provider import StorageProvider

LEVELS = ("PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED")
LEVEL_WEIGHTS = (40, 30, 20, 10)
CHANNELS = ("telegram", "slack", "discord", "webchat", "email", "signal")
WEBHOOK_SOURCES = ("github", "stripe", "uptime")
#: Version of the generator's output: bench stores built by another are stale.
GENERATOR = 2

_WORDS = (
    "the agent user project deploy server database backup meeting invoice customer "
    "report schedule reminder weekly daily monthly budget contract review design "
    "prototype release version migration cluster kubernetes docker postgres redis "
    "search index memory session token channel message webhook trigger workflow "
    "pipeline analysis summary draft email calendar travel flight hotel dinner lunch "
    "coffee tea garden running cycling music podcast book article paper research "
    "experiment result metric latency throughput error warning incident postmortem "
    "roadmap quarter goal milestone feature bug fix patch upgrade security audit "
    "compliance policy retention lineage classification public internal confidential "
    "restricted alice bob carol dave erin frank oslo amsterdam berlin london tokyo "
    "acme globex initech umbrella stark wayne prefers likes dislikes needs wants "
    "asked said remembered noted decided always never usually sometimes morning "
    "evening night weekend holiday birthday anniversary family friend colleague "
    "manager team office home stack frontend backend api cli terminal shell script "
    "cron job queue "
).split()

_MEMORY_KEYS = (
    "user-name",
    "user-email",
    "timezone",
    "preferred-language",
    "pref:theme",
    "pref:editor",
    "trigger:instructions",
    "project-acme-stack",
    "home-city",
    "work-hours",
    "favourite-food",
    "team-members",
    "deploy-checklist",
    "standup-notes",
    "travel-plans",
    "reading-list",
)


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


class _Gen:
    """Deterministic generator of gateway-shaped records."""

    def __init__(self, seed: int, now: datetime, days: int) -> None:
        self.rng = random.Random(seed)
        self.now = now
        self.span = max(1, days) * 86400.0
        rng = self.rng
        self.sentences = [
            " ".join(rng.choices(_WORDS, k=rng.randint(6, 18))).capitalize() + "."
            for _ in range(4000)
        ]

    def uuid(self) -> str:
        bits = self.rng.getrandbits(128)
        bits = (bits & ~(0xF000 << 64)) | (0x4000 << 64)  # version 4
        bits = (bits & ~(0xC000 << 48)) | (0x8000 << 48)  # RFC 4122 variant
        text = f"{bits:032x}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"

    def cache_id(self) -> str:
        return f"{self.rng.getrandbits(24):06x}"

    def word(self) -> str:
        return self.rng.choice(_WORDS)

    def moment(self, after: datetime | None = None, within: float | None = None) -> datetime:
        if after is None:
            return self.now - timedelta(seconds=self.rng.random() * self.span)
        limit = (self.now - after).total_seconds()
        offset = self.rng.random() * min(limit, within if within is not None else limit)
        return after + timedelta(seconds=max(0.0, offset))

    def text(self, low: int, high: int) -> str:
        return " ".join(self.rng.choices(self.sentences, k=self.rng.randint(low, high)))

    def level(self) -> str:
        return self.rng.choices(LEVELS, weights=LEVEL_WEIGHTS)[0]


def _quota(records: int, share: float, minimum: int = 1) -> int:
    return max(minimum, int(records * share))


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


Rows = list[tuple[str, str]]
FtsRows = list[tuple[str, str, str, str, str]]
MetaRows = list[tuple[str, str, str, str]]


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
    g = _Gen(seed, anchor, days)
    rng = g.rng
    rows: Rows = []
    fts: FtsRows = []
    meta: MetaRows = []
    owner = g.uuid()

    # Owner sessions: ids and times now, records once their conversations are known.
    main = Session(g.uuid(), anchor - timedelta(seconds=g.span), anchor, channel="webchat")
    sessions = [main]
    for _ in range(_quota(records, 0.05) - 1):
        sessions.append(Session(g.uuid(), g.moment(), anchor, channel=rng.choice(CHANNELS)))
    rows.append(("main-session-id", dumps({"id": main.sid, "createdAt": to_iso(main.created)})))
    rows.append(("prefs:owner:bumpers_default", "true"))
    rows.append(("browser:profile:main-session:watermark", "CONFIDENTIAL"))
    rows.append(("todos:main-session", dumps({"todos": [_todo(g) for _ in range(3)]})))

    runs = _cron_and_runs(g, records, rows)
    _pairing(g, records, rows)
    _workflows(g, records, rows)

    # What is written after the conversations, reserved now.
    count = _quota(records, 0.08) if memories is None else memories
    notes = _quota(records, 0.02)
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
        rows.append((f"sessions:{session.sid}", _session_record(g, session, owner)))
    for channel in channels:
        current = max((s for s in sessions if s.channel == channel), key=lambda s: s.created)
        value = {"id": current.sid, "createdAt": to_iso(current.created)}
        rows.append((f"session-id:{channel}", dumps(value)))
    for run in runs:
        if run.sid in todo_runs:
            rows.append(writer.todos(run))
    for source in sources:
        newest = max((run for run in runs if run.source == source), key=lambda r: r.created)
        rows.append(_trigger_result(g, newest))

    texts = _zipf_texts(seed, memory_words) if memory_words else None
    rows.extend(_memories(g, count, sessions, runs, fts, meta, texts))

    for _ in range(notes):
        rows.append(_notification(g, owner, runs))
    while len(rows) < records:  # lineage-hash keys that coincided, a counter that did not fit
        rows.append(_notification(g, owner, runs))
    del rows[records:]  # only tiny stores: the fixed records alone outgrow them
    rng.shuffle(rows)  # the gateway writes in time order, not key order
    return rows, fts, meta


def _todo(g: _Gen) -> dict[str, Any]:
    created = g.moment()
    return {
        "id": g.uuid(),
        "content": g.text(1, 1),
        "status": g.rng.choice(["pending", "in_progress", "completed"]),
        "priority": g.rng.choice(["low", "medium", "high"]),
        "created_at": to_iso(created),
        "updated_at": to_iso(g.moment(created)),
    }


def _session_record(g: _Gen, session: Session, owner: str) -> str:
    return dumps(
        {
            "id": session.sid,
            "userId": owner,
            "channelId": session.channel,
            "taint": session.taint,
            "createdAt": to_iso(session.created),
            "history": session.history,
            "bumpersEnabled": g.rng.random() < 0.8,
        }
    )


def _cron_and_runs(g: _Gen, records: int, rows: Rows) -> list[Session]:
    """Cron jobs with their history, and the scheduler runs (cron, trigger, webhooks)."""
    rng = g.rng
    wanted = _quota(records, 0.015)
    cron_runs: list[Session] = []
    for _ in range(_quota(records, 0.0005, 2)):
        jid = g.uuid()
        created = g.moment()
        task = g.text(1, 2)
        rows.append(
            (
                f"cron:{jid}",
                dumps(
                    {
                        "id": jid,
                        "expression": rng.choice(["0 9 * * *", "*/15 * * * *", "0 0 * * 1"]),
                        "task": task,
                        "classificationCeiling": g.level(),
                        "createdAt": to_iso(created),
                        "enabled": True,  # a removed job is deleted, never disabled
                    }
                ),
            )
        )
        history = []
        for _run in range(rng.randint(1, 100)):
            started = g.moment(created)
            duration = rng.randint(50, 90000)
            ended = min(g.now, started + timedelta(milliseconds=duration))
            entry: dict[str, Any] = {
                "jobId": jid,
                "executedAt": to_iso(ended),
                "durationMs": duration,
                "success": rng.random() < 0.9,
            }
            if not entry["success"]:
                entry["error"] = "timeout after 90000ms"
            history.append(entry)
            run = Session(g.uuid(), started, ended, agent=f"scheduler-cron-{_millis(started)}")
            run.source, run.task, run.succeeded = f"cron:{jid}", task, entry["success"]
            cron_runs.append(run)
        history.sort(key=lambda item: str(item["executedAt"]))
        rows.append((f"cron-history:{jid}", dumps(history)))
    picked = rng.sample(cron_runs, min(len(cron_runs), max(1, wanted * 7 // 10)))
    runs = sorted(picked, key=lambda run: run.created)
    for index in range(max(1, wanted - len(runs))):
        started = g.moment()
        ended = min(g.now, started + timedelta(seconds=rng.uniform(5, 120)))
        if index % 3 == 0:
            run = Session(g.uuid(), started, ended, agent=f"scheduler-trigger-{_millis(started)}")
            run.source, run.task = "trigger", "Check the inbox and the calendar. " + g.text(1, 2)
        else:
            source = rng.choice(WEBHOOK_SOURCES)
            event = rng.choice(["push", "issue.opened", "payment.succeeded", "check.failed"])
            payload = dumps({"event": event, "data": {"id": g.uuid(), "note": g.text(1, 1)}})
            run = Session(
                g.uuid(), started, ended, agent=f"scheduler-webhook-{source}-{_millis(started)}"
            )
            run.source = f"webhook:{source}"
            run.task = f"Webhook event from {source}: {event}\n\nPayload:\n{payload}"
        runs.append(run)
    return runs


def _trigger_result(g: _Gen, run: Session) -> tuple[str, str]:
    """``trigger:last:<source>``: the newest run's output (its error when it failed)."""
    message = run.reply or ("NO_ACTION" if run.succeeded else "timeout after 90000ms")
    value = {
        "id": g.uuid(),
        "source": run.source,
        "message": message,
        "classification": run.taint,
        "firedAt": to_iso(run.last_time or run.created),
    }
    return f"trigger:last:{run.source}", dumps(value)


def _pairing(g: _Gen, records: int, rows: Rows) -> None:
    """Pairing codes, mostly past their expiresAt, one pending; linked accounts."""
    rng = g.rng
    for index in range(_quota(records, 0.001)):
        channel = rng.choice(CHANNELS)
        code = f"{rng.randint(0, 999999):06d}"
        pending = index == 0 and records >= 200
        expires = (
            g.now + timedelta(seconds=rng.uniform(30, 600))
            if pending
            else g.moment() + timedelta(minutes=10)
        )
        value = dumps(
            {
                "code": code,
                "channelType": channel,
                "expiresAt": to_iso(min(expires, g.now) if not pending else expires),
                "used": False if pending else rng.random() < 0.7,
            }
        )
        rows.append((f"pairing:{channel}:{code}", value))
        if pending:
            rows.append((f"pairing:pending:{channel}", value))
        user = str(rng.randint(10**8, 10**9))
        rows.append(
            (
                f"pairing:linked:{channel}:{user}",
                dumps(
                    {"channelType": channel, "platformUserId": user, "linkedAt": to_iso(g.moment())}
                ),
            )
        )


def _workflows(g: _Gen, records: int, rows: Rows) -> None:
    """Teams, workflow definitions with their versions, and workflow runs."""
    rng = g.rng
    for _ in range(_quota(records, 0.0005)):
        tid = g.uuid()
        rows.append(
            (
                f"team:{tid}",
                dumps(
                    {
                        "id": tid,
                        "name": g.word() + "-team",
                        "members": [g.uuid() for _ in range(3)],
                        "createdAt": to_iso(g.moment()),
                        "status": rng.choice(["active", "disbanded"]),
                    }
                ),
            )
        )
    names = []
    for index in range(_quota(records, 0.0005)):
        name = f"{g.word()}-{index}"
        names.append(name)
        level = g.level()
        definition = f"name: {name}\nsteps:\n  - run: {g.word()}\n"
        saved = g.moment()
        stored: dict[str, Any] = {
            "name": name,
            "yaml": definition,
            "classification": level,
            "savedAt": to_iso(saved),
        }
        if rng.random() < 0.5:
            stored["description"] = g.text(1, 1)
        rows.append((f"workflows:{name}", dumps(stored)))
        proposed = g.moment()
        versions = rng.randint(0 if index else 1, 3)
        for number in range(1, versions + 1):
            source = rng.choice(["human", "self_healing"])
            version: dict[str, Any] = {
                "versionId": g.uuid(),
                "workflowName": name,
                "agentId": "main-session",
                "versionNumber": number,
                "definition": definition + f"  - run: {g.word()}\n",
                "diff": f"+  - run: {g.word()}",
                "status": "PROPOSED",
                "source": source,
                "authorReasoning": g.text(1, 1),
            }
            if source == "self_healing":
                version["runId"] = g.uuid()
            version["proposedAt"] = to_iso(proposed)
            if number < versions or rng.random() < 0.6:  # the last may still be open
                resolved = g.moment(proposed, 3 * 86400)
                status, by = rng.choice(
                    [
                        ("APPROVED", "owner"),
                        ("REJECTED", "owner: not needed"),
                        ("SUPERSEDED", "system"),
                    ]
                )
                version.update(status=status, resolvedAt=to_iso(resolved), resolvedBy=by)
                proposed = g.moment(resolved)
            rows.append(
                (
                    f"workflow-versions:{name}:{version['versionId']}",
                    dumps({"version": version, "classification": level}),
                )
            )
    for _ in range(_quota(records, 0.005)):
        run_id = g.uuid()
        started = g.moment()
        status = rng.choices(["completed", "failed", "cancelled"], weights=[85, 10, 5])[0]
        run: dict[str, Any] = {  # saved once the run has ended
            "runId": run_id,
            "workflowName": rng.choice(names),
            "status": status,
            "startedAt": to_iso(started),
            "completedAt": to_iso(g.moment(started, 3600)),
        }
        rows.append((f"workflow-runs:{run_id}", dumps(run)))


def _notification(g: _Gen, owner: str, runs: list[Session]) -> tuple[str, str]:
    """An undelivered notification: a scheduler run's output, or another of the owner's."""
    nid = g.uuid()
    run = g.rng.choice(runs) if runs and g.rng.random() < 0.5 else None
    note: dict[str, Any] = {"id": nid, "userId": owner}
    if run is not None:
        note["message"] = f"[{run.source}] {run.reply or g.text(1, 2)}"
        note["priority"] = "normal"
        note["classification"] = run.taint
        note["createdAt"] = to_iso(run.last_time or run.created)
    else:
        note["message"] = g.text(1, 3)
        note["priority"] = g.rng.choice(["low", "normal", "high"])
        if g.rng.random() < 0.6:
            note["classification"] = g.level()
        note["createdAt"] = to_iso(g.moment())
    return f"notifications:{owner}:{nid}", dumps(note)


_SCHEDULER_KEYS = ("digest", "inbox-summary", "daily-brief", "open-issues", "last-alert")


def _memories(
    g: _Gen,
    count: int,
    sessions: list[Session],
    runs: list[Session],
    fts: FtsRows,
    meta: MetaRows,
    texts: Callable[[], str] | None = None,
) -> Rows:
    rng = g.rng
    rows: Rows = []
    seen: set[str] = set()
    traced = [run for run in runs if run.lineage]
    with_lineage = [s for s in sessions if s.lineage] or sessions
    while len(rows) < count:
        run = rng.choice(traced) if traced and rng.random() < 0.25 else None
        if run is not None:
            agent = run.agent
            key = rng.choice(_SCHEDULER_KEYS) if rng.random() < 0.5 else f"note-{len(rows)}"
            level = run.taint
            created = run.created + (run.latest - run.created) * rng.random()
            updated = created
            source, lineage = run.sid, rng.choice(run.lineage)
        else:
            agent = "main-session"
            if rng.random() < 0.3:
                key = rng.choice(_MEMORY_KEYS)
            else:
                key = f"note-{rng.randint(0, max(10, count * 2))}"
            level = g.level()
            created = g.moment()
            updated = g.moment(created)
            session = rng.choice(with_lineage)
            source = session.sid
            lineage = rng.choice(session.lineage) if session.lineage and rng.random() < 0.6 else ""
        storage_key = f"memory:{agent}:{level}:{key}"
        if storage_key in seen:
            continue
        seen.add(storage_key)
        expired = rng.random() < 0.05
        tags = rng.sample(
            ["persona", "work", "travel", "prefs", "project", "health"], k=rng.randint(0, 2)
        )
        record: dict[str, Any] = {
            "key": key,
            "agentId": agent,
            "classification": level,
            "content": texts() if texts else g.text(1, 6),
            "tags": tags,
            "createdAt": to_iso(created),
            "updatedAt": to_iso(updated),
            "expired": expired,
            "sourceSessionId": source,
        }
        if lineage:
            record["lineageId"] = lineage
        value = dumps(record)
        rows.append((storage_key, value))
        if expired or agent.startswith("scheduler-"):
            continue  # soft-deleted or written by a scheduler run: never indexed
        indexed = value
        if rng.random() < 0.02:  # edited in kv alone: the index is stale
            stale = dict(record, content=g.text(1, 2), updatedAt=to_iso(created))
            indexed = dumps(stale)
            record = stale
        fts.append((agent, level, key, str(record["content"]), " ".join(tags)))
        meta.append((agent, level, key, indexed))
    return rows


_SYLLABLES = (
    "ka lo mi ter van dor sel bri qua nem ost ril pa fen gus tho wy zel cam dru "
    "el ix or un ast bel cor dim fal gor hin jul kem lun mar nor pil ros sut vor"
).split()


def _zipf_texts(seed: int, words: int) -> Callable[[], str]:
    """A maker of texts of about ``words`` words with a Zipf word distribution.

    The vocabulary is the demo's words followed by 20,000 made-up ones; the
    word of rank r is drawn with weight 1/r. Its own random stream leaves
    the rest of the store as it is without this option.
    """
    rng = random.Random(seed * 7919 + 17)
    vocabulary = list(_WORDS)
    known = set(vocabulary)
    while len(vocabulary) < len(_WORDS) + 20_000:
        word = "".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4)))
        if word not in known:
            known.add(word)
            vocabulary.append(word)
    cumulative = list(itertools.accumulate(1.0 / rank for rank in range(1, len(vocabulary) + 1)))
    sentences = []
    for _ in range(20_000):
        chosen = rng.choices(vocabulary, cum_weights=cumulative, k=rng.randint(6, 18))
        sentences.append(" ".join(chosen).capitalize() + ".")

    def make() -> str:
        target = rng.randint(words * 4 // 5, words * 6 // 5)
        parts: list[str] = []
        length = 0
        while length < target:
            sentence = rng.choice(sentences)
            parts.append(sentence)
            length += sentence.count(" ") + 1
        return " ".join(parts)

    return make


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
    from triggerfish_cli.progress import SILENT

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
