"""``status --check``: thresholds over what ``status`` reads, as a Nagios/Icinga plugin.

Each check gives one :class:`Finding`: its name, a state (``OK``,
``WARNING``, ``CRITICAL``, ``UNKNOWN``), a one-line message, the value it
measured and its limits. The checks:

- ``backup_age``: the age of the newest *verified* backup of this store (its
  manifest's creation time; verified: ``backup verify`` recorded a pass for
  that very archive) in the backup destination; none at all counts as older
  than any limit;
- ``sweep_age``: the time since the last *successful* ``retention sweep``
  (the newest sweep audit record without an error and not interrupted);
  none recorded counts as older than any limit;
- ``wal_size``: the size of the SQLite store's ``-wal`` file (other
  backends have none: OK);
- ``index_drift``: memory index entries to fix (missing, stale and orphaned
  together, as ``memory reindex --dry-run`` counts them);
- ``config_versions``: stored versions of triggerfish.yaml, alerting when
  *fewer* than the limit are held;
- ``backup_destination``: the destination can be reached: a local directory
  that exists and that we may write into, or an S3 prefix we can list
  (CRITICAL when unreachable; UNKNOWN for any other error).

A limit is ``WARN[:CRIT]``: durations in the project's grammar (``26h:50h``,
``timespec``), sizes (``64MiB:256MiB``), counts (``0:100``). A value above
WARN (below, for ``config_versions``) is a warning, above CRIT critical; a
limit without CRIT never becomes critical, and ``off`` turns a check off.
Limits come from the ``checks:`` section of triggerfish.yaml, overridden by
the command's flags, over the defaults in :data:`CHECKS`.

The overall state is the worst finding: CRITICAL, then WARNING, then
UNKNOWN, then OK (nagios-plugins' ``max_state_alt``); the exit code is the
plugin convention's 0, 1, 2, 3. A store that does not exist is UNKNOWN. The
checks only read: nothing is written to the store or the destination.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from triggerfish_cli.backup.destinations import open_destination
from triggerfish_cli.backup.stores import ref_of, same_store
from triggerfish_cli.errors import (
    BackendUnavailableError,
    InvalidDataError,
    TriggerfishError,
    UsageError,
)
from triggerfish_cli.paths import store_backups_dir
from triggerfish_cli.serialization import parse_iso, utc_now
from triggerfish_cli.settings import StorageConfig
from triggerfish_cli.status import SWEEP_HOOK, collect
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.timespec import format_duration, format_size, parse_duration, parse_size

OK, WARNING, CRITICAL, UNKNOWN = "OK", "WARNING", "CRITICAL", "UNKNOWN"
EXIT_CODES = {OK: 0, WARNING: 1, CRITICAL: 2, UNKNOWN: 3}
#: Worst first (nagios-plugins' max_state_alt).
SEVERITY = (CRITICAL, WARNING, UNKNOWN, OK)

DURATION, SIZE, COUNT = "duration", "size", "count"


@dataclass(frozen=True)
class CheckSpec:
    kind: str
    default: str
    #: Alert when the value is *below* the limits (config versions), not above.
    below: bool = False


#: Every check with a limit: its kind and default (``status --check`` with no flags).
CHECKS: dict[str, CheckSpec] = {
    "backup_age": CheckSpec(DURATION, "26h:50h"),
    "sweep_age": CheckSpec(DURATION, "26h:50h"),
    "wal_size": CheckSpec(SIZE, "64MiB:256MiB"),
    "index_drift": CheckSpec(COUNT, "0:100"),
    "config_versions": CheckSpec(COUNT, "1", below=True),
}
#: The ``checks:`` keys besides the limits.
OTHER_KEYS = ("backups", "endpoint_url")
OFF_WORDS = ("off", "none", "false", "no")


# -- limits ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    """``WARN[:CRIT]`` of one check (seconds, bytes or a count)."""

    warning: float | None
    critical: float | None
    kind: str = COUNT
    below: bool = False

    @classmethod
    def parse(cls, text: str, kind: str, *, below: bool = False, where: str = "") -> Limit:
        where = f"{where}: " if where else ""
        parts = str(text).strip().split(":")
        if len(parts) > 2 or not parts[0]:
            raise UsageError(f"{where}{text!r} is not WARN[:CRIT] (e.g. {_EXAMPLES[kind]})")
        try:
            warning = _number(parts[0], kind)
            critical = _number(parts[1], kind) if len(parts) == 2 and parts[1] else None
        except ValueError as exc:
            raise UsageError(f"{where}{exc}") from None
        if critical is not None and (critical > warning if below else critical < warning):
            order = "at most" if below else "at least"
            raise UsageError(f"{where}{text!r}: CRIT must be {order} WARN")
        return cls(warning, critical, kind, below)

    def state(self, value: float) -> str:
        """The state of ``value`` (math.inf: never happened, older than any limit)."""
        if self.below:
            if self.critical is not None and value < self.critical:
                return CRITICAL
            return WARNING if self.warning is not None and value < self.warning else OK
        if self.critical is not None and value > self.critical:
            return CRITICAL
        return WARNING if self.warning is not None and value > self.warning else OK

    def worst(self) -> str:
        """The state of a value past every limit (a thing that never happened)."""
        return CRITICAL if self.critical is not None else WARNING

    def describe(self) -> str:
        below = "below " if self.below else ""
        text = f"warn {below}{_bound(self.warning, self.kind)}"
        if self.critical is not None:
            text += f", crit {below}{_bound(self.critical, self.kind)}"
        return text


def _bound(value: float | None, kind: str) -> str:
    """A limit as the operator writes it (``26h``, not ``1d2h``)."""
    if kind == DURATION and value is not None:
        return format_duration(timedelta(seconds=value))
    return show(value, kind)


_EXAMPLES = {DURATION: "26h:50h", SIZE: "64MiB:256MiB", COUNT: "0:100"}


def _number(text: str, kind: str) -> float:
    if kind == DURATION:
        return parse_duration(text).total_seconds()
    if kind == SIZE:
        return float(parse_size(text))
    cleaned = text.strip()
    if not cleaned.isdigit():
        raise ValueError(f"{text!r} is not a whole number")
    return float(cleaned)


def show(value: float | None, kind: str) -> str:
    """A measured value or a limit, in the unit of its kind."""
    if value is None:
        return "none"
    if kind == DURATION:
        return _age(value)
    if kind == SIZE:
        return format_size(int(value))
    return str(int(value))


def _age(seconds: float) -> str:
    """``30h``, ``2h5m``, ``4d6h``, ``45m``, ``30s``: at most two whole units, hours up to 3 days
    (so that it reads beside limits such as ``26h``)."""
    seconds = max(int(seconds), 0)
    units = (("d", 86400), ("h", 3600)) if seconds >= 3 * 86400 else (("h", 3600), ("m", 60))
    if seconds < 3600:
        units = (("m", 60), ("s", 1))
    parts: list[str] = []
    for unit, size in units:
        count, seconds = divmod(seconds, size)
        if count or (not parts and unit == units[-1][0]):
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


@dataclass
class Thresholds:
    """The limit of each check (None: that check is off) and the destination to check."""

    limits: dict[str, Limit | None]
    #: A directory or s3://bucket/prefix; None: the default (<base>/backups/store).
    backups: str | None = None
    endpoint_url: str | None = None


def _limit(name: str, raw: Any, where: str) -> Limit | None:
    spec = CHECKS[name]
    if raw is False or (isinstance(raw, str) and raw.strip().lower() in OFF_WORDS):
        return None
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise UsageError(f"{where}: {raw!r} is not WARN[:CRIT] or off")
    text = str(int(raw)) if isinstance(raw, float) and raw.is_integer() else str(raw)
    return Limit.parse(text, spec.kind, below=spec.below, where=where)


def check_section(section: Any, config_path: Path) -> None:
    """Validator of ``checks:`` for ``settings.OUR_SECTIONS``."""
    thresholds(section, {}, config_path)


def thresholds(
    section: Any,
    flags: Mapping[str, str | None],
    config_path: Path | None = None,
) -> Thresholds:
    """The defaults, then the ``checks:`` section, then the flags (each given one wins)."""
    limits: dict[str, Limit | None] = {
        name: Limit.parse(spec.default, spec.kind, below=spec.below)
        for name, spec in CHECKS.items()
    }
    where = f"{config_path}: checks" if config_path is not None else "checks"
    found = Thresholds(limits)
    if section is not None:
        if not isinstance(section, Mapping):
            raise InvalidDataError(f"{where}: must be a mapping")
        known = (*CHECKS, *OTHER_KEYS)
        unknown = sorted(str(key) for key in section if key not in known)
        if unknown:
            raise InvalidDataError(
                f"{where}.{unknown[0]}: unknown setting (known: {', '.join(known)})"
            )
        for name in CHECKS:
            if name in section:
                try:
                    limits[name] = _limit(name, section[name], f"{where}.{name}")
                except UsageError as exc:
                    raise InvalidDataError(exc.message) from None
        for name in OTHER_KEYS:
            value = section.get(name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidDataError(f"{where}.{name}: must be a string, not {value!r}")
        if section.get("backups"):
            found.backups = _relative(section["backups"], config_path)
        found.endpoint_url = section.get("endpoint_url") or None
    for name, raw in flags.items():
        if raw is None:
            continue
        if name in CHECKS:
            limits[name] = _limit(name, raw, "--" + name.replace("_", "-"))
        elif name == "backups":
            found.backups = raw
        elif name == "endpoint_url":
            found.endpoint_url = raw
        else:
            raise KeyError(name)
    return found


def _relative(text: str, config_path: Path | None) -> str:
    """A directory relative to the config file's directory (an s3:// URL as it is)."""
    if "://" in text or config_path is None:
        return text
    path = Path(text).expanduser()
    return str(path if path.is_absolute() else config_path.parent / path)


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
    if (limit := on.get("sweep_age")) is not None:
        findings.append(_sweep_age(limit, provider, now))
    if (limit := on.get("wal_size")) is not None:
        findings.append(_wal_size(limit, report, notes))
    if (limit := on.get("index_drift")) is not None:
        findings.append(_index_drift(limit, report, notes))
    if (limit := on.get("config_versions")) is not None:
        findings.append(_config_versions(limit, report, notes))
    return CheckReport(findings, store)


