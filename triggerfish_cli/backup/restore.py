"""``backup restore``: verify, restore into a scratch file, check it, swap it in atomically.

Physical (a SQLite archive into a SQLite store): the archive is verified
while it decompresses into a scratch file beside the store (same file
system), the scratch passes the integrity checks, then the live store's WAL
is checkpointed into it (no committed write is lost), the old file is kept
as ``<db>.pre-restore-<time>`` (a hard link: no copy) and the scratch is
renamed over the store in one ``os.replace``. Until that rename the store is
untouched; a failure or kill -9 at any earlier point leaves it byte for byte
as it was. ``undo`` puts the newest pre-restore file back the same way.

Refused (exit 6) while another process has the store open (found through
``/proc/*/fd`` and a probe of SQLite's shared-memory lock), unless forced.

Logical (a JSON Lines archive, or any archive into a non-SQLite store): the
rows load through the StorageProvider, into an empty store, or with
``replace`` (one transaction on SQLite and Postgres) or ``merge``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triggerfish_cli.backup.archive import Manifest, decompress_chunks
from triggerfish_cli.backup.crypt import Identities, Recipient
from triggerfish_cli.backup.verify import Verified, iter_lines, verify_file
from triggerfish_cli.errors import (
    BusyError,
    NotFoundError,
    RefusedError,
    TriggerfishError,
    VerificationError,
)
from triggerfish_cli.fileio import fsync_dir
from triggerfish_cli.progress import Reporter
from triggerfish_cli.serialization import now_iso
from triggerfish_cli.storage.provider import StorageProvider, batched

PAUSE_ENV = "TFADMIN_TEST_RESTORE_PAUSE"
PRE_RESTORE = ".pre-restore-"
SHM_DMS_BYTE = 128  # SQLite's "dead man switch" lock byte in the -shm file


def stamp() -> str:
    return now_iso().replace(":", "-")


# -- who has the store open ---------------------------------------------------------


def open_by_others(db: Path) -> list[str]:
    """Processes (other than this one) holding the store or its WAL open: ``pid (name)``."""
    targets = set()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            targets.add(os.path.realpath(str(db) + suffix))
    found: list[str] = []
    proc = Path("/proc")
    me = os.getpid()
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
            except OSError:
                continue
            if targets.intersection(links):
                try:
                    comm = (entry / "comm").read_text().strip()
                except OSError:
                    comm = "?"
                found.append(f"{entry.name} ({comm})")
    if not found and _shm_in_use(db):
        found.append("a process holding its shared-memory lock")
    return found


def _shm_in_use(db: Path) -> bool:
    """True when another process holds SQLite's lock on the -shm file (it has the store open)."""
    shm = Path(str(db) + "-shm")
    try:
        fd = os.open(shm, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS_BYTE)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, SHM_DMS_BYTE)
        return False
    finally:
        os.close(fd)


def check_not_open(db: Path, force: bool) -> None:
    if force or not db.exists():
        return
    users = open_by_others(db)
    if users:
        raise BusyError(
            f"{db}: open by another process: {', '.join(users[:5])}",
            hint="stop the gateway first, or pass --force to restore anyway",
        )


# -- physical ------------------------------------------------------------------------------


@dataclass
class Swapped:
    target: str
    kept: str | None
    manifest: Manifest | None
    checks: list[str]
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kept": self.kept,
            "created": self.manifest.created if self.manifest else None,
            "keys": self.manifest.keys if self.manifest else None,
            "checks": self.checks,
            "dry_run": self.dry_run,
        }


def scratch_path(target: Path) -> Path:
    """The scratch file beside ``target``; those of dead processes (kill -9) are removed,
    with the ``-wal``, ``-shm`` and ``-journal`` files SQLite made beside them."""
    import re

    from triggerfish_cli.backup.dest import _alive

    pattern = re.compile(
        rf"^\.{re.escape(target.name)}\.restore-(\d+)\.tmp(?:-wal|-shm|-journal)?$"
    )
    with contextlib.suppress(OSError):
        for child in target.parent.iterdir():
            match = pattern.match(child.name)
            if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
                child.unlink(missing_ok=True)
    return target.with_name(f".{target.name}.restore-{os.getpid()}.tmp")


