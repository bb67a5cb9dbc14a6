"""Moving a store between backends: stream, resume, verify.

``migrate --from SOURCE --to TARGET`` copies every key of one store into
another (SQLite, Postgres, S3, in any direction), then proves the copy.

The copy
    Keys stream from the source in binary key order, in batches of
    ``batch_size``; each batch is one ``set_batched`` on the target (one
    transaction on Postgres, parallel PUTs on S3, transactions short enough
    for the write gate on SQLite).

Resuming
    After each batch is written, the target's progress record
    ``tfadmin:migrate`` (a JSON value: source, last key, count) is updated.
    An interrupted run (Ctrl-C, a dropped connection, a crash) is finished
    by running the same command again: it continues after the recorded
    key. Because keys come in order and a batch is recorded only after it
    was written, every source key up to the recorded one is in the target;
    the at most one batch written after the record is written again
    (writes are idempotent). The record is removed when the copy verified.

Verification
    Afterwards both stores are read again, side by side in key order, and
    compared per namespace: key counts, an order-independent checksum (the
    sum modulo 2**128 of BLAKE2b-128 over ``len(key)``, key and value, the
    same on both sides) and each key's value. Keys changed in the source
    during the copy (a gateway still writing) show up as mismatches: stop
    the gateway, rerun with ``--merge``.

Safety
    The source is opened read-only (SQLite ``mode=ro``, a read-only
    Postgres session, no S3 writes) and is never modified. A target that
    holds keys is refused unless ``--merge`` (source values then win); a
    target with another migration's progress record is refused. One audit
    record is written to the target when the copy verified.

Beyond kv
    Only ``kv`` is copied. SQLite's memory search tables (``memory_fts``,
    ``memory_meta``) are an index derived from the ``memory:`` keys: into a
    SQLite target it is rebuilt from them after a verified copy (the gateway
    searches it); Postgres and S3 targets index or scan by themselves. Tables of
    our own (``tfadmin_*``) hold local state (locks, catalogs) and stay.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from triggerfish_cli import audit, cells, namespaces
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
    RefusedError,
    UsageError,
    VerificationError,
)
from triggerfish_cli.locations import same_store
from triggerfish_cli.serialization import dumps, loads, now_iso, parse_iso, utc_now
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage.provider import StorageProvider, batched
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.threads import Worker, prefetched

PROGRESS_KEY = "tfadmin:migrate"
#: The test hook of :func:`kill_point`.
KILL_ENV = "TFADMIN_TEST_KILL_AT"
DEFAULT_BATCH = 5000

Callback = Callable[[int], None]


# -- the migration ---------------------------------------------------------------------


@dataclass
class Progress:
    """The target's progress record of an unfinished migration."""

    source: str
    merge: bool
    started: str
    last_key: str | None = None
    copied: int = 0
    #: Copied and verified: only the finishing steps are left (see :func:`finish`).
    verified: bool = False
    #: Whether the copy held memory keys (the SQLite index is rebuilt when finishing).
    memory_keys: bool = False
    #: The key the audit record of this migration is (or was) written under.
    audit: str | None = None

    def dump(self) -> str:
        document: dict[str, Any] = {
            "source": self.source,
            "merge": self.merge,
            "started": self.started,
            "updated": now_iso(),
            "lastKey": _key_json(self.last_key),
            "copied": self.copied,
        }
        if self.verified:
            document.update(verified=True, memoryKeys=self.memory_keys, audit=self.audit)
        return dumps(document)

    @classmethod
    def load(cls, text: str) -> Progress:
        try:
            data = loads(text)
            return cls(
                str(data["source"]),
                bool(data["merge"]),
                str(data["started"]),
                _key_from_json(data.get("lastKey")),
                int(data.get("copied", 0)),
                bool(data.get("verified", False)),
                bool(data.get("memoryKeys", False)),
                data.get("audit"),
            )
        except (ValueError, KeyError, TypeError):
            raise InvalidDataError(
                f"the target's {PROGRESS_KEY} record is not a migration progress record"
            ) from None


def _key_json(key: str | None) -> Any:
    """The last key copied in JSON: a string, a cell that is not UTF-8 text (cells.py),
    ``{"null": true}`` for a NULL key (``null``: nothing copied yet)."""
    if key is None:
        return None
    if key == cells.NULL_CELL:
        return {"null": True}
    return cells.to_json(key)


