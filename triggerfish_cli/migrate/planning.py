"""What a migration will do, decided before anything is written, and its progress record.

:func:`plan` checks every refusal and counts what is to be copied;
:func:`prepare` opens both stores (the source read-only, the target only
if it exists) and plans. The target's progress record ``tfadmin:migrate``
(:class:`Progress`) is what a rerun resumes or finishes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.errors import InvalidDataError, RefusedError, UsageError
from triggerfish_cli.locations import describe_config, open_source, open_target, same_store
from triggerfish_cli.memory.keys import PREFIX
from triggerfish_cli.memory.records import refuse_write_down
from triggerfish_cli.serialization import dumps, loads, now_iso
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage.provider import StorageProvider

PROGRESS_KEY = "tfadmin:migrate"
DEFAULT_BATCH = 5000


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
class Prepared:
    """Both stores open and the migration planned: what the command shows and confirms."""

    source: StorageProvider
    #: None: it does not exist yet (created by :meth:`ready`).
    target: StorageProvider | None
    target_config: StorageConfig
    plan: Plan

    def as_dict(self) -> dict[str, Any]:
        """The dry-run document."""
        return {**self.plan.as_dict(), "dry_run": True}

    @property
    def notice(self) -> str | None:
        """What a run picks up from an earlier one, if it does."""
        the_plan = self.plan
        if the_plan.target_state == "finishing":
            return (
                f"finishing the migration from {the_plan.source}: copied and verified before "
                "it was stopped"
            )
        if the_plan.target_state == "resumable" and the_plan.resume is not None:
            return (
                f"resuming the migration from {the_plan.source}: {the_plan.resume.copied} "
                f"key(s) copied before, {the_plan.to_copy} to go"
            )
        return None

    @property
    def question(self) -> str | None:
        """What to confirm before writing (None: nothing)."""
        if self.plan.target_state != "non-empty":
            return None
        return (
            f"Merge {self.plan.source_keys} key(s) into the non-empty {self.plan.target}? "
            "Source values replace target values."
        )

    def ready(self) -> StorageProvider:
        """The target, created now when missing; rows merged into a store that may hold
        memories are checked first (no write-down)."""
        if self.target is None:  # checked and refused nothing: now create it
            self.target = open_target(self.target_config, create=True)
            assert self.target is not None
            self.plan.target = self.target.describe()
        if self.plan.merge and self.plan.target_state != "finishing":  # finishing copies nothing
            refuse_write_down(
                self.source.scan(PREFIX, batch_size=2000), self.target, self.plan.source
            )
        return self.target

    def close_target(self) -> None:
        if self.target is not None:
            self.target.close()
            self.target = None

    def close(self) -> None:
        self.close_target()
        self.source.close()


def prepare(source: StorageConfig, target: StorageConfig, *, merge: bool) -> Prepared:
    """Open the source read-only and the target if it exists, and :func:`plan`."""
    src = open_source(source)
    try:
        dst = open_target(target, create=False)
    except BaseException:
        src.close()
        raise
    try:
        return Prepared(src, dst, target, plan(src, dst, merge=merge, target_config=target))
    except BaseException:
        if dst is not None:
            dst.close()
        src.close()
        raise