def restore_physical(
    archive: Path,
    name: str,
    target: Path,
    *,
    force: bool,
    progress: Reporter | None = None,
    store_id: str | None = None,
    identities: Identities | None = None,
) -> Swapped:
    """Verify ``archive`` into a scratch file beside ``target``, then swap it in.

    ``store_id``: the identity the restored store keeps (backup_stores.new_identity:
    the target's own, or the backup's when it goes back where it was); None: the
    backup's own id is dropped and a fresh one is recorded (a copy elsewhere is
    another store).
    """
    target = Path(os.path.realpath(target))  # swap the file itself, not a symlink to it
    check_not_open(target, force)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratch = scratch_path(target)
    try:
        result = verify_file(
            archive, name, snapshot=scratch, durable=True, progress=progress, identities=identities
        )
        if result.sealed:
            raise needs_identity(name)
        if not result.ok:
            raise VerificationError(
                f"{name}: verification failed, nothing restored: {'; '.join(result.failures)}"
            )
        set_identity(scratch, store_id)
        for suffix in ("-wal", "-shm", "-journal"):
            Path(str(scratch) + suffix).unlink(missing_ok=True)
        pause = os.environ.get(PAUSE_ENV)
        if pause:
            import time

            time.sleep(float(pause))
        kept = _swap_in(scratch, target, force=force)
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(scratch) + suffix).unlink(missing_ok=True)
    manifest = result.manifest
    assert manifest is not None
    details = {"kind": "physical", "created": manifest.created, "kept": str(kept) if kept else None}
    _audit_file(target, "backup_restore", name, {"keys": manifest.keys}, details)
    return Swapped(str(target), str(kept) if kept else None, manifest, result.checks)


def set_identity(scratch: Path, store_id: str | None) -> None:
    """Give the checked scratch copy the identity the restored store keeps.

    A private file nobody else has open (no write gate); its WAL is folded
    back into it before the swap, and fsynced (``synchronous=FULL``).
    """
    from triggerfish_cli.storage.identity import ID_TABLE, ID_TABLE_SQL
    from triggerfish_cli.storage.sqlite.sql import private_transaction

    with contextlib.closing(sqlite3.connect(scratch, isolation_level=None)) as conn:
        present = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (ID_TABLE,)
        ).fetchone()
        current = (
            conn.execute(f"SELECT value FROM {ID_TABLE} WHERE name = 'id'").fetchone()
            if present
            else None
        )
        if (current[0] if current else None) == store_id:
            return
        conn.execute("PRAGMA synchronous=FULL")
        with private_transaction(conn):
            if present:
                conn.execute(f"DELETE FROM {ID_TABLE}")
            if store_id is not None:
                conn.execute(ID_TABLE_SQL)
                conn.executemany(
                    f"INSERT INTO {ID_TABLE} (name, value) VALUES (?, ?)",
                    [("id", store_id), ("created", now_iso())],
                )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()


def _audit_file(
    db: Path, action: str, target: str, counts: dict[str, int], details: dict[str, Any]
) -> None:
    """The audit record of a restore, in the store it produced (best effort: it is done)."""
    from triggerfish_cli import audit
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    with contextlib.suppress(TriggerfishError):
        store = SqliteStorage(db)
        try:
            audit.record(store, action, target=target, counts=counts, details=details)
        finally:
            store.close()


def _swap_in(new: Path, target: Path, *, force: bool, keep_as: str = PRE_RESTORE) -> Path | None:
    """Replace ``target`` with ``new`` atomically, keeping the old file under a new name."""
    check_not_open(target, force)
    kept: Path | None = None
    if target.exists():
        _checkpoint(target, force)
        kept = target.with_name(f"{target.name}{keep_as}{stamp()}")
        wal = Path(str(target) + "-wal")
        try:
            try:
                os.link(target, kept)
            except OSError:
                shutil.copy2(target, kept)
            if wal.exists() and wal.stat().st_size > 0:  # --force with a live writer, or damage
                shutil.copy2(wal, str(kept) + "-wal")
        except BaseException:
            for leftover in (kept, Path(str(kept) + "-wal")):
                leftover.unlink(missing_ok=True)
            raise
        old = target.stat()
        with contextlib.suppress(OSError):
            os.chmod(new, old.st_mode & 0o7777)
        if os.geteuid() == 0:  # run as root: the gateway's user must still own its store
            with contextlib.suppress(OSError):
                os.chown(new, old.st_uid, old.st_gid)
    for suffix in ("-wal", "-shm"):
        Path(str(target) + suffix).unlink(missing_ok=True)
    os.replace(new, target)
    fsync_dir(target.parent)
    return kept


def _checkpoint(db: Path, force: bool) -> None:
    """Move every committed page of the WAL into the file, so the kept copy has them all."""
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=5, isolation_level=None)) as conn:
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.Error as exc:
        text = str(exc).lower()
        if force or not ("locked" in text or "busy" in text):
            return  # a damaged store (what a restore is for): kept as it is, -wal included
        raise BusyError(f"{db}: cannot checkpoint its WAL: {exc}") from exc
    wal = Path(str(db) + "-wal")
    if not force and ((busy and busy[0]) or (wal.exists() and wal.stat().st_size > 0)):
        raise BusyError(
            f"{db}: its WAL could not be emptied (a writer is active)",
            hint="stop the gateway first, or pass --force",
        )


def pre_restores(target: Path) -> list[Path]:
    return sorted(
        path
        for path in target.parent.glob(f"{target.name}{PRE_RESTORE}*")
        if not path.name.endswith(("-wal", "-shm"))
    )


