"""``backup restore`` of a physical archive: verify into a scratch file, check it, swap it in.

A SQLite archive into a SQLite store: the archive is verified while it
decompresses into a scratch file beside the store (same file system), the
scratch passes the integrity checks, then the live store's WAL is
checkpointed into it (no committed write is lost), the old file is kept as
``<db>.pre-restore-<time>`` (a hard link: no copy) and the scratch is renamed
over the store in one ``os.replace``. Until that rename the store is
untouched; a failure or kill -9 at any earlier point leaves it byte for byte
as it was. ``undo`` puts the newest pre-restore file back the same way.

A store reached through a symbolic link is swapped where the link leads only
when the link cannot have been planted by someone else (:func:`store_file`);
kept copies and scratch files are made new (a hard link or an exclusive
create), never written over anything, never through a link.

Refused (exit 6) while another process has the store open (found through
``/proc/*/fd`` and a probe of SQLite's shared-memory lock), unless forced.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triggerfish_cli.backup.crypt import Identities
from triggerfish_cli.backup.load import needs_identity
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.backup.verify import verify_file
from triggerfish_cli.errors import (
    BusyError,
    NotFoundError,
    RefusedError,
    TriggerfishError,
    VerificationError,
    WriteError,
)
from triggerfish_cli.fileio import fsync_dir, make_directory, nofollow, pid_alive, trusted_link
from triggerfish_cli.progress import Reporter
from triggerfish_cli.serialization import now_iso
from triggerfish_cli.storage.backends import file_backend, files_of

PRE_RESTORE = ".pre-restore-"
#: What ``--undo`` keeps the store it replaces as: ``<db>.undone-<time>``.
UNDONE = ".undone-"


def stamp() -> str:
    return now_iso().replace(":", "-")


def store_file(path: Path) -> Path:
    """The file a restore of ``path`` replaces: ``path``, or where a symbolic link there
    leads when the link cannot have been planted by someone else (owned by root or us,
    in a directory only root or we can write: ``fileio.trusted_link``). Any other link
    is refused (exit 4): the file it names is never replaced, and neither is the link
    (the gateway may have the file it names open)."""
    path = path.expanduser()
    if os.path.islink(path) and not trusted_link(path):
        raise RefusedError(
            f"{path}: is a symbolic link someone else could have planted (its owner or its "
            "directory's is not root or us, or others may write there): nothing restored",
            hint="name the store file itself (--to), or remove the link",
        )
    return Path(os.path.realpath(path))


# -- who has the store open ---------------------------------------------------------


def check_not_open(db: Path, force: bool, backend: str) -> None:
    """Refuse (exit 6) while another process has ``db``, a store of ``backend``, open."""
    if force or not db.exists():
        return
    files = files_of(backend)
    users = files.writers(db)  # as the write gate sees them: open files, then the -shm lock
    if users:
        raise BusyError(
            f"{db}: open by another process: {files.describe_writers(users)}",
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
    #: ``--undo``: the pre-restore file put back as the store (``kept``: the store it replaced).
    put_back: str | None = None

    def as_dict(self) -> dict[str, Any]:
        document = {
            "target": self.target,
            "kept": self.kept,
            "created": self.manifest.created if self.manifest else None,
            "keys": self.manifest.keys if self.manifest else None,
            "checks": self.checks,
            "dry_run": self.dry_run,
        }
        if self.put_back is not None:
            document["put_back"] = self.put_back
        return document


def scratch_path(target: Path) -> Path:
    """The scratch file beside ``target``, its name free: those of dead processes (kill -9)
    are removed, with the ``-wal``, ``-shm`` and ``-journal`` files SQLite made beside
    them, and whatever holds this process's own name (a link planted there is removed,
    never followed). It is then created anew (scratch.create_private: O_EXCL|O_NOFOLLOW)."""
    pattern = re.compile(
        rf"^\.{re.escape(target.name)}\.restore-(\d+)\.tmp(?:-wal|-shm|-journal)?$"
    )
    with contextlib.suppress(OSError):
        for child in target.parent.iterdir():
            match = pattern.match(child.name)
            pid = int(match.group(1)) if match else 0
            if match and (pid == os.getpid() or not pid_alive(pid)):
                child.unlink(missing_ok=True)
    return target.with_name(f".{target.name}.restore-{os.getpid()}.tmp")


def restore_physical(
    archive: Path,
    name: str,
    target: Path,
    *,
    backend: str,
    force: bool,
    progress: Reporter | None = None,
    store_id: str | None = None,
    identities: Identities | None = None,
) -> Swapped:
    """Verify ``archive`` into a scratch file beside ``target``, then swap it in.

    ``backend``: the manifest's, whose local files the snapshot and ``target`` are.
    ``store_id``: the identity the restored store keeps (backup_stores.new_identity:
    the target's own, or the backup's when it goes back where it was); None: the
    backup's own id is dropped and a fresh one is recorded (a copy elsewhere is
    another store).
    """
    target = store_file(target)  # swap the file itself, not a symlink to it
    files = files_of(backend)
    check_not_open(target, force, backend)
    make_directory(target.parent)
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
        files.set_identity(scratch, store_id)
        for suffix in ("-wal", "-shm", "-journal"):
            Path(str(scratch) + suffix).unlink(missing_ok=True)
        kept = _swap_in(scratch, target, backend, force=force)
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(scratch) + suffix).unlink(missing_ok=True)
    manifest = result.manifest
    assert manifest is not None
    details = {"kind": "physical", "created": manifest.created, "kept": str(kept) if kept else None}
    _audit_file(target, backend, "backup_restore", name, {"keys": manifest.keys}, details)
    return Swapped(str(target), str(kept) if kept else None, manifest, result.checks)


def _audit_file(
    db: Path,
    backend: str,
    action: str,
    target: str,
    counts: dict[str, int],
    details: dict[str, Any],
) -> None:
    """The audit record of a restore, in the store it produced (best effort: it is done)."""
    # lazy: audit (+1 module) is not loaded by `backup restore --dry-run`
    from triggerfish_cli import audit

    with contextlib.suppress(TriggerfishError):
        store = files_of(backend).open(db)
        try:
            audit.record(store, action, target=target, counts=counts, details=details)
        finally:
            store.close()


def _swap_in(
    new: Path, target: Path, backend: str, *, force: bool, keep_as: str = PRE_RESTORE
) -> Path | None:
    """Replace ``target`` with ``new`` atomically, keeping the old file under a new name."""
    check_not_open(target, force, backend)
    kept: Path | None = None
    if target.exists():
        files_of(backend).checkpoint(target, force)
        _take_owner(new, target.stat())
        kept = target.with_name(f"{target.name}{keep_as}{stamp()}")
        wal, kept_wal = Path(str(target) + "-wal"), Path(str(kept) + "-wal")
        try:
            _keep(target, kept)
        except FileExistsError:
            raise _taken(kept) from None  # not ours: left as it is
        try:
            if _is_file(wal) and wal.stat().st_size > 0:  # --force with a live writer, or damage
                _copy_new(wal, kept_wal)
        except BaseException as exc:
            kept.unlink()
            if isinstance(exc, FileExistsError):
                raise _taken(kept_wal) from None
            raise
    for suffix in ("-wal", "-shm"):
        Path(str(target) + suffix).unlink(missing_ok=True)
    os.replace(new, target)
    fsync_dir(target.parent)
    return kept


def _take_owner(new: Path, old: os.stat_result) -> None:
    """Give ``new`` the mode (and, run as root, the owner) of the store it replaces;
    through its own descriptor, never through a link put at its name meanwhile."""
    try:
        fd = os.open(new, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:  # gone, or a link put in its place: nothing is swapped in
        raise WriteError(
            f"{new}: cannot swap it in: {exc.strerror} (not the file we wrote)"
        ) from None
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, old.st_mode & 0o7777)
        if os.geteuid() == 0:  # run as root: the gateway's user must still own its store
            with contextlib.suppress(OSError):
                os.fchown(fd, old.st_uid, old.st_gid)
    finally:
        os.close(fd)


def _keep(source: Path, kept: Path) -> None:
    """``kept``: a new name for ``source`` (a hard link: no copy), else a new copy of it."""
    try:
        os.link(source, kept)
    except FileExistsError:
        raise
    except OSError:
        _copy_new(source, kept)


def _copy_new(source: Path, target: Path) -> None:
    """A copy of ``source`` in a new file ``target`` (mode and times kept, synced): never
    over anything at ``target`` (FileExistsError), never through a link."""
    with open(source, "rb") as reader, open(target, "xb", opener=nofollow) as writer:
        try:
            shutil.copyfileobj(reader, writer, 1 << 20)
            writer.flush()
            os.fsync(writer.fileno())
        except BaseException:
            target.unlink()  # ours: made just now
            raise
    shutil.copystat(source, target)


def _is_file(path: Path) -> bool:
    """A regular file, not a symbolic link to one (never read through a planted link)."""
    return path.is_file() and not path.is_symlink()


def _taken(path: Path) -> RefusedError:
    return RefusedError(
        f"{path}: already exists (a file or link not made by this restore): never written "
        "over; nothing restored",
        hint="move it away and run it again",
    )


def pre_restores(target: Path) -> list[Path]:
    """The kept copies of ``target`` (files, never links: one was not made by us)."""
    return sorted(
        path
        for path in target.parent.glob(f"{target.name}{PRE_RESTORE}*")
        if not path.name.endswith(("-wal", "-shm")) and _is_file(path)
    )


def undo(target: Path, *, force: bool, dry_run: bool = False) -> Swapped:
    """Put the newest ``<db>.pre-restore-<time>`` back; keep the current one as ``.undone-``."""
    backend = file_backend()  # the store is known by its file alone
    target = store_file(target)
    found = pre_restores(target)
    if not found:
        raise NotFoundError(f"{target}: no {target.name}{PRE_RESTORE}* file to put back")
    newest = found[-1]
    if dry_run:
        would_keep = f"{target.name}{UNDONE}<time>" if target.exists() else None
        return Swapped(str(target), would_keep, None, [], dry_run=True, put_back=str(newest))
    check_not_open(target, force, backend)
    scratch = scratch_path(target)
    try:
        _keep(newest, scratch)
    except FileExistsError:
        raise _taken(scratch) from None
    kept = _swap_in(scratch, target, backend, force=force, keep_as=UNDONE)
    wal = Path(str(newest) + "-wal")
    if _is_file(wal):
        os.replace(wal, str(target) + "-wal")
    newest.unlink()
    details = {"kept": str(kept) if kept else None}
    _audit_file(target, backend, "backup_undo", newest.name, {}, details)
    return Swapped(str(target), str(kept) if kept else None, None, [], put_back=str(newest))
