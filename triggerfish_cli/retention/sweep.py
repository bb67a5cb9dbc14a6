"""Retention sweeps on a live store: apply a plan (reading.py) in short paced batches.

The gateway sets no busy timeout: while we hold SQLite's write lock, its
writes fail at once and are lost. So every batch is one write transaction
through the store's write gate (SQLite: storage/sqlite/write_gate.py), which pauses
the live writers for the few milliseconds the batch holds the lock; the apply
step

- sizes batches from smoothed per-record estimates so that each holds the lock
  about :attr:`Pacing.max_lock` (the gate's budget) and adds at most
  :attr:`Pacing.wal_frames` pages to the WAL;
- leaves the WAL checkpoint to the gate, which runs one (PASSIVE) after each
  commit with everyone running again, and keeps the WAL small;
- rests between batches (:attr:`Pacing.min_pause`, and the gate's own rest
  after a freeze), so the gateway runs most of the time;
- deletes each record only if it still holds the value the plan read
  (compare-and-delete) and trims ``cron-history:`` arrays by compare-and-swap,
  so a record the gateway rewrote meanwhile is kept;
- re-checks the guard of each follower key (``taint:``, ``conv-session:``,
  ``lineage-*:``) and session just before deleting it;
- deletes what things follow before the followers, so an interrupted sweep
  leaves at worst orphaned index keys, which the next sweep deletes.

Interrupted (Ctrl-C, SIGTERM turned into KeyboardInterrupt by the CLI) the
sweep stops between two batches (signals are held back for the few tens of
milliseconds of a batch; where they cannot be, the batch rolls back), an
audit record of the partial sweep is written and :class:`SweepInterrupted`
(exit 130) is raised. Killed outright, the current transaction never
commits. Either way the store is consistent and the next sweep finishes the
job. Two sweeps never run at once: the sweep holds the provider's
``retention-sweep`` lock (:func:`sweep_lock`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from triggerfish_cli import audit
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import ExitStatus, RefusedError, TriggerfishError
from triggerfish_cli.memory.index import MemoryIndex
from triggerfish_cli.memory.indexes import index_for
from triggerfish_cli.memory.keys import PREFIX as MEMORY_PREFIX
from triggerfish_cli.memory.keys import may_name
from triggerfish_cli.retention.plan import Action, NamespacePlan, Plan, hides, seen_at
from triggerfish_cli.serialization import to_iso, utc_now
from triggerfish_cli.storage.batching import BatchSizer
from triggerfish_cli.storage.provider import StorageProvider

SWEEP_LOCK = "retention-sweep"

#: Called with the number of plan actions just handled.
ProgressFn = Callable[[int], None]


class SweepInterrupted(TriggerfishError):
    """The sweep was interrupted; what it finished stays, the rest is for the next sweep."""

    exit_code = ExitStatus.INTERRUPTED.value


@dataclass(frozen=True)
class Pacing:
    """How hard a sweep may press on the store."""

    #: Most records per write transaction.
    batch_size: int = 5000
    #: Aim: hold the write lock at most this long per transaction (seconds):
    #: the live writers are paused meanwhile (the write gate's budget).
    max_lock: float = 0.02
    #: Fixed rest after each transaction; None: :attr:`min_pause`, except on
    #: SQLite, where the write gate rests after each freeze itself (2.5 times
    #: as long as it paused the gateway) and nobody needs a rest otherwise.
    pause: float | None = None
    #: Shortest rest (seconds) on backends without a write gate.
    min_pause: float = 0.03
    #: PASSIVE WAL checkpoint between batches (SQLite: the gate runs it).
    checkpoint: bool = True
    #: Keep each batch's WAL frames under this (SQLite; counted by the gate across
    #: its transactions). None: the write gate's own budget (``frame_budget``), which
    #: keeps the WAL under the 1000 frames at which a live writer's commit runs
    #: SQLite's automatic checkpoint inside itself.
    wal_frames: int | None = None


def check_limit(plan: Plan, max_delete: int | None, taint: Level | None = None) -> None:
    """The circuit breaker: refuse before deleting anything when the plan is too big.

    It counts every delete; with memory rows hidden by ``taint`` it says no number."""
    if max_delete is not None and plan.deletes > max_delete:
        what = f"{plan.deletes} records, more than --max-delete {max_delete}"
        if taint is not None and hides(plan, taint):
            what = f"more than --max-delete {max_delete} records (memory rows above {taint.name})"
        raise RefusedError(
            f"the plan deletes {what}; nothing was deleted",
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
    #: Count only the memory rows a reader at this taint may name (None: every action).
    seen_at: Level | None = None

    def as_dict(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items() if name != "seen_at"}

    def tally(
        self,
        batch: Sequence[Action],
        ready: Sequence[Action],
        applied: Sequence[Action],
        finished: bool,
    ) -> None:
        """Add a batch's outcome: ``ready`` passed their guards, ``applied`` were done;
        the others were changed meanwhile, if the batch ``finished`` (not interrupted)."""
        batch, ready, applied = self.seen(batch), self.seen(ready), self.seen(applied)
        deletes = sum(1 for action in applied if action.is_delete)
        self.guarded += len(batch) - len(ready)
        self.deleted += deletes
        self.trimmed += len(applied) - deletes
        self.changed += len(ready) - len(applied) if finished else 0
        self.bytes += sum(action.bytes for action in applied)
        self.entries_removed += sum(a.removed for a in applied if not a.is_delete)

    def seen(self, actions: Sequence[Action]) -> Sequence[Action]:
        """The actions this tally counts."""
        if self.seen_at is None:
            return actions
        return [action for action in actions if may_name(action.key, self.seen_at)]


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
    #: What the write gate did (SQLite): freezes, seconds the live writers were paused.
    gate: dict[str, Any] | None = None
    #: The taint the summary is for (``as_dict(shown=True)``); None: every record.
    taint: Level | None = None
    #: With a taint that hides memory rows: the ``memory:`` figures of those it may name.
    seen_memory: NamespaceResult | None = None
    #: ``--namespace``: the namespaces the sweep was limited to; None: every one.
    only: list[str] | None = None

    def tallies(self, prefix: str) -> list[NamespaceResult]:
        """What counts a namespace's outcome: its figures, and the part a reader may see."""
        found = [entry for entry in self.namespaces if entry.namespace == prefix]
        if self.seen_memory is not None and prefix == MEMORY_PREFIX:
            found.append(self.seen_memory)
        return found

    def _entries(self, shown: bool) -> list[NamespaceResult]:
        if not shown or self.seen_memory is None:
            return self.namespaces
        memory = self.seen_memory
        return [memory if entry.namespace == MEMORY_PREFIX else entry for entry in self.namespaces]

    def total(self, name: str, shown: bool = False) -> int:
        return sum(int(getattr(result, name)) for result in self._entries(shown))

    def counts(self, shown: bool = False) -> dict[str, int]:
        names = ("planned", "deleted", "trimmed", "entries_removed", "changed", "guarded", "bytes")
        return {name: self.total(name, shown) for name in (*names, "unknown_age")}

    def as_dict(self, shown: bool = False) -> dict[str, Any]:
        """The summary; ``shown``: as a reader at :attr:`taint` may see it (memory rows
        above it neither counted nor sized), for output."""
        finished = self.finished or utc_now()
        taint = {"taint": self.taint.name} if shown and self.taint is not None else {}
        return {
            "store": self.store,
            "as_of": to_iso(self.as_of),
            "started_at": to_iso(self.started),
            "finished_at": to_iso(finished),
            "seconds": round((finished - self.started).total_seconds(), 3),
            "interrupted": self.interrupted,
            "error": self.error,
            **taint,
            **self.counts(shown),
            "audit_key": self.audit_key,
            "gate": self.gate,
            "namespaces": [result.as_dict() for result in self._entries(shown)],
        }


