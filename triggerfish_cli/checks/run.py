"""The checks of ``status --check`` and their findings (see the package's docstring)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from triggerfish_cli.backup.destinations import open_destination
from triggerfish_cli.backup.stores import ref_of, same_store
from triggerfish_cli.checks.limits import (
    COUNT,
    CRITICAL,
    DURATION,
    EXIT_CODES,
    OK,
    SEVERITY,
    SIZE,
    UNKNOWN,
    WARNING,
    Limit,
    Thresholds,
    show,
    show_age,
)
from triggerfish_cli.errors import (
    BackendUnavailableError,
    TriggerfishError,
)
from triggerfish_cli.paths import store_backups_dir
from triggerfish_cli.serialization import parse_iso, utc_now
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.status import collect
from triggerfish_cli.storage.backends import in_local_files
from triggerfish_cli.storage.provider import StorageProvider

# -- findings ----------------------------------------------------------------------------


@dataclass
class Finding:
    check: str
    state: str
    message: str
    value: float | None = None
    #: ``s``, ``B`` or empty (a count), as in Nagios performance data.
    unit: str = ""
    warning: float | None = None
    critical: float | None = None

    def line(self) -> str:
        return f"{self.state} {self.check}: {self.message}"

    def perfdata(self) -> str | None:
        if self.value is None:
            return None
        limits = ";".join(_perf(limit) for limit in (self.warning, self.critical))
        return f"{self.check}={_perf(self.value)}{self.unit};{limits}".rstrip(";")

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "state": self.state,
            "message": self.message,
            "value": self.value,
            "unit": self.unit,
            "warning": self.warning,
            "critical": self.critical,
        }


def _perf(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


_UNITS = {DURATION: "s", SIZE: "B", COUNT: ""}


def evaluate(check: str, value: float | None, limit: Limit, message: str) -> Finding:
    """The finding of ``value`` against ``limit``; None: it never happened (past every limit)."""
    state = limit.worst() if value is None else limit.state(value)
    return Finding(
        check,
        state,
        f"{message} ({limit.describe()})",
        value,
        _UNITS[limit.kind],
        limit.warning,
        limit.critical,
    )


def overall(findings: Sequence[Finding]) -> str:
    states = {finding.state for finding in findings}
    return next((state for state in SEVERITY if state in states), UNKNOWN)


def summary(findings: Sequence[Finding]) -> str:
    """The first line of the plugin output, after ``TRIGGERFISH <STATE> - ``."""
    bad = [finding for finding in findings if finding.state != OK]
    if not bad:
        return f"{len(findings)} checks OK"
    ranked = sorted(bad, key=lambda finding: SEVERITY.index(finding.state))
    return "; ".join(f"{finding.check}: {finding.message}" for finding in ranked)


@dataclass
class CheckReport:
    findings: list[Finding]
    store: dict[str, Any] = field(default_factory=dict)
    #: The check could not run at all: one line, UNKNOWN.
    error: str | None = None

    @property
    def state(self) -> str:
        return overall(self.findings)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.state]

    def lines(self) -> list[str]:
        if self.error is not None:
            return [f"TRIGGERFISH UNKNOWN - {self.error}"]
        perf = " ".join(p for p in (finding.perfdata() for finding in self.findings) if p)
        first = f"TRIGGERFISH {self.state} - {summary(self.findings)}"
        return [first + (f" | {perf}" if perf else ""), *(f.line() for f in self.findings)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "exit_code": self.exit_code,
            "summary": self.error or summary(self.findings),
            "store": self.store,
            "findings": [finding.as_dict() for finding in self.findings],
        }


def failed(message: str) -> CheckReport:
    """The report of a check that could not run at all (exit 3)."""
    return CheckReport([Finding("check", UNKNOWN, message)], error=message)


# -- the checks --------------------------------------------------------------------------


def run_checks(
    config: StorageConfig,
    opener: Callable[[], StorageProvider],
    limits: Thresholds,
    *,
    base: Any = None,
    now: datetime | None = None,
) -> CheckReport:
    """Every check that is on, over the store ``config`` names (opened by ``opener``)."""
    now = now or utc_now()
    report = collect(config, opener, base=base)
    store = {
        "backend": report.backend,
        "location": report.location,
        "store_id": report.store_id,
    }
    if not report.exists:
        message = report.error or f"no Triggerfish store at {report.location}"
        return CheckReport([Finding("store", UNKNOWN, message)], store)
    provider = opener()
    notes = report.notes
    on = limits.limits
    reach, backups = _destination(provider, limits)
    findings = [reach]
    if (limit := on.get("backup_age")) is not None:
        findings.append(_backup_age(limit, backups, reach, now))
    if (limit := on.get("full_verify_age")) is not None:
        findings.append(_full_verify_age(limit, backups, reach, now))
    if (limit := on.get("sweep_age")) is not None:
        findings.append(_sweep_age(limit, report, notes, now))
    if (limit := on.get("wal_size")) is not None:
        findings.append(_wal_size(limit, report, notes))
    if (limit := on.get("index_drift")) is not None:
        findings.append(_index_drift(limit, report, notes))
    if (limit := on.get("config_versions")) is not None:
        findings.append(_config_versions(limit, report, notes))
    findings += _live_writers(report)
    return CheckReport(findings, store)


def _live_writers(report: Any) -> list[Finding]:
    """CRITICAL for a live writer stopped (state T: the gateway answers nothing); WARNING
    when this check resumed one that a run of ours that died had left stopped. Nothing
    (no finding) otherwise."""
    stopped = [w for w in report.live_writers or [] if w.get("stopped")]
    if stopped:
        who = "; ".join(f"pid {w['pid']} ({w['user']}: {w['command']})" for w in stopped)
        message = f"stopped (state T), so not writing or answering: {who}; kill -CONT to resume"
        return [Finding("live_writers", CRITICAL, message)]
    if report.resumed:
        return [Finding("live_writers", WARNING, "; ".join(report.resumed))]
    return []


def _note(notes: Sequence[str], part: str) -> str | None:
    return next((note for note in notes if note.startswith(f"{part}:")), None)


def _unknown(check: str, limit: Limit, message: str) -> Finding:
    return Finding(check, UNKNOWN, message, None, _UNITS[limit.kind], limit.warning, limit.critical)


@dataclass
class _Backup:
    name: str
    created: datetime | None
    verified: str
    #: When a verify that checked its contents found it good (None: none did).
    contents_checked: datetime | None = None


def _destination(
    provider: StorageProvider, limits: Thresholds
) -> tuple[Finding, list[_Backup] | None]:
    """Whether the backup destination can be reached, and this store's backups there."""
    spec = limits.backups
    check = "backup_destination"
    where = spec or str(store_backups_dir())
    if spec is None or "://" not in spec:
        directory = Path(where).expanduser()
        problem = _local_problem(directory)
        if problem is not None:
            return Finding(check, CRITICAL, f"{directory}: {problem}"), None
    try:
        destination = open_destination(spec, endpoint_url=limits.endpoint_url)
        entries = destination.entries()
    except BackendUnavailableError as exc:
        return Finding(check, CRITICAL, f"unreachable: {exc.message}"), None
    except TriggerfishError as exc:
        return Finding(check, UNKNOWN, exc.message), None
    except PermissionError as exc:
        return Finding(check, CRITICAL, f"{where}: cannot list: {exc.strerror}"), None
    except OSError as exc:
        return Finding(check, UNKNOWN, f"{where}: {exc.strerror or exc}"), None
    store = ref_of(provider)
    ours = [
        _Backup(
            entry.name,
            parse_iso(entry.created),
            entry.verified,
            parse_iso(entry.contents_checked_at),
        )
        for entry in entries
        if entry.manifest is not None and same_store(entry.manifest, store)
    ]
    message = (
        f"{destination.describe()} reachable: {len(ours)} backups of this store "
        f"({len(entries)} in all)"
    )
    return Finding(check, OK, message), ours


