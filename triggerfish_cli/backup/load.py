"""``backup restore`` of any archive key by key, through the StorageProvider.

A JSON Lines archive, or any archive into a non-SQLite store (or with
``--logical``/``--include``): the archive is verified completely, then its
rows load into an empty store, or with ``replace`` (one transaction on SQLite
and Postgres) or ``merge``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triggerfish_cli.backup.crypt import IDENTITY_ENV, Identities, Recipient
from triggerfish_cli.backup.decompress import decompress_chunks
from triggerfish_cli.backup.dest import LocalDestination
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.backup.verify import Verified, iter_lines, payload_stream, verify_file
from triggerfish_cli.errors import (
    BusyError,
    RefusedError,
    TriggerfishError,
    UsageError,
    VerificationError,
)
from triggerfish_cli.memory.keys import PREFIX
from triggerfish_cli.paths import store_backups_dir
from triggerfish_cli.storage.backends import files_of
from triggerfish_cli.storage.identity import ensure_id
from triggerfish_cli.storage.provider import StorageProvider, batched


@dataclass
class Loaded:
    target: str
    mode: str
    written: int
    deleted: int
    manifest: Manifest | None
    checks: list[str]
    dry_run: bool = False
    notes: list[str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "mode": self.mode,
            "written": self.written,
            "deleted": self.deleted,
            "created": self.manifest.created if self.manifest else None,
            "keys": self.manifest.keys if self.manifest else None,
            "checks": self.checks,
            "dry_run": self.dry_run,
            "notes": self.notes or [],
        }


def load_mode(
    provider: StorageProvider,
    *,
    replace: bool,
    merge: bool,
    force: bool = False,
    include: Sequence[str] | None = None,
) -> str:
    """``empty``, ``replace`` or ``merge``; a non-empty store without either is refused.

    ``replace`` is refused (exit 6) while other processes write the store (the
    gateway): the store becomes exactly the backup, so what they write meanwhile
    would be lost; ``force`` does it anyway. ``merge`` only adds and overwrites.
    ``include`` (backup/include.py): only keys under those prefixes count.
    """
    if replace and merge:
        raise UsageError("--replace and --merge exclude each other")
    if include:
        # lazy: backup.include (+1 module) is not loaded by `backup diff`
        from triggerfish_cli.backup.include import holds_any

        empty = not holds_any(provider, include)
    else:
        empty = next(iter(provider.scan_keys(batch_size=1)), None) is None
    if empty:
        return "empty"
    if replace:
        writers = [] if force else provider.live_writers()
        if writers:
            who = files_of(provider.backend).describe_writers(writers)
            raise BusyError(
                f"{provider.describe()}: --replace while live writers have the store open "
                f"({who}): what they write during the restore would be lost; nothing was "
                "restored",
                hint="stop the gateway first, use --merge, or pass --force to replace anyway",
            )
        return "replace"
    if merge:
        return "merge"
    if include:
        raise RefusedError(
            f"{provider.describe()} holds keys under {', '.join(include)}: a restore of "
            "them needs --replace (they become exactly the backup's, all or nothing) or "
            "--merge (the backup's keys are written over the store's, others stay)"
        )
    raise RefusedError(
        f"{provider.describe()} is not empty: a logical restore needs --replace "
        "(the store becomes exactly the backup, all or nothing) or --merge "
        "(the backup's keys are written over the store's, others stay)"
    )


def safety_backup(
    provider: StorageProvider, mode: str, *, recipients: list[Recipient] | None = None
) -> str | None:
    """Before --replace/--merge that cannot be one transaction (S3; SQLite while the
    gateway writes: the write gate keeps each transaction short): a logical backup
    of the store in the default backup directory, the way back if the restore stops
    part way. None when there is nothing to protect (an empty store) or the load is
    all or nothing."""
    if mode == "empty" or provider.atomic_loads():
        return None
    if recipients is None:  # encryption required, and no key to encrypt to
        raise RefusedError(
            f"{provider.describe()}: the restore first saves the store's keys as they are, "
            "and backup.require_encryption is set with no recipients configured: "
            "nothing restored",
            hint="add backup: recipients to triggerfish.yaml",
        )
    # lazy: backup.create adds 4 modules to `backup restore`; only a safety backup needs it
    from triggerfish_cli.backup.create import create_backup

    dest = LocalDestination(store_backups_dir(), create=True)
    created = create_backup(
        provider, dest, logical=True, label="pre-restore", recipients=recipients
    )
    return str(dest.path(created.name))


def load_logical(
    archive: Path,
    name: str,
    provider: StorageProvider,
    mode: str,
    *,
    scratch: Path,
    on_progress: Callable[[int], None] | None = None,
    store_id: str | None = None,
    identities: Identities | None = None,
    include: Sequence[str] | None = None,
) -> Loaded:
    """Verify the archive completely, then load its rows into ``provider``.

    ``store_id``: the identity a target without one takes (the backup's, when the
    store goes back where it was: backup_stores.new_identity); None: a fresh one.
    ``include``: only the keys under those prefixes (backup/include.py).
    """
    # lazy: backup.include (+1 module) is not loaded by `backup diff`
    from triggerfish_cli.backup.include import memory_levels, only

    result = verified(archive, name, scratch, identities=identities)
    manifest = result.manifest
    assert manifest is not None

    def rows() -> Iterator[tuple[str, str]]:
        found = _archive_rows(archive, manifest, scratch / "snapshot.db", identities)
        return only(found, include) if include else found

    if mode == "merge" or include:  # rows put beside a store's memories: no write-down
        # lazy: memory.records adds 7 modules to `backup restore` (without --merge/--include)
        from triggerfish_cli.memory.records import refuse_write_down

        refuse_write_down((row for row in rows() if row[0].startswith(PREFIX)), provider, name)
    written, deleted = _load(provider, rows(), mode, on_progress, include)
    # lazy: audit (+1 module) is not loaded by `backup restore --dry-run`
    from triggerfish_cli import audit

    ensure_id(provider, store_id)

    audit.record(
        provider,
        "backup_restore",
        target=name,
        counts={"written": written, "deleted": deleted},
        details={
            "kind": manifest.kind,
            "mode": mode,
            "created": manifest.created,
            **({"max_taint": manifest.max_taint} if manifest.partial else {}),
            **({"include": list(include)} if include else {}),
        },
    )
    # lazy: memory.indexes adds 3 modules to `backup restore` (without --merge/--include)
    from triggerfish_cli.memory.indexes import bring_in_line

    levels = memory_levels(include) if include else None
    notes = [bring_in_line(provider, levels)] if (written or deleted) and levels != () else []
    return Loaded(provider.describe(), mode, written, deleted, manifest, result.checks, notes=notes)


def needs_identity(name: str) -> TriggerfishError:
    return UsageError(
        f"{name} is encrypted: restoring it needs its identity: nothing restored",
        hint=f"give --identity FILE (or set {IDENTITY_ENV} to the file's path)",
    )


def verified(
    archive: Path,
    name: str,
    scratch: Path,
    consequence: str = "nothing restored",
    *,
    identities: Identities | None = None,
) -> Verified:
    """The archive verified completely (a physical one decompressed into the scratch);
    an encrypted one needs ``identities``."""
    result: Verified = verify_file(
        archive, name, snapshot=scratch / "snapshot.db", identities=identities
    )
    if result.sealed:
        raise needs_identity(name)
    if not result.ok:
        raise VerificationError(
            f"{name}: verification failed, {consequence}: {'; '.join(result.failures)}"
        )
    return result


def plan_include(
    archive: Path,
    name: str,
    provider: StorageProvider | None,
    mode: str,
    include: Sequence[str],
    *,
    scratch: Path,
    identities: Identities | None = None,
) -> Any:
    """What ``--include`` would restore, per namespace (backup_include.IncludePlan)."""
    # lazy: backup.include (+1 module) is not loaded by `backup diff`
    from triggerfish_cli.backup.include import plan

    result = verified(archive, name, scratch, identities=identities)
    assert result.manifest is not None
    rows = _archive_rows(archive, result.manifest, scratch / "snapshot.db", identities)
    found = plan(rows, provider, include, mode)
    found.checks = result.checks
    return found


def _archive_rows(
    archive: Path, manifest: Manifest, snapshot: Path, identities: Identities | None
) -> Iterator[tuple[str, str]]:
    if manifest.kind == "physical":
        yield from files_of(manifest.backend).snapshot_rows(snapshot)
        return
    with (
        archive.open("rb") as handle,
        payload_stream(handle, manifest, identities, archive.name) as reader,
    ):
        chunks = decompress_chunks(
            reader, manifest.compression, manifest.frames, limit=manifest.content_bytes
        )
        for key, value, _number, _size in iter_lines(chunks):
            yield key, value


def _load(
    provider: StorageProvider,
    rows: Iterator[tuple[str, str]],
    mode: str,
    on_progress: Callable[[int], None] | None,
    include: Sequence[str] | None = None,
) -> tuple[int, int]:
    """Load ``rows``; ``replace`` first deletes every key (``include``: those under
    the prefixes only)."""
    # lazy: backup.include (+1 module) is not loaded by `backup diff`
    from triggerfish_cli.backup.include import target_keys

    def advance(count: int) -> None:
        if on_progress is not None:
            on_progress(count)

    at_once = provider.load_at_once(
        rows, replace=mode == "replace", only=include or None, on_batch=advance
    )
    if at_once is not None:
        return at_once
    if mode != "replace":
        return _write_batches(provider, rows, advance), 0
    # No transactions here (S3): write every key, then delete those the backup lacks.
    kept: set[str] = set()

    def remember(source: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
        for key, value in source:
            kept.add(key)
            yield key, value

    written = _write_batches(provider, remember(rows), advance)
    present = target_keys(provider, include) if include else provider.scan_keys(batch_size=5000)
    extra = [key for key in present if key not in kept]
    deleted = provider.delete_many(extra, batch_size=1000) if extra else 0
    return written, deleted


def _write_batches(
    provider: StorageProvider, rows: Iterator[tuple[str, str]], advance: Callable[[int], None]
) -> int:
    written = 0
    for batch in batched(rows, 5000):
        provider.set_batched(batch)
        written += len(batch)
        advance(len(batch))
    return written


def describe_error(exc: BaseException) -> str:
    return exc.message if isinstance(exc, TriggerfishError) else str(exc)
