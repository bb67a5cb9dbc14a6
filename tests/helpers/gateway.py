"""A store written the way the Triggerfish gateway writes it (UPSTREAM.md), by hand.

Literal SQL and literal JSON, independent of the tool's own code, so tests
compare the tool against the gateway's format rather than against itself.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

KV_SQL = "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
FTS_SQL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5("
    "agent_id, classification, key, content, tags, tokenize='porter unicode61')"
)
META_SQL = (
    "CREATE TABLE IF NOT EXISTS memory_meta (agent_id TEXT NOT NULL, "
    "classification TEXT NOT NULL, key TEXT NOT NULL, record_json TEXT NOT NULL, "
    "PRIMARY KEY (agent_id, classification, key))"
)

SESSION_ID = "3f6c2a8e-5b1d-4c7a-9e2f-0a1b2c3d4e5f"
OWNER_ID = "9b8a7c6d-1e2f-4a3b-8c5d-6e7f8a9b0c1d"
LINEAGE_ID = "5e4d3c2b-1a09-4f8e-b7d6-c5b4a3928170"
CRON_ID = "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"
#: The cron run that wrote the "digest" memory, long gone with its lineage record:
#: the memory (kept forever) still names both.
OLD_RUN_ID = "0e1f2a3b-4c5d-4e6f-8a7b-9c0d1e2f3a4b"
OLD_RUN_LINEAGE_ID = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
#: A cron run of CRON_ID (its first run in cron-history): a session id of its own, no
#: sessions: record (see SCHEDULER_RUN_ROWS). It started at 2026-03-27T08:59:55.000Z.
RUN_ID = "7a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d"
RUN_AGENT = "scheduler-cron-1774601995000"
RUN_LINEAGE_ID = "2b3c4d5e-6f70-4182-a394-a5b6c7d8e9f0"
RUN_HASH = "ea92152ef3fe3eec21bc44d81d915428032d7a87ff6c4f486441c56c134d417d"
RUN_RESULT = (
    "gmail_search: newer_than:1d\n"
    "3 new messages: invoice from Acme, standup moved to 10:00, flight confirmation"
)


def _js(document: object) -> str:
    """JSON.stringify: compact, non-ASCII unescaped."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def memory_record(
    key: str,
    level: str,
    content: str,
    *,
    agent: str = "main-session",
    tags: list[str] | None = None,
    created: str = "2026-03-02T10:15:30.123Z",
    updated: str = "2026-03-28T14:07:00.005Z",
    expired: bool = False,
    source: str = SESSION_ID,
    lineage: str | None = None,
) -> str:
    record: dict[str, object] = {
        "key": key,
        "agentId": agent,
        "classification": level,
        "content": content,
        "tags": tags or [],
        "createdAt": created,
        "updatedAt": updated,
        "expired": expired,
        "sourceSessionId": source,
    }
    if lineage is not None:
        record["lineageId"] = lineage
    return _js(record)