class _Pacer:
    """Batch sizes and rests: short lock holds, a bounded WAL, room for the gateway.

    Batch sizes follow smoothed per-record estimates of lock time and WAL
    frames (a :class:`BatchSizer`, measured over all of a batch's
    transactions), so one transaction that was slow because the machine was
    busy does not collapse them.
    """

    def __init__(self, pacing: Pacing, provider: StorageProvider) -> None:
        gate = provider.write_gate
        self.pause = pacing.pause if pacing.pause is not None else 0 if gate else pacing.min_pause
        #: The write gate, which checkpoints after each commit (None: none, or not asked).
        self.gate = gate if pacing.checkpoint else None
        #: Whose running totals measure each batch (the write gate; None: the clock).
        self.meter = gate
        frames = pacing.wal_frames
        if frames is None and gate is not None:
            frames = gate.frame_budget
        self.sizer = BatchSizer(pacing.batch_size, budget=pacing.max_lock, frames=frames, first=200)

    @property
    def size(self) -> int:
        return self.sizer.size

    def rest(self, held: float, records: int, frames: int, started: float) -> None:
        """Adapt the batch size, then rest (from ``started``) so the gateway runs."""
        # Capped by the lock budget with or without live writers: other backends lock too.
        self.sizer.record(records, held, True, frames)
        left = self.pause - (time.monotonic() - started)
        if left > 0:
            time.sleep(left)

    def mark(self) -> tuple[float, int]:
        """The gate's running totals (seconds holding the lock, WAL frames) now."""
        gate = self.meter
        return (gate.total_hold, gate.total_frames) if gate is not None else (0.0, 0)

    def since(self, mark: tuple[float, int], measured: float) -> tuple[float, int]:
        """(seconds holding the lock, WAL frames written; -1 unknown) since ``mark``.

        Summed over every transaction since: the backend may cut one batch into
        several, and the last one alone says little about the batch.
        """
        gate = self.meter
        if gate is None:
            return measured, -1
        return gate.total_hold - mark[0], gate.total_frames - mark[1]

    def finish(self, provider: StorageProvider) -> None:
        """Leave the WAL fully checkpointed, so the gateway's next write starts it afresh."""
        if self.gate is None:
            return
        self.gate.settle()
        for _ in range(20):
            busy, frames, done = provider.checkpoint("PASSIVE")
            if not busy and frames == done:
                return
            time.sleep(0.05)  # the gateway is checkpointing right now