def _local_problem(directory: Path) -> str | None:
    if not directory.exists():
        return "does not exist"
    if not directory.is_dir():
        return "is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return "cannot be written by this user"
    return None


def _backup_age(
    limit: Limit, backups: list[_Backup] | None, reach: Finding, now: datetime
) -> Finding:
    check = "backup_age"
    if backups is None:
        return _unknown(check, limit, f"cannot list the backups: {reach.message}")
    if not backups:
        return evaluate(check, None, limit, "no backup of this store")
    verified = [b for b in backups if b.verified in GOOD and b.created is not None]
    if not verified:
        newest = max(backups, key=lambda b: (b.created is not None, b.created or now, b.name))
        return evaluate(
            check,
            None,
            limit,
            f"no verified backup of this store ({len(backups)} unverified, newest {newest.name};"
            " run `backup verify`)",
        )
    newest = max(verified, key=lambda b: (b.created, b.name))
    assert newest.created is not None
    age = round((now - newest.created).total_seconds(), 3)
    how = " keyless: encrypted bytes intact, contents not checked" * (newest.verified != "yes")
    return evaluate(
        check, age, limit, f"newest verified backup {show_age(age)} old ({newest.name}{how})"
    )


#: The verdicts ``backup_age`` counts: a full verify, or a keyless one of an encrypted
#: backup (its encrypted bytes are intact; ``full_verify_age`` asks for the contents).
GOOD = ("yes", "keyless")