def undo(target: Path, *, force: bool, dry_run: bool = False) -> Swapped:
    """Put the newest ``<db>.pre-restore-<time>`` back; keep the current one as ``.undone-``."""
    target = Path(os.path.realpath(target))
    found = pre_restores(target)
    if not found:
        raise NotFoundError(f"{target}: no {target.name}{PRE_RESTORE}* file to put back")
    newest = found[-1]
    if dry_run:
        return Swapped(str(target), str(newest), None, [], dry_run=True)
    check_not_open(target, force)
    scratch = scratch_path(target)
    try:
        os.link(newest, scratch)
    except OSError:
        shutil.copy2(newest, scratch)
    kept = _swap_in(scratch, target, force=force, keep_as=".undone-")
    wal = Path(str(newest) + "-wal")
    if wal.exists():
        os.replace(wal, str(target) + "-wal")
    newest.unlink()
    _audit_file(target, "backup_undo", newest.name, {}, {"kept": str(kept) if kept else None})
    return Swapped(str(target), str(kept) if kept else None, None, [f"put back {newest.name}"])


# -- logical -------------------------------------------------------------------------------


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
        from triggerfish_cli.errors import UsageError

        raise UsageError("--replace and --merge exclude each other")
    if include:
        from triggerfish_cli.backup.include import holds_any

        empty = not holds_any(provider, include)
    else:
        empty = next(iter(provider.scan_keys(batch_size=1)), None) is None
    if empty:
        return "empty"
    if replace:
        writers = [] if force else provider.live_writers()
        if writers:
            from triggerfish_cli.storage.sqlite.live_writers import describe_writers

            raise BusyError(
                f"{provider.describe()}: --replace while live writers have the store open "
                f"({describe_writers(writers)}): what they write during the restore would be "
                "lost; nothing was restored",
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
    from triggerfish_cli.backup.create import create_backup
    from triggerfish_cli.backup.dest import LocalDestination
    from triggerfish_cli.paths import store_backups_dir

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
    from triggerfish_cli.backup.include import memory_levels, only

    result = verified(archive, name, scratch, identities=identities)
    manifest = result.manifest
    assert manifest is not None

    def rows() -> Iterator[tuple[str, str]]:
        found = _archive_rows(archive, manifest, scratch / "snapshot.db", identities)
        return only(found, include) if include else found

    if mode == "merge" or include:  # rows put beside a store's memories: no write-down
        from triggerfish_cli.memory.keys import PREFIX
        from triggerfish_cli.memory.records import refuse_write_down

        refuse_write_down((row for row in rows() if row[0].startswith(PREFIX)), provider, name)
    written, deleted = _load(provider, rows(), mode, on_progress, include)
    from triggerfish_cli import audit
    from triggerfish_cli.storage.identity import ensure_id

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
    from triggerfish_cli.memory.indexes import bring_in_line

    levels = memory_levels(include) if include else None
    notes = [bring_in_line(provider, levels)] if (written or deleted) and levels != () else []
    return Loaded(provider.describe(), mode, written, deleted, manifest, result.checks, notes=notes)


def needs_identity(name: str) -> TriggerfishError:
    from triggerfish_cli.backup.crypt import IDENTITY_ENV
    from triggerfish_cli.errors import UsageError

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
    from triggerfish_cli.backup.verify import payload_stream

    if manifest.kind == "physical":
        from triggerfish_cli.cells import decode_text
        from triggerfish_cli.storage.sqlite.sql import odd_rows

        with contextlib.closing(sqlite3.connect(snapshot)) as conn:
            conn.text_factory = decode_text  # TEXT that is not UTF-8 too (cells.py)
            cursor = conn.execute("SELECT key, value FROM kv ORDER BY key")
            while rows := cursor.fetchmany(5000):
                yield from odd_rows(rows)
        return
    with (
        archive.open("rb") as handle,
        payload_stream(handle, manifest, identities, archive.name) as reader,
    ):
        chunks = decompress_chunks(reader, manifest.compression, manifest.frames)
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
    from triggerfish_cli.backup.include import target_keys
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage
    from triggerfish_cli.storage.sqlite.sql import execute_rows, range_clause

    def advance(count: int) -> None:
        if on_progress is not None:
            on_progress(count)

    if isinstance(provider, SqliteStorage) and provider.atomic_loads():
        written = deleted = 0
        with provider.transaction("restore") as conn:  # all or nothing
            if mode == "replace" and include:
                for prefix in include:
                    where, params = range_clause(prefix)
                    deleted += conn.execute(f"DELETE FROM kv WHERE {where}", params).rowcount
            elif mode == "replace":
                deleted = conn.execute("DELETE FROM kv").rowcount
            for batch in batched(rows, 5000):
                execute_rows(conn, "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", batch)
                written += len(batch)
                advance(len(batch))
        return written, deleted
    if provider.backend == "postgres" and mode != "merge":
        pg: Any = provider
        with pg.connection.transaction():  # the provider's own transactions nest as savepoints
            if mode == "replace" and include:
                doomed = list(target_keys(provider, include))
                deleted = provider.delete_many(doomed, batch_size=1000) if doomed else 0
            else:
                deleted = provider.count() if mode == "replace" else 0
                if mode == "replace":
                    provider.clear()
            written = _write_batches(provider, rows, advance)
        return written, deleted
    written = 0
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
