"""The demo store's records besides the conversations, shaped as the gateway writes them.

Todos, session records, cron jobs with their history and the scheduler runs,
trigger results, pairing codes and linked accounts, teams and workflows,
notifications, and memories with their search index rows (see
:mod:`triggerfish_cli.demo` for what a store holds).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from triggerfish_cli.demo_conversations import Session
from triggerfish_cli.demo_random import Gen, millis, quota
from triggerfish_cli.serialization import dumps, to_iso

CHANNELS = ("telegram", "slack", "discord", "webchat", "email", "signal")
WEBHOOK_SOURCES = ("github", "stripe", "uptime")

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


Rows = list[tuple[str, str]]
FtsRows = list[tuple[str, str, str, str, str]]
MetaRows = list[tuple[str, str, str, str]]


def todo(g: Gen) -> dict[str, Any]:
    created = g.moment()
    return {
        "id": g.uuid(),
        "content": g.text(1, 1),
        "status": g.rng.choice(["pending", "in_progress", "completed"]),
        "priority": g.rng.choice(["low", "medium", "high"]),
        "created_at": to_iso(created),
        "updated_at": to_iso(g.moment(created)),
    }


def session_record(g: Gen, session: Session, owner: str) -> str:
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


def cron_and_runs(g: Gen, records: int, rows: Rows) -> list[Session]:
    """Cron jobs with their history, and the scheduler runs (cron, trigger, webhooks)."""
    rng = g.rng
    wanted = quota(records, 0.015)
    cron_runs: list[Session] = []
    for _ in range(quota(records, 0.0005, 2)):
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
            run = Session(g.uuid(), started, ended, agent=f"scheduler-cron-{millis(started)}")
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
            run = Session(g.uuid(), started, ended, agent=f"scheduler-trigger-{millis(started)}")
            run.source, run.task = "trigger", "Check the inbox and the calendar. " + g.text(1, 2)
        else:
            source = rng.choice(WEBHOOK_SOURCES)
            event = rng.choice(["push", "issue.opened", "payment.succeeded", "check.failed"])
            payload = dumps({"event": event, "data": {"id": g.uuid(), "note": g.text(1, 1)}})
            run = Session(
                g.uuid(), started, ended, agent=f"scheduler-webhook-{source}-{millis(started)}"
            )
            run.source = f"webhook:{source}"
            run.task = f"Webhook event from {source}: {event}\n\nPayload:\n{payload}"
        runs.append(run)
    return runs


def trigger_result(g: Gen, run: Session) -> tuple[str, str]:
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


def pairing(g: Gen, records: int, rows: Rows) -> None:
    """Pairing codes, mostly past their expiresAt, one pending; linked accounts."""
    rng = g.rng
    for index in range(quota(records, 0.001)):
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


def workflows(g: Gen, records: int, rows: Rows) -> None:
    """Teams, workflow definitions with their versions, and workflow runs."""
    rng = g.rng
    for _ in range(quota(records, 0.0005)):
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
    for index in range(quota(records, 0.0005)):
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
    for _ in range(quota(records, 0.005)):
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


def notification(g: Gen, owner: str, runs: list[Session]) -> tuple[str, str]:
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


def memories(
    g: Gen,
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

