"""``status``: which store am I on, and who else is on it. Reads only.

:func:`collect` returns a :class:`StatusReport` (one structured document,
``as_dict()`` is the JSON of ``status --format json``); the command only
renders it. Checks with thresholds (issue 20) evaluate a report; they need
no second look at the store.

What it holds:

- the store: backend; its path, DSN (never a password: the DSN check
  refuses them) or bucket and prefix; how it was chosen (``--db``, an
  environment variable, the ``storage:`` section, the gateway's default and
  which of its rules); whether it exists; its id (storage/identity.py);
- SQLite: file size, WAL size, journal mode, whether it can only be read
  here; a note when the gateway's ``gateway.token`` beside the store can be
  read by group or others (the gateway writes it 0600); the live writers the
  write gate would pause (pid, command, user, whether we may signal them);
- the gateway's daemon: ``<base>/daemon.json`` (its start time) and the
  processes that have that file open (or its pid, alive);
- from our audit records that name this store's id (:func:`audit_records`):
  the last sweep (interrupted, failed or of some namespaces only, as it
  says), the last successful one and the last backup; the newest backup of
  this store in the default destination;
- memory index drift (counts, as ``memory reindex --dry-run`` finds them,
  over every level; never a key or content), and the config versions held.

A part that cannot be read (a broken audit record, a backup directory we
may not list) is a note, never a failure; a store that does not exist is
reported (``exists: false``) and the command then exits 7.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli import audit
from triggerfish_cli.errors import MissingStoreError, TriggerfishError
from triggerfish_cli.fileio import pid_alive
from triggerfish_cli.paths import BaseDir, resolve_base
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.storage.backends import location_of, openers
from triggerfish_cli.storage.identity import read_id
from triggerfish_cli.storage.provider import StorageProvider

#: Audit hooks whose newest record status shows.
SWEEP_HOOK = "admin_retention_sweep"
BACKUP_HOOK = "admin_backup_create"
#: Fields of daemon.json that may hold the daemon's start time, in order of preference.
START_FIELDS = ("startedAt", "started_at", "startTime", "start_time", "started", "start")


@dataclass
class StatusReport:
    backend: str
    location: str
    chosen_by: str
    base_dir: dict[str, str]
    exists: bool = False
    store_id: str | None = None
    #: Why the store could not be opened (it does not exist: exit 7).
    error: str | None = None
    read_only: bool | None = None
    keys: int | None = None
    sqlite: dict[str, Any] | None = None
    live_writers: list[dict[str, Any]] | None = None
    daemon: dict[str, Any] | None = None
    last_sweep: dict[str, Any] | None = None
    #: The newest sweep that ran to its end over every namespace (``status --check``).
    last_successful_sweep: dict[str, Any] | None = None
    last_backup: dict[str, Any] | None = None
    newest_backup: dict[str, Any] | None = None
    memory_index: dict[str, Any] | None = None
    config_versions: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: What opening the store did beside reading it, also said on stderr: a process
    #: that a run of ours that died had left stopped, resumed (gate_ledger.py).
    resumed: list[str] = field(default_factory=list)
    #: The error of a store that does not exist (the command exits 7 with it).
    missing: MissingStoreError | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "location": self.location,
            "chosen_by": self.chosen_by,
            "base_dir": self.base_dir,
            "exists": self.exists,
            "store_id": self.store_id,
            "error": self.error,
            "read_only": self.read_only,
            "keys": self.keys,
            "sqlite": self.sqlite,
            "live_writers": self.live_writers,
            "daemon": self.daemon,
            "last_sweep": self.last_sweep,
            "last_successful_sweep": self.last_successful_sweep,
            "last_backup": self.last_backup,
            "newest_backup": self.newest_backup,
            "memory_index": self.memory_index,
            "config_versions": self.config_versions,
            "notes": self.notes,
            "resumed": self.resumed,
        }


def collect(
    config: StorageConfig,
    opener: Callable[[], StorageProvider],
    *,
    base: BaseDir | None = None,
    backups: Path | None = None,
) -> StatusReport:
    """The report of the store ``config`` names, opened (read only) by ``opener``.

    ``backups``: the default backup directory (default ``<base>/backups/store``).
    """
    base = base or resolve_base()
    report = StatusReport(
        config.backend,
        location_of(config),
        config.chosen_by,
        {"path": str(base.path), "chosen_by": base.chosen_by},
    )
    report.daemon = _part(report, "daemon", lambda: daemon_state(base.path / "daemon.json"))
    try:
        provider = opener()
    except MissingStoreError as exc:
        report.error, report.missing = exc.message, exc
        return report
    report.exists = True
    report.store_id = _part(report, "store id", lambda: read_id(provider))
    report.keys = _part(report, "keys", provider.count)
    path = provider.database_file()
    if path is not None:
        _file_parts(report, provider, path)
    _audit_parts(report, provider)
    backups = backups if backups is not None else base.path / "backups" / "store"
    report.newest_backup = _part(report, "backups", lambda: newest_backup(provider, backups))
    report.memory_index = _part(report, "memory index", lambda: memory_drift(provider))
    report.config_versions = _part(report, "config versions", lambda: config_versions(provider))
    report.resumed = provider.notices()
    return report


def _part(report: StatusReport, what: str, read: Callable[[], Any]) -> Any:
    """One part of the report; a failure is a note (the rest is still worth showing)."""
    try:
        return read()
    except TriggerfishError as exc:
        report.notes.append(f"{what}: {exc.message}")
    except OSError as exc:
        report.notes.append(f"{what}: {exc.strerror or exc}")
    return None


def _file_parts(report: StatusReport, provider: StorageProvider, path: Path) -> None:
    """The parts of a store kept in a local file (SQLite): its files, the gateway's token
    beside it, the live writers the write gate would pause."""
    report.read_only = bool(getattr(provider, "read_only", False))
    report.sqlite = _part(report, "files", provider.file_status)
    loose = token_exposed(path.parent / TOKEN_FILE)
    if loose is not None:
        report.notes.append(loose)

    def writers() -> list[dict[str, Any]]:
        return [writer.as_dict() for writer in provider.live_writers()]

    report.live_writers = _part(report, "live writers", writers)


# -- the parts ---------------------------------------------------------------------------

#: The gateway's API token beside its store (newer builds; rewritten 0600 at every start).
TOKEN_FILE = "gateway.token"


def token_exposed(token: Path) -> str | None:
    """A note when the gateway's token can be read by others than its owner (None: it
    cannot, or there is none). Its content is never read."""
    try:
        mode = token.stat().st_mode & 0o777
    except OSError:
        return None
    if not mode & 0o077:
        return None
    return (
        f"{token} can be read by group or others (mode {mode:04o}): it is the gateway's "
        f"API token, which the gateway writes 0600; chmod 600 {token}"
    )


def daemon_state(path: Path) -> dict[str, Any]:
    """What ``daemon.json`` says, and whether a process of the daemon is there."""
    state: dict[str, Any] = {
        "file": str(path),
        "exists": path.is_file(),
        "started": None,
        "pid": None,
        "running": False,
        "processes": [],
    }
    if not state["exists"]:
        return state
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    if isinstance(data, dict):
        state["started"] = next(
            (str(data[name]) for name in START_FIELDS if data.get(name) is not None), None
        )
        pid = data.get("pid")
        state["pid"] = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
    processes = set(openers(path) or ())
    if state["pid"] is not None and pid_alive(state["pid"]):
        processes.add(state["pid"])
    state["processes"] = sorted(processes)
    state["running"] = bool(processes)
    return state


def successful_sweep(record: dict[str, Any]) -> bool:
    """A sweep that ran to its end over every namespace: no error, not interrupted, not
    limited to some namespaces (``retention sweep --namespace``)."""
    return not record.get("error") and not record.get("interrupted") and not record.get("only")


def audit_records(provider: StorageProvider, store: str | None) -> dict[str, Any]:
    """This store's newest sweep, newest successful sweep and newest backup, from the
    audit records that name ``store`` (its id): another store's records, copied with
    the data by a migrate or a restore elsewhere, and records naming no store (written
    before stores had ids) are never this store's. ``passed``: how many newer records
    of each kind were passed over for that reason."""
    keys = audit.hook_keys(provider, (SWEEP_HOOK, BACKUP_HOOK))
    sweep, passed_sweeps = audit.newest_own(provider, keys[SWEEP_HOOK], store)
    good = sweep
    if sweep is not None and not successful_sweep(sweep):
        older = keys[SWEEP_HOOK][: keys[SWEEP_HOOK].index(sweep["key"])]
        good, _ = audit.newest_own(provider, older, store, successful_sweep)
    backup, passed_backups = audit.newest_own(provider, keys[BACKUP_HOOK], store)
    return {
        "last_sweep": _shown(sweep),
        "last_successful_sweep": _shown(good),
        "last_backup": _shown(backup),
        "passed": {"sweep": len(passed_sweeps), "backup": len(passed_backups)},
    }


def _audit_parts(report: StatusReport, provider: StorageProvider) -> None:
    found = _part(report, "audit", lambda: audit_records(provider, report.store_id))
    if found is None:
        return
    report.last_sweep = found["last_sweep"]
    report.last_successful_sweep = found["last_successful_sweep"]
    report.last_backup = found["last_backup"]
    for kind, count in found["passed"].items():
        if count:
            report.notes.append(
                f"audit records: {count} {kind} record(s) newer than this store's last "
                "name another store (copied with the data) or none (written before store "
                "ids): not this store's"
            )


_RECORD_FIELDS = (
    "key",
    "timestamp",
    "user",
    "host",
    "store",
    "target",
    "counts",
    "name",
    "destination",
    "kind",
    "label",
    "interrupted",
    "error",
    "only",
)


def _shown(record: dict[str, Any] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {name: record[name] for name in _RECORD_FIELDS if name in record}


def newest_backup(provider: StorageProvider, directory: Path) -> dict[str, Any] | None:
    """The newest backup of this store in ``directory``, and how many it holds."""
    # lazy: backup.dest and backup.stores add 17 modules to `status` of a missing store
    from triggerfish_cli.backup.dest import LocalDestination
    from triggerfish_cli.backup.stores import ref_of, same_store

    if not directory.is_dir():
        return None
    store = ref_of(provider)
    entries = LocalDestination(directory).entries()
    ours = [e for e in entries if e.manifest is not None and same_store(e.manifest, store)]
    if not ours:
        return {"destination": str(directory), "backups": 0, "others": len(entries)}
    newest = max(ours, key=lambda entry: (entry.created, entry.name))
    return {
        "destination": str(directory),
        "backups": len(ours),
        "others": len(entries) - len(ours),
        "name": newest.name,
        "created": newest.created,
        "kind": newest.manifest.kind if newest.manifest else None,
        "keys": newest.manifest.keys if newest.manifest and not newest.manifest.sealed else None,
        "encrypted": bool(newest.manifest and newest.manifest.encrypted),
        "verified": newest.verified,
        "contents_verified_at": max(
            (e.contents_checked_at for e in ours if e.contents_checked_at), default=None
        ),
    }


def memory_drift(provider: StorageProvider) -> dict[str, Any]:
    """Index drift over every level, as ``memory reindex --dry-run`` (counts only)."""
    # lazy: classification and memory.indexes add 6 modules to `status` of a missing store
    from triggerfish_cli.classification import Level
    from triggerfish_cli.memory.indexes import index_for

    drift = index_for(provider).check(list(Level), agent=None)
    counts = drift.as_dict()
    counts.pop("samples", None)
    counts["to_fix"] = drift.to_fix
    return counts


def config_versions(provider: StorageProvider) -> dict[str, Any]:
    # lazy: config.versions adds 10 modules (hashlib) to `status` of a missing store
    from triggerfish_cli.config.versions import version_numbers

    numbers = version_numbers(provider)
    return {
        "count": len(numbers),
        "oldest": numbers[0] if numbers else None,
        "newest": numbers[-1] if numbers else None,
    }
