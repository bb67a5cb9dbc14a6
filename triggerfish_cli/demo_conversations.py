"""Conversations for the demo store, written as the gateway's agent loop writes them.

A session's messages (``conv:<session>:<seq>``) are numbered from 0, and its
counter (``conv-session:<session>``) holds the last number, the count minus
one. A turn is the user's message, the tool calls the agent made, then the
assistant's answer. Each tool call is one ``tool_call`` message (the tool's
name, its arguments as the gateway truncates them, the result capped as the
model saw it) and one lineage record with its three index keys; the session
taint rises when a tool brings in data of a higher level, and every message
and lineage record carries the taint of its moment. Long sessions are
compacted now and then: the earlier messages are marked ``compacted`` and a
``compaction_summary`` message follows.

Scheduler runs (cron jobs, the periodic trigger, webhooks) each get a fresh
session id with no ``sessions:`` record: their messages, lineage keys and,
for some, a ``todos:scheduler-<channel>-<ms>`` list are all they leave.

Messages written after :data:`NEWER_BUILD_DAYS` before ``now`` carry the
fields newer gateway builds add (``tool_call_id``, ``provider``, ``model``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from triggerfish_cli.serialization import dumps, to_iso

if TYPE_CHECKING:
    from triggerfish_cli.demo_random import Gen

LEVELS = ("PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED")

#: tool_args longer than this (as JSON) are stored as {_truncated, _preview}.
MAX_TOOL_ARGS_CHARS = 4096
#: Tool results longer than their budget are capped at a line break, with a marker.
DEFAULT_RESPONSE_BUDGET = 12_000
RESPONSE_BUDGETS = {
    "read_file": 20_000,
    "github_issues": 6_000,
    "browser_snapshot": 8_000,
    "run_command": 16_000,
}
#: Messages newer than this many days carry the newer builds' fields.
NEWER_BUILD_DAYS = 60
MODELS = (("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4.1"), ("anthropic", "claude-opus-4"))

#: (tool name, weight). The lineage source type comes from the name, as in the gateway.
TOOLS: tuple[tuple[str, int], ...] = (
    ("web_search", 12),
    ("web_fetch", 10),
    ("memory_search", 8),
    ("memory_save", 6),
    ("read_file", 8),
    ("write_file", 3),
    ("run_command", 6),
    ("gmail_search", 5),
    ("calendar_list_events", 4),
    ("github_issues", 4),
    ("browser_snapshot", 3),
    ("obsidian_search", 2),
    ("mcp_linear_list_issues", 2),
    ("cron_list", 1),
    ("todo_write", 3),
)
_TOOL_NAMES = tuple(name for name, _ in TOOLS)
_TOOL_WEIGHTS = tuple(weight for _, weight in TOOLS)
_LONG_RESULT_TOOLS = ("read_file", "run_command", "web_fetch", "browser_snapshot", "github_issues")


def source_type(tool: str) -> str:
    """The lineage ``origin.source_type`` of a tool, from its name."""
    for prefixes, kind in (
        (("web_",), "web_request"),
        (("browser_",), "browser_session"),
        (("memory_",), "memory_access"),
        (("google_", "gmail_", "calendar_", "drive_", "sheets_", "tasks_"), "google_api"),
        (("github_",), "github_api"),
        (("obsidian_",), "obsidian_vault"),
        (("mcp_",), "mcp_server"),
        (("skill_",), "skill_execution"),
        (("cron_", "trigger_"), "scheduler"),
    ):
        if tool.startswith(prefixes):
            return kind
    if tool.startswith("file_") or tool in (
        "read_file",
        "write_file",
        "edit_file",
        "list_directory",
        "search_files",
    ):
        return "filesystem"
    if tool == "read_skill":
        return "skill_execution"
    return "tool_response"


def truncate_tool_args(args: dict[str, Any]) -> dict[str, Any]:
    """The gateway's cap on stored arguments: a preview of the JSON when too long."""
    text = dumps(args)
    if len(text) <= MAX_TOOL_ARGS_CHARS:
        return args
    return {"_truncated": True, "_preview": text[: MAX_TOOL_ARGS_CHARS - 50]}


