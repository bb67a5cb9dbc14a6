"""JSON and times in the gateway's own form.

The gateway writes values with ``JSON.stringify``: compact, fields in
construction order, non-ASCII unescaped, times as UTC
``YYYY-MM-DDTHH:MM:SS.mmmZ``. Whatever we write must read back in the
gateway exactly as if it had written it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

_ISO_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(Z|[+-]\d{2}:?\d{2})?$"
)


def dumps(obj: Any) -> str:
    """Serialise like ``JSON.stringify(obj)``."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def loads(text: str) -> Any:
    """Parse JSON; raises ``ValueError`` on malformed input."""
    return json.loads(text)


def fast_loads() -> Callable[[str], Any]:
    """The fastest available JSON parser, for full scans over many values.

    orjson where installed (about 3x faster on a million values); both raise
    ``ValueError`` subclasses on malformed input.
    """
    try:
        import orjson
    except ImportError:  # pragma: no cover - orjson is a dependency
        return json.loads
    return orjson.loads


def to_iso(moment: datetime) -> str:
    """``2026-03-28T14:05:40.902Z``: UTC, milliseconds, ``Z``."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def now_iso() -> str:
    return to_iso(utc_now())


def parse_iso(text: object) -> datetime | None:
    """Parse an ISO-8601 time as the gateway writes it; ``None`` if it is not one.

    Accepts the ``toISOString()`` form and the usual variants (no fraction,
    offsets, a space instead of ``T``). A time without a zone is UTC.
    """
    if not isinstance(text, str) or len(text) > 40:
        return None
    match = _ISO_RE.match(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        micro = int((fraction or "0")[:6].ljust(6, "0"))
        tz = timezone.utc
        if zone and zone != "Z":
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        return datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second or 0), micro, tz
        ).astimezone(timezone.utc)
    except ValueError:
        return None