GATEWAY_ROWS: dict[str, str] = {
    f"sessions:{SESSION_ID}": _js(
        {
            "id": SESSION_ID,
            "userId": OWNER_ID,
            "channelId": "telegram",
            "taint": "INTERNAL",
            "createdAt": "2026-03-28T14:05:40.902Z",
            "history": [
                {
                    "timestamp": "2026-03-28T14:06:00.000Z",
                    "previousLevel": "PUBLIC",
                    "newLevel": "INTERNAL",
                    "reason": "read calendar",
                }
            ],
            "bumpersEnabled": True,
        }
    ),
    "main-session-id": SESSION_ID,  # older installs: a bare UUID
    # Messages are numbered from 0; the counter holds the last number.
    f"conv:{SESSION_ID}:000000000000": _js(
        {
            "message_id": "6d1e0b5a-2c3f-4e7a-9b8c-1d2e3f4a5b6c",
            "session_id": SESSION_ID,
            "role": "user",
            "content": "Hva er været i Oslo?",
            "classification": "PUBLIC",
            "timestamp": "2026-03-28T14:05:41.000Z",
            "sequence": 0,
            "compacted": False,
            "token_count": 6,
        }
    ),
    f"conv:{SESSION_ID}:000000000001": _js(
        {
            "message_id": "8f2a1c4e-7b3d-4f9a-8e6c-5d4b3a2f1e0d",
            "session_id": SESSION_ID,
            "role": "assistant",
            "content": "Det er 4 °C og regn.",
            "classification": "PUBLIC",
            "timestamp": "2026-03-28T14:05:43.250Z",
            "sequence": 1,
            "compacted": False,
            "token_count": 5,
        }
    ),
    f"conv-session:{SESSION_ID}": '{"lastSequence":1}',
    # What a tool call records (the tool_call message of this older build's store is gone).
    f"lineage:{LINEAGE_ID}": _js(
        {
            "lineage_id": LINEAGE_ID,
            "content_hash": "ab" * 32,
            "origin": {
                "source_type": "web_request",
                "source_name": "web_fetch",
                "accessed_at": "2026-03-28T14:05:42.000Z",
                "accessed_by": OWNER_ID,
                "access_method": "web_fetch",
            },
            "classification": {"level": "PUBLIC", "reason": "Tool call: web_fetch"},
            "sessionId": SESSION_ID,
        }
    ),
    f"lineage-session:{SESSION_ID}:{LINEAGE_ID}": LINEAGE_ID,
    f"lineage-hash:{'ab' * 32}": LINEAGE_ID,
    f"cron:{CRON_ID}": _js(
        {
            "id": CRON_ID,
            "expression": "0 9 * * *",
            "task": "morning brief",
            "classificationCeiling": "INTERNAL",
            "createdAt": "2026-01-05T08:00:00.000Z",
            "enabled": True,
        }
    ),
    f"cron-history:{CRON_ID}": _js(
        [
            {
                "jobId": CRON_ID,
                "executedAt": "2026-03-27T09:00:00.120Z",
                "durationMs": 5120,
                "success": True,
            },
            {
                "jobId": CRON_ID,
                "executedAt": "2026-03-28T09:00:00.090Z",
                "durationMs": 90000,
                "success": False,
                "error": "timeout",
            },
        ]
    ),
    "trigger:last:cron": _js(
        {
            "id": "t1",
            "source": "cron",
            "message": "morning brief",
            "classification": "INTERNAL",
            "firedAt": "2026-03-28T09:00:00.000Z",
        }
    ),
    f"notifications:{OWNER_ID}:0d9c8b7a-6f5e-4d3c-8b2a-190817263544": _js(
        {
            "id": "0d9c8b7a-6f5e-4d3c-8b2a-190817263544",
            "userId": OWNER_ID,
            "message": "Backup done",
            "priority": "normal",
            "createdAt": "2026-03-28T10:00:00.000Z",
        }
    ),
    "todos:main-session": '{"todos":[]}',
    "pairing:telegram:482913": _js(
        {
            "code": "482913",
            "channelType": "telegram",
            "expiresAt": "2026-03-28T14:15:00.000Z",
            "used": False,
        }
    ),
    "pairing:linked:telegram:12345678": _js(
        {
            "channelType": "telegram",
            "platformUserId": "12345678",
            "linkedAt": "2026-02-01T12:00:00.000Z",
        }
    ),
    "session-id:telegram": _js({"id": SESSION_ID, "createdAt": "2026-03-28T14:05:40.902Z"}),
    "workflows:inbox-triage": _js(
        {
            "name": "inbox-triage",
            "yaml": "name: inbox-triage\nsteps:\n  - run: gmail_search\n",
            "classification": "INTERNAL",
            "savedAt": "2026-03-20T10:00:00.000Z",
        }
    ),
    "workflow-versions:inbox-triage:4c5d6e7f-8a9b-4c0d-9e1f-2a3b4c5d6e7f": _js(
        {
            "version": {
                "versionId": "4c5d6e7f-8a9b-4c0d-9e1f-2a3b4c5d6e7f",
                "workflowName": "inbox-triage",
                "agentId": "main-session",
                "versionNumber": 1,
                "definition": "name: inbox-triage\nsteps:\n  - run: gmail_search\n",
                "diff": "+  - run: gmail_search",
                "status": "APPROVED",
                "source": "human",
                "authorReasoning": "search the inbox first",
                "proposedAt": "2026-03-20T09:00:00.000Z",
                "resolvedAt": "2026-03-20T10:00:00.000Z",
                "resolvedBy": "owner",
            },
            "classification": "INTERNAL",
        }
    ),
    "prefs:owner:bumpers_default": "true",
    "browser:profile:main-session:watermark": "CONFIDENTIAL",
    "memory:main-session:PUBLIC:user-name": memory_record(
        "user-name", "PUBLIC", "User's name is Alice Chen", tags=["persona"]
    ),
    "memory:main-session:CONFIDENTIAL:user-name": memory_record(
        "user-name", "CONFIDENTIAL", "User's legal name is Alice Marie Chen", tags=["persona"]
    ),
    "memory:main-session:INTERNAL:trigger:instructions": memory_record(
        "trigger:instructions", "INTERNAL", "Summarise the inbox every morning"
    ),
    "memory:main-session:PUBLIC:old-fact": memory_record(
        "old-fact", "PUBLIC", "Prefers tea", expired=True, updated="2026-03-29T08:00:00.000Z"
    ),
    # Saved by a cron run: in kv, never indexed; it names its run and lineage record.
    "memory:scheduler-telegram-1711612800000:PUBLIC:digest": memory_record(
        "digest",
        "PUBLIC",
        "Daily digest sent",
        agent="scheduler-telegram-1711612800000",
        source=OLD_RUN_ID,
        lineage=OLD_RUN_LINEAGE_ID,
    ),
    # Keys of no known namespace.
    "custom:thing:1": "x",
    "nocolon": "y",
}