def cap_result(tool: str, text: str, cache_id: str) -> str:
    """The tool result as the model saw it: cut at a line break within the budget."""
    budget = RESPONSE_BUDGETS.get(tool, DEFAULT_RESPONSE_BUDGET)
    if len(text) <= budget:
        return text
    cut = text.rfind("\n", 0, budget + 1)
    end = cut if cut > 0 else budget
    remaining = len(text) - end
    return (
        text[:end]
        + f'\n… [truncated — {remaining} chars remaining, use read_more(cache_id="{cache_id}")'
        + " to continue]"
    )


def token_estimate(content: str) -> int:
    return -(-len(content) // 4)


@dataclass
class Session:
    """A session being written: an owner's (with a ``sessions:`` record) or a scheduler run's."""

    sid: str
    created: datetime
    #: Messages must not be later than this.
    latest: datetime
    channel: str = ""
    #: Scheduler runs: the agent id (``scheduler-<channel>-<ms>``) and trigger source.
    agent: str = ""
    source: str = ""
    task: str = ""
    succeeded: bool = True
    taint: str = "PUBLIC"
    history: list[dict[str, str]] = field(default_factory=list)
    lineage: list[str] = field(default_factory=list)
    messages: int = 0
    last_time: datetime | None = None
    reply: str = ""

    @property
    def scheduler(self) -> bool:
        return bool(self.agent)


@dataclass
class _Planned:
    role: str
    offset: float
    content: str = ""
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    result: str = ""
    escalate_to: str = ""
    fwd_parent: bool = False


class Writer:
    """Appends the rows of conversations, counting keys against a budget."""

    def __init__(self, g: Gen, owner: str, rows: list[tuple[str, str]]) -> None:
        self.g = g
        self.owner = owner
        self.rows = rows
        #: lineage-hash key -> (row index, accessed_at): the latest record wins.
        self.hashes: dict[str, tuple[int, str]] = {}
        self.newer_build = g.now - timedelta(days=NEWER_BUILD_DAYS)

    # -- planning ---------------------------------------------------------------

    def _tool_call(self, level: str, offset: float) -> _Planned:
        g, rng = self.g, self.g.rng
        tool = rng.choices(_TOOL_NAMES, weights=_TOOL_WEIGHTS)[0]
        planned = _Planned("tool_call", offset, tool=tool, args=self._args(tool))
        if tool in _LONG_RESULT_TOOLS and rng.random() < 0.04:
            lines = []
            size = 0
            target = rng.randint(8_000, 30_000)
            while size < target:
                line = g.text(1, 3)
                lines.append(line)
                size += len(line) + 1
            planned.result = "\n".join(lines)
        else:
            planned.result = g.text(1, 6)
        # What the call asked for heads its result: equal results (the same file
        # read twice) are rare, and share one lineage-hash key when they happen.
        header = " ".join(str(value) for value in planned.args.values())[:200]
        planned.result = f"{tool}: {header}\n{planned.result}" if header else planned.result
        if level != "RESTRICTED" and rng.random() < 0.12:
            planned.escalate_to = rng.choice(LEVELS[LEVELS.index(level) + 1 :])
        return planned

    def _args(self, tool: str) -> dict[str, Any]:
        g, rng = self.g, self.g.rng
        word = g.word
        if tool in ("web_search", "memory_search", "obsidian_search"):
            return {"query": " ".join(word() for _ in range(rng.randint(1, 4)))}
        if tool in ("web_fetch", "browser_snapshot"):
            return {"url": f"https://{word()}.example.com/{word()}/{word()}"}
        if tool == "memory_save":
            return {"key": f"{word()}-{word()}", "content": g.text(1, 2), "tags": [word()]}
        if tool == "read_file":
            return {"path": f"/home/owner/{word()}/{word()}.md"}
        if tool == "write_file":
            body = g.text(1, 4) if rng.random() < 0.8 else g.text(30, 60)
            return {"path": f"/home/owner/{word()}/{word()}.md", "content": body}
        if tool == "run_command":
            return {"command": f"{rng.choice(['ls -la', 'git log -5', 'df -h', 'cat'])} {word()}"}
        if tool == "gmail_search":
            return {"query": f"from:{word()} newer_than:{rng.randint(1, 30)}d"}
        if tool == "calendar_list_events":
            return {"days": rng.randint(1, 14)}
        if tool == "github_issues":
            return {"repo": f"acme/{word()}", "state": rng.choice(["open", "closed"])}
        if tool == "mcp_linear_list_issues":
            return {"team": word(), "limit": 20}
        if tool == "todo_write":
            return {"todos": [{"content": g.text(1, 1), "status": "pending"}]}
        return {}

    def plan(self, session: Session, budget: int) -> tuple[list[_Planned], int]:
        """The messages of ``session`` within ``budget`` keys; the keys they take.

        The keys counted: each message, 3 or 4 per tool call (its lineage
        record and index keys) and the session's counter. Lineage-hash keys
        that collide are counted as they come, when the rows are written.
        """
        rng = self.g.rng
        if budget < 2:
            return [], 0
        planned: list[_Planned] = []
        used = 1  # conv-session:<session>
        offset = 0.0
        level = session.taint
        tools_so_far = 0

        def take(cost: int) -> bool:
            nonlocal used
            if used + cost > budget:
                return False
            used += cost
            return True

        turns = 1 if session.scheduler else 1_000_000_000
        compacted_at = 0
        while turns > 0:
            turns -= 1
            # The gateway compacts when the history fills 70% of the model's context.
            compact = len(planned) - compacted_at >= 40 and rng.random() < 0.05
            if compact and used + 3 <= budget and take(1):
                planned.append(_Planned("compaction_summary", offset))
                offset += rng.uniform(1, 5)
                compacted_at = len(planned)
            if used + 2 > budget:  # a question only when its answer fits too
                break
            take(1)
            user = session.task if session.scheduler else self.g.text(1, 3)
            planned.append(_Planned("user", offset, content=user))
            offset += rng.uniform(1, 20)
            calls = rng.choices((0, 1, 2, 3, 4), weights=(50, 25, 13, 8, 4))[0]
            if session.scheduler:
                calls = rng.choices((1, 2, 3), weights=(5, 3, 2))[0]
            for _ in range(calls):
                fwd = 1 if tools_so_far and rng.random() < 0.02 else 0
                if used + 4 + fwd + 1 > budget:
                    break  # no room for another call: the agent answers with what it has
                take(4 + fwd)
                call = self._tool_call(level, offset)
                call.fwd_parent = bool(fwd)
                planned.append(call)
                tools_so_far += 1
                if call.escalate_to:
                    level = call.escalate_to
                offset += rng.uniform(1, 30)
            if session.scheduler and not session.succeeded:
                break  # the run failed before the agent answered
            take(1)
            planned.append(_Planned("assistant", offset, content=self.g.text(1, 8)))
            offset += rng.expovariate(1 / 600)
        return planned, used

    # -- writing ----------------------------------------------------------------

    def write(self, session: Session, planned: list[_Planned]) -> None:
        """The rows of ``planned``: times spread over the session, then serialised."""
        if not planned:
            return
        g, rng = self.g, self.g.rng
        room = max(0.0, (session.latest - session.created).total_seconds())
        span = planned[-1].offset or 1.0
        scale = min(1.0, room / span) if span > 0 else 0.0
        compacted_before = -1
        for index, item in enumerate(planned):
            if item.role == "compaction_summary":
                compacted_before = index
        level = session.taint
        for seq, item in enumerate(planned):
            stamp = session.created + timedelta(seconds=item.offset * scale)
            when = to_iso(stamp)
            newer = stamp >= self.newer_build
            record: dict[str, Any] = {
                "message_id": g.uuid(),
                "session_id": session.sid,
                "role": item.role,
                "content": "",
                "classification": level,
                "timestamp": when,
                "sequence": seq,
                "compacted": seq < compacted_before,
            }
            if item.role == "tool_call":
                if item.escalate_to:  # the result raised the session's taint
                    session.history.append(
                        {
                            "timestamp": when,
                            "previousLevel": level,
                            "newLevel": item.escalate_to,
                            "reason": f"{item.tool} returned {item.escalate_to} data",
                        }
                    )
                    level = item.escalate_to
                    record["classification"] = level
                lid = self._lineage(session, item, level, when)
                record["content"] = cap_result(item.tool, item.result, g.cache_id())
                record["lineage_id"] = lid
                record["tool_name"] = item.tool
                record["tool_args"] = truncate_tool_args(item.args)
                if newer:
                    record["tool_call_id"] = f"call_{g.cache_id()}{g.cache_id()}"
            else:
                if item.role == "compaction_summary":
                    item.content = (
                        f"[Conversation context: {seq} messages were exchanged. Topics "
                        f"discussed: {', '.join(g.word() for _ in range(4))}. "
                        "Continue the conversation from here.]"
                    )
                record["content"] = item.content
                record["token_count"] = token_estimate(item.content)
                if newer and item.role == "assistant":
                    provider, model = rng.choice(MODELS)
                    record["provider"] = provider
                    record["model"] = model
                if item.role == "assistant":
                    session.reply = item.content
            self.rows.append((f"conv:{session.sid}:{seq:012d}", dumps(record)))
            session.last_time = stamp
        session.taint = level
        session.messages = len(planned)
        self.rows.append((f"conv-session:{session.sid}", dumps({"lastSequence": len(planned) - 1})))

    def _lineage(self, session: Session, item: _Planned, level: str, when: str) -> str:
        g = self.g
        lid = g.uuid()
        content_hash = hashlib.sha256(item.result.encode("utf-8")).hexdigest()
        record: dict[str, Any] = {
            "lineage_id": lid,
            "content_hash": content_hash,
            "origin": {
                "source_type": source_type(item.tool),
                "source_name": item.tool,
                "accessed_at": when,
                "accessed_by": self.owner,
                "access_method": item.tool,
            },
            "classification": {"level": level, "reason": f"Tool call: {item.tool}"},
            "sessionId": session.sid,
        }
        parent = g.rng.choice(session.lineage) if item.fwd_parent and session.lineage else None
        if parent is not None:
            record["inputLineageIds"] = [parent]
        if level == "PUBLIC":
            record["content"] = item.result
        self.rows.append((f"lineage:{lid}", dumps(record)))
        self.rows.append((f"lineage-session:{session.sid}:{lid}", lid))
        if parent is not None:
            self.rows.append((f"lineage-fwd:{parent}:{lid}", lid))
        hash_key = f"lineage-hash:{content_hash}"
        seen = self.hashes.get(hash_key)
        if seen is None:
            self.hashes[hash_key] = (len(self.rows), when)
            self.rows.append((hash_key, lid))
        elif when >= seen[1]:  # the latest write wins
            self.rows[seen[0]] = (hash_key, lid)
            self.hashes[hash_key] = (seen[0], when)
        session.lineage.append(lid)
        return lid

    def todos(self, session: Session) -> tuple[str, str]:
        """A scheduler run's todo list, written during the run."""
        g, rng = self.g, self.g.rng
        start = session.created
        end = session.last_time or start
        items = []
        for _ in range(rng.randint(1, 4)):
            created = start + (end - start) * rng.random()
            updated = created + (end - created) * rng.random()
            items.append(
                {
                    "id": g.uuid(),
                    "content": g.text(1, 1),
                    "status": rng.choice(["pending", "in_progress", "completed"]),
                    "priority": rng.choice(["low", "medium", "high"]),
                    "created_at": to_iso(created),
                    "updated_at": to_iso(updated),
                }
            )
        return f"todos:{session.agent}", dumps({"todos": items})
