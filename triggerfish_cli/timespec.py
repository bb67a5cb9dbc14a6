"""The one grammar for durations and times that every option and config setting takes.

Sizes (thresholds): a whole number of bytes, or a number and a unit, binary
(``KiB``, ``MiB``, ``GiB``, ``TiB``, also written ``K``, ``M``, ``G``, ``T``)
or decimal (``kB``, ``MB``, ``GB``, ``TB``): ``64MiB``, ``1.5G``, ``500MB``.

Durations: a number and a unit, or several run together: ``45s``, ``30m``,
``12h``, ``30d``, ``2w``, ``1y`` (365 days), ``1d12h``. Times: an ISO-8601
time (``2026-03-28T14:05:40.902Z``, ``2026-03-28T14:05:40+02:00``, a time
without a zone is UTC) or a date (``2026-03-28``: its midnight, UTC).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from triggerfish_cli.serialization import parse_iso

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_PART = re.compile(r"(\d+)([smhdwy])")
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
GRAMMAR = "a number and a unit s, m, h, d, w or y (365 days), e.g. 30d, 12h, 1y or 1d12h"


def parse_duration(text: str) -> timedelta:
    """``30d`` -> 30 days; ``1d12h`` -> 36 hours. ValueError naming the grammar otherwise."""
    cleaned = text.strip().lower().replace(" ", "")
    parts = _PART.findall(cleaned)
    if not cleaned or "".join(number + unit for number, unit in parts) != cleaned:
        raise ValueError(f"{text!r} is not a duration: use {GRAMMAR}")
    return timedelta(seconds=sum(int(number) * UNITS[unit] for number, unit in parts))


def format_duration(age: timedelta) -> str:
    """The shortest form in the same grammar: 30d, 1y, 36h, 90s."""
    seconds = int(age.total_seconds())
    for unit in ("y", "w", "d", "h", "m"):
        if seconds >= UNITS[unit] and seconds % UNITS[unit] == 0:
            if unit == "w":  # weeks read as days in our policies (14d, not 2w)
                continue
            return f"{seconds // UNITS[unit]}{unit}"
    return f"{seconds}s"


def parse_moment(text: str) -> datetime | None:
    """A date (its midnight, UTC) or an ISO-8601 time; None when it is neither."""
    cleaned = text.strip()
    match = _DATE.fullmatch(cleaned)
    if match is not None:
        try:
            year, month, day = (int(part) for part in match.groups())
            return datetime(year, month, day, tzinfo=timezone.utc)
        except ValueError:
            return None
    return parse_iso(cleaned)


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
SIZE_UNITS = {
    "": 1,
    "b": 1,
    **{p: 1024**n for n, p in enumerate(("k", "m", "g", "t"), 1)},
    **{p + "ib": 1024**n for n, p in enumerate(("k", "m", "g", "t"), 1)},
    **{p + "b": 1000**n for n, p in enumerate(("k", "m", "g", "t"), 1)},
}
SIZE_GRAMMAR = "bytes, or a number and a unit such as 64MiB, 1.5G or 500MB"


def parse_size(text: str) -> int:
    """``64MiB`` -> 67108864; ``500MB`` -> 500000000. ValueError naming the grammar otherwise."""
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size: use {SIZE_GRAMMAR}")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2)])


def format_size(size: int) -> str:
    """``67108864`` -> ``64MiB``; ``1536`` -> ``1.5KiB``; below 1 KiB in bytes (``512B``)."""
    if size < 1024:
        return f"{size}B"
    value, unit = float(size), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):  # noqa: B007 - the last unit reached is used
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f}".rstrip("0").rstrip(".") + unit
