"""Gateway-shaped records with chosen times, for retention tests (literal JSON)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=timezone.utc)
OWNER = "9b8a7c6d-1e2f-4a3b-8c5d-6e7f8a9b0c1d"


def js(document: object) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{moment.microsecond // 1000:03d}Z"
    )


def ago(days: float = 0, hours: float = 0) -> datetime:
    return NOW - timedelta(days=days, hours=hours)


def session(sid: str, created: datetime, *changes: datetime) -> tuple[str, str]:
    history = [
        {"timestamp": iso(at), "previousLevel": "PUBLIC", "newLevel": "INTERNAL", "reason": "r"}
        for at in changes
    ]
    value = {
        "id": sid,
        "userId": OWNER,
        "channelId": "telegram",
        "taint": "PUBLIC",
        "createdAt": iso(created),
        "history": history,
        "bumpersEnabled": True,
    }
    return f"sessions:{sid}", js(value)


def conv(sid: str, seq: int, at: datetime) -> tuple[str, str]:
    value = {
        "message_id": f"00000000-0000-4000-8000-{seq:012d}",
        "session_id": sid,
        "role": "user",
        "content": "hei",
        "classification": "PUBLIC",
        "timestamp": iso(at),
        "sequence": seq,
        "compacted": False,
        "token_count": 1,
    }
    return f"conv:{sid}:{seq:012d}", js(value)


def conv_session(sid: str, last: int) -> tuple[str, str]:
    return f"conv-session:{sid}", js({"lastSequence": last})


def lineage(lid: str, accessed: datetime, content_hash: str = "ab") -> tuple[str, str]:
    value = {
        "lineage_id": lid,
        "content_hash": content_hash,
        "origin": {
            "source_type": "web_request",
            "source_name": "web_fetch",
            "accessed_at": iso(accessed),
            "accessed_by": OWNER,
            "access_method": "web_fetch",
        },
        "classification": {"level": "PUBLIC", "reason": "Tool call: web_fetch"},
        "sessionId": "s",
    }
    return f"lineage:{lid}", js(value)


def cron_job(jid: str, created: datetime, *, enabled: bool = True) -> tuple[str, str]:
    value = {
        "id": jid,
        "expression": "0 9 * * *",
        "task": "brief",
        "classificationCeiling": "INTERNAL",
        "createdAt": iso(created),
        "enabled": enabled,
    }
    return f"cron:{jid}", js(value)


def cron_run(jid: str, at: datetime, *, ok: bool = True) -> dict[str, object]:
    run: dict[str, object] = {
        "jobId": jid,
        "executedAt": iso(at),
        "durationMs": 100,
        "success": ok,
    }
    if not ok:
        run["error"] = "timeout"
    return run


def notification(nid: str, created: datetime, delivered: datetime | None = None) -> tuple[str, str]:
    """Undelivered, as the gateway stores them; ``delivered`` adds the design's delivery fields."""
    value: dict[str, object] = {
        "id": nid,
        "userId": "owner",
        "message": "m",
        "priority": "normal",
        "createdAt": iso(created),
    }
    if delivered is not None:
        value["delivered"] = True
        value["deliveredAt"] = iso(delivered)
    return f"notifications:owner:{nid}", js(value)


def memory(
    key: str, level: str, updated: datetime, *, expired: bool, agent: str = "main-session"
) -> tuple[str, str]:
    value = {
        "key": key,
        "agentId": agent,
        "classification": level,
        "content": "c",
        "tags": [],
        "createdAt": iso(updated - timedelta(days=10)),
        "updatedAt": iso(updated),
        "expired": expired,
        "sourceSessionId": "s",
    }
    return f"memory:{agent}:{level}:{key}", js(value)


def pairing_code(channel: str, code: str, expires: datetime) -> tuple[str, str]:
    value = {"code": code, "channelType": channel, "expiresAt": iso(expires), "used": False}
    return f"pairing:{channel}:{code}", js(value)


def audit_key(at: datetime, hook: str = "admin_kv_set") -> tuple[str, str]:
    return f"audit:{iso(at)}:{hook}", js({"timestamp": iso(at), "hook": hook})


def workflow_run(run_id: str, completed: datetime | None) -> tuple[str, str]:
    value: dict[str, object] = {"runId": run_id, "workflowName": "w", "status": "running"}
    if completed is not None:
        value["status"] = "completed"
        value["completedAt"] = iso(completed)
    return f"workflow-runs:{run_id}", js(value)


def millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def scheduler_todos(
    channel: str, started: datetime, *items: tuple[datetime, datetime]
) -> tuple[str, str]:
    """``todos:scheduler-<channel>-<ms>``: a scheduler run's list, items (created, updated)."""
    todos = [
        {
            "id": f"t{n}",
            "content": "check the inbox",
            "status": "completed",
            "priority": "medium",
            "created_at": iso(created),
            "updated_at": iso(updated),
        }
        for n, (created, updated) in enumerate(items)
    ]
    return f"todos:scheduler-{channel}-{millis(started)}", js({"todos": todos})


def session_id(channel: str, sid: str, created: datetime) -> tuple[str, str]:
    return f"session-id:{channel}", js({"id": sid, "createdAt": iso(created)})


def workflow_version(
    name: str, version_id: str, proposed: datetime, resolved: datetime | None, status: str
) -> tuple[str, str]:
    version: dict[str, object] = {
        "versionId": version_id,
        "workflowName": name,
        "agentId": "main-session",
        "versionNumber": 1,
        "definition": f"name: {name}\n",
        "diff": "+ step",
        "status": status,
        "source": "human",
        "authorReasoning": "r",
        "proposedAt": iso(proposed),
    }
    if resolved is not None:
        version["resolvedAt"] = iso(resolved)
        version["resolvedBy"] = "owner"
    return f"workflow-versions:{name}:{version_id}", js(
        {"version": version, "classification": "INTERNAL"}
    )
