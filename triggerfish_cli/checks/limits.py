"""The limits of ``status --check``: ``WARN[:CRIT]`` per check, from the defaults, the
``checks:`` section of triggerfish.yaml and the flags (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from triggerfish_cli.errors import InvalidDataError, UsageError
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
    "full_verify_age": CheckSpec(DURATION, "8d"),
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
        return show_age(value)
    if kind == SIZE:
        return format_size(int(value))
    return str(int(value))


def show_age(seconds: float) -> str:
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