def _note(notes: Sequence[str], part: str) -> str | None:
    return next((note for note in notes if note.startswith(f"{part}:")), None)


def _unknown(check: str, limit: Limit, message: str) -> Finding:
    return Finding(check, UNKNOWN, message, None, _UNITS[limit.kind], limit.warning, limit.critical)


@dataclass
class _Backup:
    name: str
    created: datetime | None
    verified: str


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
        _Backup(entry.name, parse_iso(entry.created), entry.verified)
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
    verified = [b for b in backups if b.verified == "yes" and b.created is not None]
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
    return evaluate(check, age, limit, f"newest verified backup {_age(age)} old ({newest.name})")


def last_good_sweep(provider: StorageProvider) -> dict[str, Any] | None:
    """The newest sweep audit record that records no error and no interruption."""
    keys = [
        key
        for key in provider.scan_keys("audit:", batch_size=5000)
        if key.endswith(f":{SWEEP_HOOK}")
    ]
    for key in reversed(keys):
        try:
            data = json.loads(provider.get(key) or "")
        except ValueError:
            continue
        if isinstance(data, dict) and not data.get("error") and not data.get("interrupted"):
            data["key"] = key
            return data
    return None


def _sweep_age(limit: Limit, provider: StorageProvider, now: datetime) -> Finding:
    check = "sweep_age"
    try:
        record = last_good_sweep(provider)
    except TriggerfishError as exc:
        return _unknown(check, limit, f"cannot read the audit records: {exc.message}")
    if record is None:
        return evaluate(check, None, limit, "no successful sweep recorded")
    when = parse_iso(record.get("timestamp"))
    if when is None:
        return _unknown(check, limit, f"{record['key']}: no time in the record")
    age = round((now - when).total_seconds(), 3)
    return evaluate(check, age, limit, f"last successful sweep {_age(age)} ago")


def _wal_size(limit: Limit, report: Any, notes: Sequence[str]) -> Finding:
    check = "wal_size"
    if report.backend != "sqlite":
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
