"""A realistic store to try the tool on: written exactly as the gateway writes.

``build_demo`` produces the key and value shapes of ``UPSTREAM.md``: lowercase
UUID v4 ids, compact ``JSON.stringify`` values, ``...Z`` millisecond times
spread over the last ``days`` days, bare-string values where the gateway
writes them, memory records in kv and (on SQLite) in ``memory_fts`` and
``memory_meta``, with the gateway's real gaps: memories of scheduler agents
(cron and webhook runs) are in kv only, soft-deleted ones are only in kv,
and a few index rows are stale.

It is deterministic: the same seed, record count, day span and anchor time
give the same bytes.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from triggerfish_cli.errors import RefusedError, UsageError
from triggerfish_cli.namespaces import group_of
from triggerfish_cli.serialization import dumps, to_iso
from triggerfish_cli.storage.provider import StorageProvider

LEVELS = ("PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED")
LEVEL_WEIGHTS = (40, 30, 20, 10)
CHANNELS = ("telegram", "slack", "discord", "webchat", "email", "signal")

# The gateway's memory search tables, exactly as it creates them.
MEMORY_FTS_SQL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5("
    "agent_id, classification, key, content, tags, tokenize='porter unicode61')"
)
MEMORY_META_SQL = (
    "CREATE TABLE IF NOT EXISTS memory_meta ("
    "agent_id TEXT NOT NULL, classification TEXT NOT NULL, key TEXT NOT NULL, "
    "record_json TEXT NOT NULL, PRIMARY KEY (agent_id, classification, key))"
)

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


def generate(
    records: int,
    *,
    seed: int = 0,
    now: datetime | None = None,
    days: int = 400,
    memories: int | None = None,
    memory_words: int | None = None,
) -> tuple[
    list[tuple[str, str]], list[tuple[str, str, str, str, str]], list[tuple[str, str, str, str]]
]:
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
    rows: list[tuple[str, str]] = []
    fts: list[tuple[str, str, str, str, str]] = []
    meta: list[tuple[str, str, str, str]] = []

    main_id = g.uuid()
    owner = g.uuid()
    first = g.moment()
    rows.append(("main-session-id", dumps({"id": main_id, "createdAt": to_iso(first)})))
    rows.append(("prefs:owner:bumpers_default", "true"))
    rows.append(("browser:profile:main-session:watermark", "CONFIDENTIAL"))
    rows.append(
        (
            "todos:main-session",
            dumps(
                {
                    "todos": [
                        {
                            "id": g.uuid(),
                            "content": g.text(1, 1),
                            "status": rng.choice(["pending", "done"]),
                            "priority": rng.choice(["low", "medium", "high"]),
                            "created_at": to_iso(g.moment()),
                            "updated_at": to_iso(g.moment()),
                        }
                        for _ in range(3)
                    ]
                }
            ),
        )
    )

    # Sessions, their conversation messages and sequence counters.
    sessions = []
    for _ in range(_quota(records, 0.08)):
        sid = g.uuid()
        created = g.moment()
        taint = g.level()
        history = []
        previous = "PUBLIC"
        for _step in range(rng.randint(0, 3)):
            stamp = g.moment(created, 86400)
            new = g.level()
            history.append(
                {
                    "timestamp": to_iso(stamp),
                    "previousLevel": previous,
                    "newLevel": new,
                    "reason": g.text(1, 1)[:60],
                }
            )
            previous = new
        rows.append(
            (
                f"sessions:{sid}",
                dumps(
                    {
                        "id": sid,
                        "userId": owner,
                        "channelId": rng.choice(CHANNELS),
                        "taint": taint,
                        "createdAt": to_iso(created),
                        "history": history,
                        "bumpersEnabled": rng.random() < 0.8,
                    }
                ),
            )
        )
        sessions.append((sid, created))

    # Lineage records and their three kinds of index keys.
    lineage_ids: list[str] = []
    lineage_block: list[tuple[str, str]] = []
    for _ in range(_quota(records, 0.06)):
        lid = g.uuid()
        sid, created = rng.choice(sessions)
        content_hash = hashlib.sha256(f"{seed}:{lid}".encode()).hexdigest()
        accessed = g.moment(created, 7 * 86400)
        lineage_block.append(
            (
                f"lineage:{lid}",
                dumps(
                    {
                        "lineage_id": lid,
                        "content_hash": content_hash,
                        "origin": {
                            "source_type": rng.choice(["web", "file", "tool", "email"]),
                            "source_name": rng.choice(_WORDS) + ".example.com",
                            "accessed_at": to_iso(accessed),
                            "accessed_by": main_id,
                            "access_method": rng.choice(["fetch", "read", "search"]),
                        },
                        "classification": {"level": g.level(), "reason": g.text(1, 1)[:80]},
                        "sessionId": sid,
                    }
                ),
            )
        )
        lineage_block.append((f"lineage-session:{sid}:{lid}", lid))
        lineage_block.append((f"lineage-hash:{content_hash}", lid))
        if lineage_ids and rng.random() < 0.25:
            parent = rng.choice(lineage_ids)
            lineage_block.append((f"lineage-fwd:{parent}:{lid}", lid))
        lineage_ids.append(lid)
    rows.extend(lineage_block)

    # Persistent memories (see the module docstring for the gaps).
    texts = _zipf_texts(seed, memory_words) if memory_words else None
    count = _quota(records, 0.08) if memories is None else memories
    memory_rows = _memories(g, count, main_id, fts, meta, texts)
    rows.extend(memory_rows)

    # Cron jobs and their run history.
    for _ in range(_quota(records, 0.0005, 2)):
        jid = g.uuid()
        created = g.moment()
        rows.append(
            (
                f"cron:{jid}",
                dumps(
                    {
                        "id": jid,
                        "expression": rng.choice(["0 9 * * *", "*/15 * * * *", "0 0 * * 1"]),
                        "task": g.text(1, 2),
                        "classificationCeiling": g.level(),
                        "createdAt": to_iso(created),
                        "enabled": rng.random() < 0.9,
                    }
                ),
            )
        )
        runs = []
        for _run in range(rng.randint(1, 100)):
            entry: dict[str, Any] = {
                "jobId": jid,
                "executedAt": to_iso(g.moment(created)),
                "durationMs": rng.randint(50, 90000),
                "success": rng.random() < 0.9,
            }
            if not entry["success"]:
                entry["error"] = "timeout after 90000ms"
            runs.append(entry)
        runs.sort(key=lambda run: run["executedAt"])
        rows.append((f"cron-history:{jid}", dumps(runs)))

    for source in ("cron", "webhook", "email", "calendar")[: max(1, min(4, records // 200))]:
        rows.append(
            (
                f"trigger:last:{source}",
                dumps(
                    {
                        "id": g.uuid(),
                        "source": source,
                        "message": g.text(1, 2),
                        "classification": g.level(),
                        "firedAt": to_iso(g.moment()),
                    }
                ),
            )
        )

    for _ in range(_quota(records, 0.02)):
        rows.append(_notification(g, owner))

    for _ in range(_quota(records, 0.001)):
        channel = rng.choice(CHANNELS)
        code = f"{rng.randint(0, 999999):06d}"
        rows.append(
            (
                f"pairing:{channel}:{code}",
                dumps(
                    {
                        "code": code,
                        "channelType": channel,
                        "expiresAt": to_iso(g.moment() + timedelta(minutes=10)),
                        "used": rng.random() < 0.5,
                    }
                ),
            )
        )
        rows.append(
            (
                f"pairing:linked:{channel}:{g.uuid()}",
                dumps(
                    {
                        "channelType": channel,
                        "platformUserId": str(rng.randint(10**8, 10**9)),
                        "linkedAt": to_iso(g.moment()),
                    }
                ),
            )
        )

    for _ in range(_quota(records, 0.0005)):
        tid = g.uuid()
        rows.append(
            (
                f"team:{tid}",
                dumps(
                    {
                        "id": tid,
                        "name": rng.choice(_WORDS) + "-team",
                        "members": [g.uuid() for _ in range(3)],
                        "createdAt": to_iso(g.moment()),
                        "status": rng.choice(["active", "disbanded"]),
                    }
                ),
            )
        )
    names = []
    for index in range(_quota(records, 0.0005)):
        name = f"{rng.choice(_WORDS)}-{index}"
        names.append(name)
        rows.append(
            (
                f"workflows:{name}",
                dumps(
                    {
                        "name": name,
                        "yaml": f"name: {name}\nsteps:\n  - run: {rng.choice(_WORDS)}\n",
                        "classification": g.level(),
                        "savedAt": to_iso(g.moment()),
                    }
                ),
            )
        )
    for _ in range(_quota(records, 0.005)):
        run_id = g.uuid()
        started = g.moment()
        run: dict[str, Any] = {
            "runId": run_id,
            "workflowName": rng.choice(names),
            "status": "completed",
            "startedAt": to_iso(started),
        }
        if rng.random() < 0.05:
            run["status"] = "running"
        else:
            run["completedAt"] = to_iso(g.moment(started, 3600))
        rows.append((f"workflow-runs:{run_id}", dumps(run)))

    # Conversation messages fill the rest, with a counter per session.
    rows.extend(_conversations(g, sessions, max(0, records - len(rows))))
    while len(rows) < records:  # the last key or two, when a counter did not fit
        rows.append(_notification(g, owner))
    del rows[records:]
    rng.shuffle(rows)  # the gateway writes in time order, not key order
    return rows, fts, meta


def _notification(g: _Gen, owner: str) -> tuple[str, str]:
    nid = g.uuid()
    note: dict[str, Any] = {
        "id": nid,
        "userId": owner,
        "message": g.text(1, 3),
        "priority": g.rng.choice(["low", "normal", "high"]),
    }
    if g.rng.random() < 0.6:
        note["classification"] = g.level()
    note["createdAt"] = to_iso(g.moment())
    return f"notifications:{owner}:{nid}", dumps(note)


def _memories(
    g: _Gen,
    count: int,
    main_id: str,
    fts: list[tuple[str, str, str, str, str]],
    meta: list[tuple[str, str, str, str]],
    texts: Callable[[], str] | None = None,
) -> list[tuple[str, str]]:
    rng = g.rng
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    agents = ["main-session"] * 6 + [
        f"scheduler-{rng.choice(CHANNELS)}-{rng.randint(1_700_000_000_000, 1_800_000_000_000)}"
        for _ in range(2)
    ]
    while len(rows) < count:
        agent = rng.choice(agents)
        if rng.random() < 0.3:
            key = rng.choice(_MEMORY_KEYS)
        else:
            key = f"note-{rng.randint(0, max(10, count * 2))}"
        level = g.level()
        storage_key = f"memory:{agent}:{level}:{key}"
        if storage_key in seen:
            continue
        seen.add(storage_key)
        created = g.moment()
        updated = g.moment(created)
        expired = rng.random() < 0.05
        tags = rng.sample(
            ["persona", "work", "travel", "prefs", "project", "health"], k=rng.randint(0, 2)
        )
        record = {
            "key": key,
            "agentId": agent,
            "classification": level,
            "content": texts() if texts else g.text(1, 6),
            "tags": tags,
            "createdAt": to_iso(created),
            "updatedAt": to_iso(updated),
            "expired": expired,
            "sourceSessionId": main_id,
        }
        if rng.random() < 0.5:
            record["lineageId"] = g.uuid()
        value = dumps(record)
        rows.append((storage_key, value))
        if expired or agent.startswith("scheduler-"):
            continue  # soft-deleted or written by a cron run: never indexed
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


def _conversations(
    g: _Gen, sessions: list[tuple[str, datetime]], count: int
) -> Iterator[tuple[str, str]]:
    rng = g.rng
    if not sessions or count <= 0:
        return
    weights = [rng.random() ** 2 for _ in sessions]
    per_session = [0] * len(sessions)
    for index in rng.choices(range(len(sessions)), weights=weights, k=count):
        per_session[index] += 1
    remaining = count
    for (sid, created), share in zip(sessions, per_session, strict=True):
        if remaining < 2:
            break
        messages = min(share, remaining - 1)
        if messages == 0:
            continue
        remaining -= messages + 1
        stamp = created
        for seq in range(1, messages + 1):
            stamp = g.moment(stamp, 600)
            role = "user" if seq % 2 else "assistant"
            yield (
                f"conv:{sid}:{seq:012d}",
                dumps(
                    {
                        "message_id": g.uuid(),
                        "session_id": sid,
                        "role": role,
                        "content": g.text(1, 8),
                        "classification": g.level(),
                        "timestamp": to_iso(stamp),
                        "sequence": seq,
                        "compacted": False,
                    }
                ),
            )
        yield (f"conv-session:{sid}", dumps({"lastSequence": messages}))


def build_demo(
    provider: StorageProvider,
    *,
    records: int,
    seed: int = 0,
    now: datetime | None = None,
    days: int = 400,
    memories: int | None = None,
    memory_words: int | None = None,
) -> DemoSummary:
    """Fill an empty store with ``records`` gateway-shaped keys (see :func:`generate`)."""
    if provider.count() > 0:
        raise RefusedError(
            f"{provider.describe()} already holds data; demo create only fills an empty store",
            hint="use another --db path",
        )
    rows, fts, meta = generate(
        records, seed=seed, now=now, days=days, memories=memories, memory_words=memory_words
    )
    summary = DemoSummary(records=len(rows), seed=seed)
    for key, _value in rows:
        group = group_of(key)
        summary.counts[group] = summary.counts.get(group, 0) + 1
    from triggerfish_cli.storage.sqlite import SqliteStorage

    if isinstance(provider, SqliteStorage):
        with provider.transaction("demo create") as conn:
            conn.execute(MEMORY_FTS_SQL)
            conn.execute(MEMORY_META_SQL)
            conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?)", rows)
            conn.executemany(
                "INSERT INTO memory_fts (agent_id, classification, key, content, tags) "
                "VALUES (?, ?, ?, ?, ?)",
                fts,
            )
            conn.executemany("INSERT OR REPLACE INTO memory_meta VALUES (?, ?, ?, ?)", meta)
        summary.memories_indexed = len(meta)
    else:
        provider.set_many(rows)
    return summary
