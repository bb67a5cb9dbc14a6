"""Retention sweeps on a live store: read, plan, then apply in short paced batches.

The gateway sets no busy timeout: while we hold SQLite's write lock, its
writes fail at once and are lost. So the apply step

- writes in short transactions whose size adapts so that each holds the
  lock about :attr:`Pacing.max_lock` seconds, and rests after each at least
  as long as it held the lock (and at least :attr:`Pacing.min_pause`, longer
  than the steps of SQLite's busy handler), so a writer waiting on us gets
  in at its next try;
- runs a PASSIVE WAL checkpoint between batches on SQLite, so the WAL stays
  small during the sweep and the gateway's next commit has no large
  checkpoint to finish after it;
- deletes each record only if it still holds the value the plan read
  (compare-and-delete) and trims ``cron-history:`` arrays by compare-and-swap,
  so a record the gateway rewrote meanwhile is kept;
- re-checks the guard of each follower key (``taint:``, ``conv-session:``,
  ``lineage-*:``) just before deleting it;
- deletes what things follow before the followers, so an interrupted sweep
  leaves at worst orphaned index keys, which the next sweep deletes.

Interrupted (Ctrl-C, SIGTERM turned into KeyboardInterrupt by the CLI) the
current batch rolls back, an audit record of the partial sweep is written
and :class:`SweepInterrupted` (exit 130) is raised. Killed outright, the
current transaction never commits. Either way the store is consistent and the
next sweep finishes the job. Two sweeps never run at once: the sweep holds
the provider's ``retention-sweep`` lock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from triggerfish_cli import audit
from triggerfish_cli.errors import RefusedError, TriggerfishError
from triggerfish_cli.retention import Policies
from triggerfish_cli.retention_plan import Action, Plan, make_plan, needed
from triggerfish_cli.serialization import to_iso, utc_now
from triggerfish_cli.storage.provider import StorageProvider

SWEEP_LOCK = "retention-sweep"

#: Called with the number of plan actions just handled.
ProgressFn = Callable[[int], None]


class SweepInterrupted(TriggerfishError):
    """The sweep was interrupted; what it finished stays, the rest is for the next sweep."""

    exit_code = 130


@dataclass(frozen=True)
class Pacing:
    """How hard a sweep may press on the store."""

    #: Most records per write transaction.
    batch_size: int = 2000
    #: Aim: hold the write lock at most this long per transaction (seconds).
    max_lock: float = 0.04
    #: Fixed rest after each transaction; None: as long as the transaction took.
    pause: float | None = None
    #: Shortest rest; SQLite's busy handler retries a waiting writer every
    #: 25 ms at this stage, so it gets in while we rest.
    min_pause: float = 0.03
    #: PASSIVE WAL checkpoint between batches (SQLite).
    checkpoint: bool = True


def read_plan(
    provider: StorageProvider,
    policies: Policies,
    now: datetime,
    *,
    only: Collection[str] | None = None,
) -> Plan:
    """Read what the plan needs (one snapshot where the backend has one) and plan.

    Without a snapshot (the generic fallback) namespaces are read followers
    first, so a key written meanwhile finds the record it follows; either
    way the guards are checked again when the sweep applies the plan.
    """
    from triggerfish_cli.serialization import fast_loads

    prefixes = needed(policies, only)
    records = provider.scan_many(prefixes, batch_size=5000)
    try:
        return make_plan(records, policies, now, only=only, complete=prefixes, loads=fast_loads())
    finally:
        close = getattr(records, "close", None)
        if close is not None:  # end the snapshot even when planning failed
            close()


def check_limit(plan: Plan, max_delete: int | None) -> None:
    """The circuit breaker: refuse before deleting anything when the plan is too big."""
    if max_delete is not None and plan.deletes > max_delete:
        raise RefusedError(
            f"the plan deletes {plan.deletes} records, more than --max-delete {max_delete}; "
            "nothing was deleted",
            hint="check `retention plan`, then raise --max-delete if that is intended",
        )


@dataclass
class NamespaceResult:
    namespace: str
    policy: str
    planned: int = 0
    deleted: int = 0
    trimmed: int = 0
    #: Array entries removed by trims (cron-history runs).
    entries_removed: int = 0
    #: Kept: rewritten (or deleted) by someone else since the plan read it.
    changed: int = 0
    #: Kept: its guard failed (its session got a message, its record is back).
    guarded: int = 0
    bytes: int = 0
    unknown_age: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SweepResult:
    store: str
    as_of: datetime
    started: datetime
    namespaces: list[NamespaceResult]
    finished: datetime | None = None
    interrupted: bool = False
    error: str | None = None
    audit_key: str | None = None
    unknown_namespaces: dict[str, int] = field(default_factory=dict)

    def total(self, name: str) -> int:
        return sum(int(getattr(result, name)) for result in self.namespaces)

    def counts(self) -> dict[str, int]:
        names = ("planned", "deleted", "trimmed", "entries_removed", "changed", "guarded", "bytes")
        return {name: self.total(name) for name in (*names, "unknown_age")}

    def as_dict(self) -> dict[str, Any]:
        finished = self.finished or utc_now()
        return {
            "store": self.store,
            "as_of": to_iso(self.as_of),
            "started_at": to_iso(self.started),
            "finished_at": to_iso(finished),
            "seconds": round((finished - self.started).total_seconds(), 3),
            "interrupted": self.interrupted,
            "error": self.error,
            **self.counts(),
            "audit_key": self.audit_key,
            "namespaces": [result.as_dict() for result in self.namespaces],
        }


class _Pacer:
    def __init__(self, pacing: Pacing, provider: StorageProvider) -> None:
        self.pacing = pacing
        self.size = max(1, min(pacing.batch_size, 500))
        self.checkpoint = _checkpointer(provider) if pacing.checkpoint else None

    def rest(self, held: float) -> None:
        """Adapt the batch size to the lock time, checkpoint, then rest."""
        pacing = self.pacing
        if held > pacing.max_lock:
            self.size = max(1, int(self.size * pacing.max_lock / held * 0.9))
        elif held < pacing.max_lock / 2:
            self.size = min(pacing.batch_size, max(self.size + 1, int(self.size * 1.5)))
        pause = pacing.pause if pacing.pause is not None else max(pacing.min_pause, held)
        started = time.monotonic()
        if self.checkpoint is not None:
            self.checkpoint()
        left = pause - (time.monotonic() - started)
        if left > 0:
            time.sleep(left)


def _bulk(provider: StorageProvider) -> contextlib.AbstractContextManager[None]:
    from triggerfish_cli.storage.sqlite import SqliteStorage

    if isinstance(provider, SqliteStorage):
        return provider.relaxed_durability()
    return contextlib.nullcontext()


def _checkpointer(provider: StorageProvider) -> Callable[[], object] | None:
    from triggerfish_cli.storage.sqlite import SqliteStorage

    if isinstance(provider, SqliteStorage):
        return lambda: provider.checkpoint("PASSIVE")
    return None


def apply_plan(
    provider: StorageProvider,
    plan: Plan,
    *,
    pacing: Pacing | None = None,
    on_progress: ProgressFn | None = None,
) -> SweepResult:
    """Apply ``plan`` (see the module docstring) and write one audit record."""
    pacer = _Pacer(pacing or Pacing(), provider)
    result = SweepResult(
        provider.describe(),
        plan.now,
        utc_now(),
        [
            NamespaceResult(
                ns_plan.policy.namespace,
                ns_plan.policy.spec,
                planned=len(ns_plan.actions),
                unknown_age=len(ns_plan.unknown),
            )
            for ns_plan in plan.namespaces.values()
            if not ns_plan.policy.held
        ],
        unknown_namespaces=dict(plan.unknown_namespaces),
    )
    by_name = {entry.namespace: entry for entry in result.namespaces}
    memory = _MemoryIndex.of(provider) if "memory:" in plan.namespaces else None
    try:
        with _bulk(provider):
            _apply_all(provider, plan, pacer, by_name, memory, on_progress)
    except KeyboardInterrupt:
        result.interrupted = True
        _finish(provider, result, quiet=True)
        raise SweepInterrupted(
            f"sweep interrupted after deleting {result.total('deleted')} and trimming "
            f"{result.total('trimmed')} of {result.total('planned')} planned records; "
            "the store is consistent and the next sweep finishes the job"
        ) from None
    except BaseException as exc:
        result.error = str(exc) or type(exc).__name__
        _finish(provider, result, quiet=True)
        raise
    if pacer.checkpoint is not None:
        pacer.checkpoint()
    _finish(provider, result)
    return result


def _apply_all(
    provider: StorageProvider,
    plan: Plan,
    pacer: _Pacer,
    by_name: dict[str, NamespaceResult],
    memory: _MemoryIndex | None,
    on_progress: ProgressFn | None,
) -> None:
    remaining = sum(len(ns_plan.actions) for ns_plan in plan.namespaces.values())
    for prefix, ns_plan in plan.namespaces.items():
        actions, done = ns_plan.actions, 0
        while done < len(actions):
            batch = actions[done : done + pacer.size]
            done += len(batch)
            remaining -= len(batch)
            held = _apply_batch(provider, batch, by_name[prefix], memory)
            if on_progress is not None:
                on_progress(len(batch))
            if remaining:
                pacer.rest(held)


def _finish(provider: StorageProvider, result: SweepResult, *, quiet: bool = False) -> None:
    """The one audit record of this sweep (best effort when the sweep failed)."""
    result.finished = utc_now()
    details: dict[str, Any] = {
        "as_of": to_iso(result.as_of),
        "interrupted": result.interrupted,
        "namespaces": {
            entry.namespace: {
                name: value
                for name, value in entry.as_dict().items()
                if name != "namespace" and value
            }
            for entry in result.namespaces
        },
    }
    if result.error:
        details["error"] = result.error
    try:
        result.audit_key = audit.record(
            provider,
            "retention_sweep",
            target=provider.describe(),
            counts=result.counts(),
            details=details,
        )
    except Exception:
        if not quiet:
            raise


def _apply_batch(
    provider: StorageProvider,
    batch: Sequence[Action],
    counts: NamespaceResult,
    memory: _MemoryIndex | None,
) -> float:
    """Apply one batch; returns the seconds spent holding the write lock."""
    ready = _guarded(provider, batch)
    counts.guarded += len(batch) - len(ready)
    deletes = [(action.key, action.expected) for action in ready if action.is_delete]
    trims = [(a.key, a.expected, a.replacement or "") for a in ready if not a.is_delete]
    started = time.monotonic()
    deleted = trimmed = 0
    if deletes:
        if memory is not None and counts.namespace == "memory:":
            deleted = memory.delete_if_unchanged(deletes)
        else:
            deleted = provider.delete_if_unchanged(deletes, batch_size=len(deletes))
    if trims:
        trimmed = provider.replace_if_unchanged(trims, batch_size=len(trims))
    held = time.monotonic() - started
    counts.deleted += deleted
    counts.trimmed += trimmed
    counts.changed += len(ready) - deleted - trimmed
    if deleted + trimmed == len(ready):
        applied: Sequence[Action] = ready
    else:  # some were rewritten meanwhile: find out which ones we did change
        now = provider.get_many(action.key for action in ready)
        applied = [a for a in ready if now.get(a.key) == a.replacement]
    counts.bytes += sum(action.bytes for action in applied)
    counts.entries_removed += sum(action.removed for action in applied if not action.is_delete)
    return held


def _guarded(provider: StorageProvider, batch: Sequence[Action]) -> list[Action]:
    """The actions of ``batch`` whose guard still holds."""
    absent = [a.guard.absent for a in batch if a.guard is not None and a.guard.absent]
    present = set(provider.get_many(absent)) if absent else set()
    ready = []
    for action in batch:
        guard = action.guard
        if guard is None:
            ready.append(action)
        elif guard.absent is not None:
            if guard.absent not in present:
                ready.append(action)
        elif guard.prefix is not None:
            newer = provider.scan_keys(guard.prefix, start_after=guard.after, batch_size=1)
            if next(iter(newer), None) is None:
                ready.append(action)
    return ready


class _MemoryIndex:
    """SQLite: delete soft-deleted memories with any stale memory_fts/memory_meta row.

    The gateway removed the index rows at soft delete; a row still there is
    stale and goes in the same transaction as the kv row.
    """

    def __init__(self, provider: Any, tables: set[str]) -> None:
        self.provider = provider
        self.tables = tables

    @classmethod
    def of(cls, provider: StorageProvider) -> _MemoryIndex | None:
        from triggerfish_cli.storage.sqlite import MEMORY_INDEX_TABLES, SqliteStorage

        if not isinstance(provider, SqliteStorage):
            return None
        return cls(provider, provider.tables() & set(MEMORY_INDEX_TABLES))

    def delete_if_unchanged(self, items: Sequence[tuple[str, str]]) -> int:
        gone: list[tuple[str, str, str]] = []
        with self.provider.transaction("retention: delete memories") as conn:
            for key, expected in items:
                cursor = conn.execute("DELETE FROM kv WHERE key = ? AND value = ?", (key, expected))
                parts = key.split(":", 3)
                if cursor.rowcount and len(parts) == 4:
                    gone.append((parts[1], parts[2], parts[3]))
            if gone and "memory_meta" in self.tables:
                conn.executemany(
                    "DELETE FROM memory_meta WHERE agent_id = ? AND classification = ? AND key = ?",
                    gone,
                )
            if gone and "memory_fts" in self.tables:
                for start in range(0, len(gone), 300):  # FTS5 columns have no index: one pass
                    chunk = gone[start : start + 300]
                    rows = ",".join("(?,?,?)" for _ in chunk)
                    conn.execute(
                        "DELETE FROM memory_fts WHERE rowid IN (SELECT rowid FROM memory_fts "
                        f"WHERE (agent_id, classification, key) IN (VALUES {rows}))",
                        [value for row in chunk for value in row],
                    )
        return len(gone)


@contextlib.contextmanager
def sweep_lock(provider: StorageProvider, wait: float = 0.0) -> Iterator[None]:
    """Hold the store's retention-sweep lock (BusyError, exit 6, when taken)."""
    with provider.lock(SWEEP_LOCK, wait):
        yield
