"""One migration run: copy, verify, finish (see the package docstring)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from triggerfish_cli import audit, namespaces
from triggerfish_cli.checksums import (
    Accumulator,
    NamespaceCheck,
    RangeSums,
    Sums,
    compare,
    drill_down,
    namespace_sums,
)
from triggerfish_cli.errors import (
    InvalidDataError,
    TriggerfishError,
    UsageError,
    VerificationError,
)
from triggerfish_cli.memory.indexes import bring_in_line
from triggerfish_cli.migrate.planning import (
    DEFAULT_BATCH,
    PROGRESS_KEY,
    Plan,
    Prepared,
    Progress,
)
from triggerfish_cli.serialization import now_iso, parse_iso, utc_now
from triggerfish_cli.storage.backends import gateway_index
from triggerfish_cli.storage.provider import StorageProvider, batched
from triggerfish_cli.threads import Worker, prefetched

Callback = Callable[[int], None]


# -- the migration ---------------------------------------------------------------------


@dataclass
class Result:
    plan: Plan
    copied: int = 0
    seconds: float = 0.0
    copy_seconds: float = 0.0
    checks: dict[str, NamespaceCheck] = field(default_factory=dict)
    audit_key: str | None = None
    memory_keys: bool = False
    index_note: str | None = None

    @property
    def verified(self) -> bool:
        return all(check.ok(self.plan.merge) for check in self.checks.values())

    def as_dict(self) -> dict[str, Any]:
        merge = self.plan.merge
        return {
            **self.plan.as_dict(),
            "dry_run": False,
            "copied": self.copied,
            "seconds": round(self.seconds, 3),
            "copy_seconds": round(self.copy_seconds, 3),
            "verified": self.verified,
            "namespaces": [check.as_dict(merge) for check in self.checks.values()],
            "notes": self.notes(),
        }

    def notes(self) -> list[str]:
        notes = []
        if self.index_note is not None:
            notes.append(self.index_note)
        elif self.memory_keys:
            notes.append(
                "the memory search index is not copied (it is derived from the memory: keys): "
                "rebuild it on the target with `triggerfish-admin memory reindex`"
            )
        return notes


def copy(
    source: StorageProvider,
    target: StorageProvider,
    the_plan: Plan,
    *,
    batch_size: int = DEFAULT_BATCH,
    on_batch: Callback | None = None,
    sums: Accumulator | None = None,
    passed: Callable[[str], None] | None = None,
) -> int:
    """Stream the keys after the plan's resume point into the target, recording progress.

    The source is read (and, with ``sums``, checksummed) on a thread while the
    target writes the batch before. ``passed`` hears the last key written
    after each batch.
    """
    if the_plan.resume is not None:
        progress = replace(the_plan.resume)  # the plan keeps where this run started
    else:
        progress = Progress(source.describe(), the_plan.merge, now_iso())
    target.set(PROGRESS_KEY, progress.dump())
    if source.get(PROGRESS_KEY) is not None:  # the source sees what we wrote: one store
        target.delete(PROGRESS_KEY)
        raise UsageError("--from and --to are the same store, reached by two names")
    copied = 0
    rows = source.scan(start_after=progress.last_key, batch_size=batch_size)
    for batch in prefetched(_summed(batched(rows, batch_size), sums)):
        target.set_batched(batch)
        copied += len(batch)
        progress.last_key = batch[-1][0]
        progress.copied += len(batch)
        target.set(PROGRESS_KEY, progress.dump())
        if passed is not None:
            passed(progress.last_key)
        if on_batch is not None:
            on_batch(len(batch))
    return copied


def _summed(
    batches: Iterator[list[tuple[str, str]]], sums: Accumulator | None
) -> Iterator[list[tuple[str, str]]]:
    for batch in batches:
        if sums is not None:
            sums.add(batch)
        yield batch


# -- verification -------------------------------------------------------------------------


def verify(
    source: StorageProvider,
    target: StorageProvider,
    *,
    merge: bool,
    source_sums: dict[str, Sums] | None = None,
    target_sums: dict[str, Sums] | None = None,
    batch_size: int = DEFAULT_BATCH,
    on_key: Callback | None = None,
) -> dict[str, NamespaceCheck]:
    """Compare the stores per namespace (see :mod:`triggerfish_cli.checksums`).

    Without ``--merge`` both sides get counts and checksums on their own and
    at the same time: the target's computed by the server (Postgres) or by
    reading it; the source's likewise, or ``source_sums`` taken while it was
    copied. Only a namespace that differs is then walked side by side to
    count the missing, different and extra keys. With ``--merge`` the target
    holds keys of its own, so every namespace is walked side by side.
    """
    if merge:
        return compare(source, target, ignore=[PROGRESS_KEY], batch_size=batch_size, on_key=on_key)
    worker = None
    if source_sums is None:
        worker = Worker(lambda: namespace_sums(source, on_key=on_key))
    if target_sums is None:
        target_sums = namespace_sums(target)
    if worker is not None:
        source_sums = worker.result()
    assert source_sums is not None
    recorded = target.get(PROGRESS_KEY)
    ours = namespaces.group_of(PROGRESS_KEY)
    if recorded is not None and ours in target_sums:  # our record is not compared
        target_sums[ours].remove(PROGRESS_KEY.encode(), recorded.encode())
        if target_sums[ours].count == 0:
            del target_sums[ours]
    checks: dict[str, NamespaceCheck] = {}
    for group in sorted(set(source_sums) | set(target_sums)):
        theirs, mine = source_sums.get(group), target_sums.get(group)
        if theirs is not None and mine is not None and theirs.same(mine):
            checks[group] = NamespaceCheck(group, theirs, mine)
        else:
            checks[group] = drill_down(
                source, target, group, ignore=[PROGRESS_KEY], batch_size=batch_size
            )
    return checks


def finish(source: StorageProvider, target: StorageProvider, result: Result) -> None:
    """After a verified copy: rebuild the index, write the audit record, drop the progress
    record, in that order, each step idempotent, so that a run killed at any point is
    finished by the next one (issue 15: the progress record went first, and a kill
    before the index left a target that no rerun would touch, with neither index nor
    audit record).

    1. The progress record says the copy is verified (and where the audit record
       goes): from then on a rerun finishes without copying or verifying again.
    2. Into SQLite, the gateway's own memory search index is rebuilt from the
       copied ``memory:`` keys (the gateway searches it; elsewhere our search
       indexes or scans by itself): a repair, a no-op when already in line.
    3. The audit record, under the key named in step 1; a rerun finding it there
       does not write it again.
    4. The progress record goes.
    """
    recorded = target.get(PROGRESS_KEY)
    progress = Progress.load(recorded) if recorded is not None else None
    if progress is None:  # written by this run's copy; gone only if someone removed it
        progress = Progress(source.describe(), result.plan.merge, now_iso())
    if not progress.verified:
        progress.verified = True
        progress.memory_keys = result.memory_keys
        progress.audit = _free_audit_key(target)
        target.set(PROGRESS_KEY, progress.dump())
    result.memory_keys = progress.memory_keys
    _index(target, progress, result)
    _audit(source, target, result, progress)
    _drop_progress(target)


def _index(target: StorageProvider, progress: Progress, result: Result) -> None:
    """Step 2 of :func:`finish` (each step a function: the kill tests stop between them)."""
    if progress.memory_keys and gateway_index(target.backend):
        result.index_note = bring_in_line(target)


def _audit(
    source: StorageProvider, target: StorageProvider, result: Result, progress: Progress
) -> None:
    """Step 3 of :func:`finish`."""
    assert progress.audit is not None
    if target.get(progress.audit) is None:
        counts = {
            "copied": result.copied,
            "source_keys": result.plan.source_keys,
            "namespaces": len(result.checks),
        }
        result.audit_key = audit.record(
            target,
            "migrate",
            target=target.describe(),
            counts=counts,
            details={
                "source": source.describe(),
                "merge": result.plan.merge,
                "resumed": result.plan.resume is not None,
            },
            now=parse_iso(progress.audit.removeprefix(audit.PREFIX).rsplit(":admin_", 1)[0]),
        )
    else:
        result.audit_key = progress.audit


def _drop_progress(target: StorageProvider) -> None:
    """Step 4 of :func:`finish`."""
    target.delete(PROGRESS_KEY)


def _free_audit_key(target: StorageProvider) -> str:
    moment = utc_now()
    key = audit.audit_key(moment, "migrate")
    while target.get(key) is not None:
        moment += timedelta(milliseconds=1)
        key = audit.audit_key(moment, "migrate")
    return key


class Migration:
    """One run, in three steps: :meth:`copy`, :meth:`verify`, :meth:`finish`.

    The source's checksums are taken while copying when nothing can have
    changed it unseen: a fresh (not resumed) run from a SQLite source whose
    ``data_version`` shows no commit by anyone else meanwhile. Otherwise
    the source is read again to verify. A Postgres target checksums each
    namespace range on a second connection once the copy is past it.
    """

    def __init__(
        self,
        source: StorageProvider,
        target: StorageProvider,
        the_plan: Plan,
        *,
        batch_size: int = DEFAULT_BATCH,
    ) -> None:
        self.source, self.target, self.batch_size = source, target, batch_size
        self.result = Result(the_plan)
        self._started = time.perf_counter()
        self._version = source.data_version()
        fresh = the_plan.resume is None and not the_plan.merge
        self._streamed = Accumulator() if self._version is not None and fresh else None
        self._fresh = fresh
        self._target_sums: dict[str, Sums] | None = None
        self._copied_now = 0

    @property
    def finishing(self) -> bool:
        """Copied and verified by a run that was killed before it finished."""
        return self.result.plan.target_state == "finishing"

    @classmethod
    def of(cls, prepared: Prepared, *, batch_size: int = DEFAULT_BATCH) -> Migration:
        """The run of a confirmed plan: the target created when missing, and rows merged
        into a store that may hold memories checked first (no write-down)."""
        target = prepared.ready()
        return cls(prepared.source, target, prepared.plan, batch_size=batch_size)

    @property
    def stopped(self) -> str:
        """What an interrupted copy did, and how to go on."""
        return (
            f"stopped after copying {self._copied_now} key(s) in this run; "
            "run the same command again to continue where it stopped"
        )

    def copy(self, on_batch: Callback | None = None) -> int:
        """Copy; a failure's hint says how far this run got and how to go on (not for
        a row the target cannot hold: it is named, a rerun would stop there again)."""
        self._copied_now = 0

        def advance(count: int) -> None:
            self._copied_now += count
            if on_batch is not None:
                on_batch(count)

        try:
            return self._copy(advance)
        except TriggerfishError as exc:
            if not isinstance(exc, InvalidDataError):
                exc.hint = "; ".join(part for part in (exc.hint, self.stopped) if part)
            raise

    def _copy(self, on_batch: Callback) -> int:
        if self.finishing:
            return 0
        ranges = None
        if self._fresh and hasattr(self.target, "reopen"):
            ranges = RangeSums(self.target, PROGRESS_KEY)
        try:
            self.result.copied = copy(
                self.source,
                self.target,
                self.result.plan,
                batch_size=self.batch_size,
                on_batch=on_batch,
                sums=self._streamed,
                passed=ranges.passed if ranges is not None else None,
            )
            self.result.copy_seconds = time.perf_counter() - self._started
            if ranges is not None:
                self._target_sums = ranges.result()
        finally:
            if ranges is not None:
                ranges.close()
        return self.result.copied

    @property
    def verify_reads(self) -> int:
        """How many source records verification reads (0: checksums taken meanwhile)."""
        if self.finishing or self._source_sums() is not None:
            return 0
        return self.result.plan.source_keys

    def _source_sums(self) -> dict[str, Sums] | None:
        if self._streamed is None or self.source.data_version() != self._version:
            return None  # not taken, or written during the copy: read it again
        return self._streamed.sums

    def verify(self, on_key: Callback | None = None) -> bool:
        result = self.result
        if self.finishing:  # verified before the kill; finish() takes it from there
            return True
        result.checks = verify(
            self.source,
            self.target,
            merge=result.plan.merge,
            source_sums=self._source_sums(),
            target_sums=self._target_sums,
            on_key=on_key,
        )
        result.seconds = time.perf_counter() - self._started
        result.memory_keys = "memory:" in result.checks
        return result.verified

    def finish(self) -> Result:
        """Verified: drop the progress record, write the audit record. Else start over."""
        if self.result.verified:
            finish(self.source, self.target, self.result)
        else:
            # Resuming cannot fix this (the copy went past the differences).
            self.target.delete(PROGRESS_KEY)
        return self.result


def migrate(
    source: StorageProvider,
    target: StorageProvider,
    the_plan: Plan,
    *,
    batch_size: int = DEFAULT_BATCH,
    on_batch: Callback | None = None,
    on_verify: Callback | None = None,
) -> Result:
    """Copy, verify, and finish when verified (see :func:`check_verified`)."""
    run = Migration(source, target, the_plan, batch_size=batch_size)
    run.copy(on_batch)
    run.verify(on_verify)
    return run.finish()


def check_verified(result: Result) -> None:
    """VerificationError (exit 5) naming the namespaces where the stores differ."""
    if result.verified:
        return
    bad = [c.namespace or '""' for c in result.checks.values() if not c.ok(result.plan.merge)]
    raise VerificationError(
        f"the target differs from the source in {len(bad)} namespace(s): {', '.join(bad[:8])}",
        hint="was the source written during the copy? stop the gateway and rerun with --merge",
    )