#: A cron run as the gateway leaves it: no sessions: record, its messages (numbered
#: from 0: the job's task, a tool call, the answer), its lineage keys, its todo list
#: and a memory of its agent, never indexed.
SCHEDULER_RUN_ROWS: dict[str, str] = {
    f"conv:{RUN_ID}:000000000000": _js(
        {
            "message_id": "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
            "session_id": RUN_ID,
            "role": "user",
            "content": "morning brief",
            "classification": "PUBLIC",
            "timestamp": "2026-03-27T08:59:55.120Z",
            "sequence": 0,
            "compacted": False,
            "token_count": 4,
        }
    ),
    f"conv:{RUN_ID}:000000000001": _js(
        {
            "message_id": "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e",
            "session_id": RUN_ID,
            "role": "tool_call",
            "content": RUN_RESULT,
            "classification": "INTERNAL",
            "timestamp": "2026-03-27T08:59:57.400Z",
            "sequence": 1,
            "compacted": False,
            "lineage_id": RUN_LINEAGE_ID,
            "tool_name": "gmail_search",
            "tool_args": {"query": "newer_than:1d"},
        }
    ),
    f"conv:{RUN_ID}:000000000002": _js(
        {
            "message_id": "2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f",
            "session_id": RUN_ID,
            "role": "assistant",
            "content": "Morning brief: 3 new messages, standup at 10:00.",
            "classification": "INTERNAL",
            "timestamp": "2026-03-27T09:00:00.050Z",
            "sequence": 2,
            "compacted": False,
            "token_count": 13,
        }
    ),
    f"conv-session:{RUN_ID}": '{"lastSequence":2}',
    f"lineage:{RUN_LINEAGE_ID}": _js(
        {
            "lineage_id": RUN_LINEAGE_ID,
            "content_hash": RUN_HASH,
            "origin": {
                "source_type": "google_api",
                "source_name": "gmail_search",
                "accessed_at": "2026-03-27T08:59:57.400Z",
                "accessed_by": OWNER_ID,
                "access_method": "gmail_search",
            },
            "classification": {"level": "INTERNAL", "reason": "Tool call: gmail_search"},
            "sessionId": RUN_ID,
        }
    ),
    f"lineage-session:{RUN_ID}:{RUN_LINEAGE_ID}": RUN_LINEAGE_ID,
    f"lineage-hash:{RUN_HASH}": RUN_LINEAGE_ID,
    f"todos:{RUN_AGENT}": _js(
        {
            "todos": [
                {
                    "id": "3d4e5f6a-7b8c-4d9e-8f0a-1b2c3d4e5f6a",
                    "content": "Summarise the inbox",
                    "status": "completed",
                    "priority": "medium",
                    "created_at": "2026-03-27T08:59:56.000Z",
                    "updated_at": "2026-03-27T08:59:59.000Z",
                }
            ]
        }
    ),
    f"memory:{RUN_AGENT}:INTERNAL:inbox-summary": memory_record(
        "inbox-summary",
        "INTERNAL",
        "Three new messages on 27 March",
        agent=RUN_AGENT,
        created="2026-03-27T08:59:58.000Z",
        updated="2026-03-27T08:59:58.000Z",
        source=RUN_ID,
        lineage=RUN_LINEAGE_ID,
    ),
}