def apply_plan(
    provider: StorageProvider,
    plan: Plan,
    *,
    pacing: Pacing | None = None,
    on_progress: ProgressFn | None = None,
    taint: Level | None = None,
    only: Collection[str] | None = None,
) -> SweepResult:
    """Apply ``plan`` (see the module docstring) and write one audit record.

    ``only``: the namespaces the plan was limited to (``--namespace``), said in the
    audit record (such a sweep is not the "last successful sweep" of ``status``).

    ``taint``: whose eyes the result is also counted for (``as_dict(shown=True)``, the
    message when interrupted): the memory rows above it are deleted as the plan says,
    but neither counted nor sized there (the audit record counts everything)."""
    pacer = _Pacer(pacing or Pacing(), provider)
    result = SweepResult(
        provider.describe(),
        plan.now,
        utc_now(),
        [_planned(ns_plan) for ns_plan in plan.namespaces.values() if not ns_plan.policy.held],
        taint=taint,
        only=sorted(only) if only is not None else None,
    )
    seen = seen_at(plan, taint).namespaces.get(MEMORY_PREFIX)
    if hides(plan, taint) and seen is not None and not seen.policy.held:
        result.seen_memory = _planned(seen, taint)
    memory = index_for(provider) if MEMORY_PREFIX in plan.namespaces else None
    try:
        with provider.bulk_writes():
            _apply_all(provider, plan, pacer, result, memory, on_progress)
    except KeyboardInterrupt:
        result.interrupted = True
        _finish(provider, result, quiet=True)
        raise SweepInterrupted(
            f"sweep interrupted after deleting {result.total('deleted', True)} and trimming "
            f"{result.total('trimmed', True)} of {result.total('planned', True)} planned "
            "records; the store is consistent and the next sweep finishes the job"
        ) from None
    except BaseException as exc:
        result.error = str(exc) or type(exc).__name__
        _finish(provider, result, quiet=True)
        raise
    pacer.finish(provider)
    _finish(provider, result)
    return result


def _planned(ns_plan: NamespacePlan, seen_at: Level | None = None) -> NamespaceResult:
    policy = ns_plan.policy
    planned, unknown = len(ns_plan.actions), len(ns_plan.unknown)
    return NamespaceResult(
        policy.namespace, policy.spec, planned=planned, unknown_age=unknown, seen_at=seen_at
    )