def _key_from_json(document: Any) -> str | None:
    if document is None:
        return None
    if document == {"null": True}:
        return cells.NULL_CELL
    return cells.from_json(document)


@dataclass
class Plan:
    """What a migration will do, decided before anything is written."""

    source: str
    target: str
    source_keys: int
    #: "missing", "empty", "resumable", "finishing" (copied and verified by a run
    #: killed before it finished) or "non-empty".
    target_state: str
    merge: bool
    resume: Progress | None = None
    to_copy: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "source_keys": self.source_keys,
            "target_state": self.target_state,
            "merge": self.merge,
            "resume_after": self.resume.last_key if self.resume else None,
            "to_copy": self.to_copy,
        }


def plan(
    source: StorageProvider,
    target: StorageProvider | None,
    *,
    merge: bool,
    target_config: StorageConfig | None = None,
) -> Plan:
    """Check every refusal, and count what is to be copied. Writes nothing."""
    if target is not None:
        where = target.describe()
    else:
        from triggerfish_cli.locations import describe_config

        where = describe_config(target_config) if target_config else "(the target)"
    if target is not None and same_store(source, target):
        raise UsageError(f"--from and --to are the same store ({where})")
    if source.get(PROGRESS_KEY) is not None:
        raise RefusedError(
            f"{source.describe()} holds an unfinished migration into it ({PROGRESS_KEY})",
            hint="finish that migration first; its copy may be incomplete",
        )
    total = source.count()
    if target is None:
        return Plan(source.describe(), where, total, "missing", merge, to_copy=total)
    recorded = target.get(PROGRESS_KEY)
    if recorded is not None:
        progress = Progress.load(recorded)
        if progress.source != source.describe():
            raise RefusedError(
                f"{where} holds an unfinished migration from {progress.source}",
                hint=f"rerun with --from for that store to finish it, or delete {PROGRESS_KEY} "
                "from the target to start over",
            )
        if progress.verified:  # killed while finishing: finish it
            return Plan(
                source.describe(), where, total, "finishing", progress.merge, resume=progress
            )
        remaining = sum(1 for _ in source.scan_keys(start_after=progress.last_key))
        return Plan(
            source.describe(),
            where,
            total,
            "resumable",
            merge or progress.merge,
            resume=progress,
            to_copy=remaining,
        )
    occupied = next(iter(target.scan_keys(batch_size=2)), None) is not None
    if occupied and not merge:
        raise RefusedError(
            f"{where} is not empty",
            hint="pass --merge to copy into it anyway (source values replace target values)",
        )
    return Plan(
        source.describe(), where, total, "non-empty" if occupied else "empty", merge, to_copy=total
    )


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


def data_version(source: StorageProvider) -> int | None:
    """SQLite's count of commits by other connections (None: no such thing here)."""
    if isinstance(source, SqliteStorage):
        with source.errors("data_version"):
            row = source.connection.execute("PRAGMA data_version").fetchone()
        return int(row[0])
    return None


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
    kill_point("migrate:verified")
    if progress.memory_keys and target.backend == "sqlite":
        from triggerfish_cli.memory.indexes import bring_in_line

        result.index_note = bring_in_line(target)
    kill_point("migrate:indexed")
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
    kill_point("migrate:audited")
    target.delete(PROGRESS_KEY)
    kill_point("migrate:done")


def _free_audit_key(target: StorageProvider) -> str:
    moment = utc_now()
    key = audit.audit_key(moment, "migrate")
    while target.get(key) is not None:
        moment += timedelta(milliseconds=1)
        key = audit.audit_key(moment, "migrate")
    return key


def kill_point(name: str) -> None:
    """A test hook: ``TFADMIN_TEST_KILL_AT=<name>`` kills this process there (SIGKILL),
    as a power cut or ``kill -9`` would, to show that a rerun finishes the job."""
    if os.environ.get(KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


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
        self._version = data_version(source)
        fresh = the_plan.resume is None and not the_plan.merge
        self._streamed = Accumulator() if self._version is not None and fresh else None
        self._fresh = fresh
        self._target_sums: dict[str, Sums] | None = None

    @property
    def finishing(self) -> bool:
        """Copied and verified by a run that was killed before it finished."""
        return self.result.plan.target_state == "finishing"

    def copy(self, on_batch: Callback | None = None) -> int:
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
        if self._streamed is None or data_version(self.source) != self._version:
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