INDEXED = (  # (agent, level, key) rows present in memory_fts and memory_meta
    ("main-session", "PUBLIC", "user-name"),
    ("main-session", "CONFIDENTIAL", "user-name"),
    ("main-session", "INTERNAL", "trigger:instructions"),
)


def gateway_index(conn: sqlite3.Connection, value: str) -> None:
    """What the gateway's MemorySearchProvider.index() runs for one record."""
    record = json.loads(value)
    agent, level, key = record["agentId"], record["classification"], record["key"]
    conn.execute(
        "DELETE FROM memory_fts WHERE agent_id = ? AND classification = ? AND key = ?",
        (agent, level, key),
    )
    conn.execute(
        "INSERT INTO memory_fts (agent_id, classification, key, content, tags) "
        "VALUES (?, ?, ?, ?, ?)",
        (agent, level, key, record["content"], " ".join(record["tags"])),
    )
    conn.execute(
        "INSERT OR REPLACE INTO memory_meta (agent_id, classification, key, record_json) "
        "VALUES (?, ?, ?, ?)",
        (agent, level, key, value),
    )


def gateway_remove(conn: sqlite3.Connection, agent: str, level: str, key: str) -> None:
    """What the gateway's MemorySearchProvider.remove() runs."""
    conn.execute(
        "DELETE FROM memory_fts WHERE agent_id = ? AND classification = ? AND key = ?",
        (agent, level, key),
    )
    conn.execute(
        "DELETE FROM memory_meta WHERE agent_id = ? AND classification = ? AND key = ?",
        (agent, level, key),
    )


def write_gateway_store(
    path: Path,
    rows: dict[str, str] | None = None,
    indexed: tuple[tuple[str, str, str], ...] | None = None,
) -> Path:
    """Create ``path`` exactly as the gateway would have left it.

    ``indexed`` names the (agent, level, key) memories the gateway indexed
    (default :data:`INDEXED`); the others are in kv only.
    """
    rows = GATEWAY_ROWS if rows is None else rows
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(KV_SQL)
    conn.execute(FTS_SQL)
    conn.execute(META_SQL)
    for key, value in rows.items():
        conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
    for agent, level, key in INDEXED if indexed is None else indexed:
        value = rows.get(f"memory:{agent}:{level}:{key}")
        if value is not None:
            gateway_index(conn, value)
    conn.commit()
    conn.close()
    return path


def dump_tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table, for "nothing else was touched" assertions.

    Our ``tfadmin_store`` (the store's identity, written once by the first
    command that writes) and ``tfadmin_memory_marks`` (which memories the index
    held in step, by kv rowid: fts_marks.py) are left out: they are not data of
    the gateway's.
    """
    conn = sqlite3.connect(path)
    try:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'memory_fts_%' "
                "AND name NOT IN ('tfadmin_store', 'tfadmin_memory_marks') ORDER BY name"
            )
        ]
        return {
            table: sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            for table in tables
        }
    finally:
        conn.close()
