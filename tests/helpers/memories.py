"""A memory-rich store shaped like one the gateway wrote (UPSTREAM.md, memory records).

Several agents, all four levels, a key holding ':', soft-deleted versions
(one shadowing nothing because it is deleted), a RESTRICTED-only secret,
malformed records at PUBLIC and RESTRICTED, a record claiming another level
than its key, memories of scheduler agents in kv only (never indexed), and
one record edited in kv alone so that its index rows are stale.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.helpers.gateway import (
    GATEWAY_ROWS,
    OLD_RUN_ID,
    OLD_RUN_LINEAGE_ID,
    memory_record,
    write_gateway_store,
)

MAIN = "main-session"
CRON = "scheduler-telegram-1711612800000"
SLACK = "scheduler-slack-1712000000000"


def mkey(agent: str, level: str, key: str) -> str:
    return f"memory:{agent}:{level}:{key}"


MEMORY_ROWS: dict[str, str] = {
    mkey(MAIN, "PUBLIC", "user-name"): memory_record(
        "user-name", "PUBLIC", "User's name is Alice Chen", tags=["persona"]
    ),
    mkey(MAIN, "INTERNAL", "user-name"): memory_record(
        "user-name", "INTERNAL", "Alice Chen runs the acme-stack at work", tags=["persona", "work"]
    ),
    mkey(MAIN, "CONFIDENTIAL", "user-name"): memory_record(
        "user-name", "CONFIDENTIAL", "Alice's legal name is Alice Marie Chen", tags=["persona"]
    ),
    mkey(MAIN, "RESTRICTED", "user-name"): memory_record(
        "user-name", "RESTRICTED", "Alice's passport number is X1234567", tags=["persona"]
    ),
    mkey(MAIN, "INTERNAL", "trigger:instructions"): memory_record(
        "trigger:instructions", "INTERNAL", "Summarise the inbox every morning"
    ),
    mkey(MAIN, "INTERNAL", "project-plan"): memory_record(
        "project-plan", "INTERNAL", "Project plan: migrate the postgres cluster", tags=["work"]
    ),
    mkey(MAIN, "CONFIDENTIAL", "project-plan"): memory_record(
        "project-plan",
        "CONFIDENTIAL",
        "Project plan: migrate before the merger",
        tags=["work"],
        expired=True,
        updated="2026-01-10T09:00:00.000Z",
    ),
    mkey(MAIN, "RESTRICTED", "merger"): memory_record(
        "merger", "RESTRICTED", "Merger with Globex is planned for Q3", tags=["deal"]
    ),
    mkey(MAIN, "PUBLIC", "old-fact"): memory_record(
        "old-fact", "PUBLIC", "Prefers tea", expired=True, updated="2026-03-29T08:00:00.000Z"
    ),
    mkey(MAIN, "RESTRICTED", "old-secret"): memory_record(
        "old-secret",
        "RESTRICTED",
        "Old vault code 4242",
        expired=True,
        updated="2025-06-01T00:00:00.000Z",
    ),
    mkey(MAIN, "PUBLIC", "café"): memory_record(
        "café", "PUBLIC", "Favourite café is Kaffebrenneriet in Oslo ☕", tags=["travel"]
    ),
    mkey(MAIN, "PUBLIC", "broken"): '{"key":"broken","content":',
    mkey(MAIN, "RESTRICTED", "broken-secret"): "not json at all",
    mkey(MAIN, "PUBLIC", "liar"): memory_record("liar", "RESTRICTED", "I claim to be RESTRICTED"),
    mkey(CRON, "PUBLIC", "digest"): memory_record(
        "digest",
        "PUBLIC",
        "Daily digest sent",
        agent=CRON,
        source=OLD_RUN_ID,
        lineage=OLD_RUN_LINEAGE_ID,
    ),
    mkey(SLACK, "INTERNAL", "user-name"): memory_record(
        "user-name",
        "INTERNAL",
        "Slack handle is alice.c",
        agent=SLACK,
        source="5f6a7b8c-9d0e-4f1a-8b2c-3d4e5f6a7b8c",
        lineage="6a7b8c9d-0e1f-4a2b-9c3d-4e5f6a7b8c9d",
    ),
}

#: What the gateway indexed: every live main-session record (not cron runs).
INDEXED = (
    (MAIN, "PUBLIC", "user-name"),
    (MAIN, "INTERNAL", "user-name"),
    (MAIN, "CONFIDENTIAL", "user-name"),
    (MAIN, "RESTRICTED", "user-name"),
    (MAIN, "INTERNAL", "trigger:instructions"),
    (MAIN, "INTERNAL", "project-plan"),
    (MAIN, "RESTRICTED", "merger"),
    (MAIN, "PUBLIC", "café"),
)

#: Edited in kv alone after indexing: its index rows hold the old content.
STALE_KEY = mkey(MAIN, "INTERNAL", "trigger:instructions")
STALE_VALUE = memory_record(
    "trigger:instructions",
    "INTERNAL",
    "Summarise the calendar every evening",
    updated="2026-03-30T07:00:00.000Z",
)

ALL_ROWS = {**GATEWAY_ROWS, **MEMORY_ROWS}


def write_memory_store(path: Path) -> Path:
    """The gateway store plus :data:`MEMORY_ROWS`, indexed as the gateway would have."""
    write_gateway_store(path, ALL_ROWS, INDEXED)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE kv SET value = ? WHERE key = ?", (STALE_VALUE, STALE_KEY))
    conn.commit()
    conn.close()
    return path


def current_rows() -> dict[str, str]:
    """kv as :func:`write_memory_store` leaves it."""
    return {**ALL_ROWS, STALE_KEY: STALE_VALUE}