def _apply_all(
    provider: StorageProvider,
    plan: Plan,
    pacer: _Pacer,
    result: SweepResult,
    memory: MemoryIndex | None,
    on_progress: ProgressFn | None,
) -> None:
    remaining = sum(len(ns_plan.actions) for ns_plan in plan.namespaces.values())
    for prefix, ns_plan in plan.namespaces.items():
        actions, done = ns_plan.actions, 0
        while done < len(actions):
            batch = actions[done : done + pacer.size]
            done += len(batch)
            remaining -= len(batch)
            tallies = result.tallies(prefix)
            with _signals_deferred():
                held, frames, committed = _apply_batch(provider, batch, tallies, memory, pacer)
            if on_progress is not None:  # the actions the last tally may see
                on_progress(len(tallies[-1].seen(batch)))
            if remaining:
                pacer.rest(held, len(batch), frames, committed)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for one batch (tens of milliseconds).

    A Ctrl-C or kill then lands between batches: the batch is either wholly
    done and counted, or not started, and the audit record is exact. Where
    signals cannot be held (not the main thread, not Unix) an interrupt
    inside a batch still rolls its transaction back and is reconciled.
    """
    held = (signal.SIGINT, signal.SIGTERM)
    if not hasattr(signal, "pthread_sigmask") or (
        threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _finish(provider: StorageProvider, result: SweepResult, *, quiet: bool = False) -> None:
    """The one audit record of this sweep (best effort when the sweep failed)."""
    result.finished = utc_now()
    result.gate = provider.gate_stats()
    details: dict[str, Any] = {
        "as_of": to_iso(result.as_of),
        "interrupted": result.interrupted,
        **({"only": result.only} if result.only is not None else {}),
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
    counts: Sequence[NamespaceResult],
    memory: MemoryIndex | None,
    pacer: _Pacer,
) -> tuple[float, int, float]:
    """Apply one batch: (seconds holding the write lock, WAL frames written or -1,
    when it committed). ``counts``: its namespace's tallies (SweepResult.tallies)."""
    ready = _guarded(provider, batch)
    deletes = [(action.key, action.expected) for action in ready if action.is_delete]
    trims = [(a.key, a.expected, a.replacement or "") for a in ready if not a.is_delete]
    started = time.monotonic()
    mark = pacer.mark()
    deleted = trimmed = 0
    try:
        if deletes:
            if memory is not None and counts[0].namespace == MEMORY_PREFIX:
                # The index deletes the kv rows and any stale index rows of theirs
                # (the gateway removed them at soft delete) in one transaction.
                deleted = memory.hard_delete(deletes)
            else:
                deleted = provider.delete_if_unchanged(deletes, batch_size=len(deletes))
        if trims:
            trimmed = provider.replace_if_unchanged(trims, batch_size=len(trims))
    except KeyboardInterrupt:
        # Interrupted inside a write (rolled back) or just after a commit:
        # count from the store what this batch did, so the audit is exact.
        _count(provider, batch, ready, counts, None)
        raise
    committed = time.monotonic()
    held, frames = pacer.since(mark, committed - started)
    _count(provider, batch, ready, counts, (deleted, trimmed))
    return held, frames, committed


def _count(
    provider: StorageProvider,
    batch: Sequence[Action],
    ready: Sequence[Action],
    counts: Sequence[NamespaceResult],
    done: tuple[int, int] | None,
) -> None:
    """Add what a batch applied to ``counts``; ``done``: (deleted, trimmed) if known."""
    if done is not None and sum(done) == len(ready):
        applied: Sequence[Action] = ready
    else:  # some were rewritten meanwhile (or we were interrupted): look
        now = provider.get_many(action.key for action in ready)
        applied = [a for a in ready if now.get(a.key) == a.replacement]
    for tally in counts:
        tally.tally(batch, ready, applied, done is not None)


def _guarded(provider: StorageProvider, batch: Sequence[Action]) -> list[Action]:
    """The actions of ``batch`` whose guard still holds."""
    absent = [a.guard.absent for a in batch if a.guard is not None and a.guard.absent]
    present = set(provider.get_many(absent)) if absent else set()
    probes: list[tuple[Action, str, str | None]] = [
        (action, action.guard.prefix, action.guard.after)
        for action in batch
        if action.guard is not None and action.guard.prefix is not None
    ]
    answers = provider.any_keys([(prefix, after) for _, prefix, after in probes])
    newer = {id(probe[0]) for probe, hit in zip(probes, answers, strict=True) if hit}
    ready = []
    for action in batch:
        guard = action.guard
        if guard is None:
            ready.append(action)
        elif guard.absent is not None:
            if guard.absent not in present:
                ready.append(action)
        elif id(action) not in newer:
            ready.append(action)
    return ready


@contextlib.contextmanager
def sweep_lock(provider: StorageProvider, wait: float = 0.0) -> Iterator[None]:
    """Hold the store's retention-sweep lock (BusyError, exit 6, when taken)."""
    with provider.lock(SWEEP_LOCK, wait):
        yield