def _full_verify_age(
    limit: Limit, backups: list[_Backup] | None, reach: Finding, now: datetime
) -> Finding:
    """The time since a verify that checked the contents (with the key, for an encrypted
    backup; here or on another host, its verdict beside the archive) found one of this
    store's backups good."""
    check = "full_verify_age"
    if backups is None:
        return _unknown(check, limit, f"cannot list the backups: {reach.message}")
    times = [b.contents_checked for b in backups if b.contents_checked is not None]
    if not times:
        keyless = any(b.verified == "keyless" for b in backups)
        why = "keyless verifies only: " if keyless else ""
        return evaluate(
            check,
            None,
            limit,
            f"no backup of this store has had its contents verified ({why}run `backup "
            "verify`; an encrypted one with -i KEY where the identity is)",
        )
    age = round(max((now - max(times)).total_seconds(), 0.0), 3)
    return evaluate(check, age, limit, f"contents of a backup verified {show_age(age)} ago")


def _sweep_age(limit: Limit, report: Any, notes: Sequence[str], now: datetime) -> Finding:
    """The last successful sweep of this store (status.audit_records: its audit record
    names this store's id; no error, not interrupted, every namespace)."""
    check = "sweep_age"
    problem = _note(notes, "audit")
    if problem is not None and report.last_successful_sweep is None:
        return _unknown(check, limit, f"cannot read the audit records: {problem}")
    record = report.last_successful_sweep
    if record is None:
        return evaluate(check, None, limit, "no successful sweep of this store recorded")
    when = parse_iso(record.get("timestamp"))
    if when is None:
        return _unknown(check, limit, f"{record['key']}: no time in the record")
    age = round((now - when).total_seconds(), 3)
    return evaluate(check, age, limit, f"last successful sweep {show_age(age)} ago")


def _wal_size(limit: Limit, report: Any, notes: Sequence[str]) -> Finding:
    check = "wal_size"
    if not in_local_files(report.backend):
        return Finding(check, OK, f"{report.backend}: no WAL file")
    if report.sqlite is None:
        return _unknown(check, limit, _note(notes, "files") or "cannot read the store's files")
    size = float(report.sqlite["wal_size"])
    return evaluate(check, size, limit, f"WAL {show(size, SIZE)}")


def _index_drift(limit: Limit, report: Any, notes: Sequence[str]) -> Finding:
    check = "index_drift"
    drift = report.memory_index
    if drift is None:
        return _unknown(check, limit, _note(notes, "memory index") or "cannot read the index")
    count = float(drift.get("to_fix") or 0)
    detail = (
        "in sync"
        if not count
        else f"{drift.get('missing', 0)} missing, {drift.get('stale', 0)} stale, "
        f"{drift.get('orphaned', 0)} orphaned; run `memory reindex`"
    )
    return evaluate(check, count, limit, f"{int(count)} memory index entries to fix: {detail}")


def _config_versions(limit: Limit, report: Any, notes: Sequence[str]) -> Finding:
    check = "config_versions"
    versions = report.config_versions
    if versions is None:
        return _unknown(
            check, limit, _note(notes, "config versions") or "cannot read the config versions"
        )
    count = float(versions.get("count") or 0)
    message = (
        f"{int(count)} config versions held (v{versions['oldest']} to v{versions['newest']})"
        if count
        else "no config version held (run `config snapshot`)"
    )
    return evaluate(check, count, limit, message)
