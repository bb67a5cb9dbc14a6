"""The namespace registry: every key family Triggerfish writes, in one table.

Each namespace has its key prefix, a one-line description, where it comes
from (the design documents, the real gateway, or both) and how to read the
age of one of its records:

- ``time_fields``: dotted JSON paths tried in order; the first that holds an
  ISO time is the record's time (``origin.accessed_at`` for lineage).
- ``time_in_key``: the time is the key's second segment (``audit:<ISO>:<hook>``).
- ``key_millis``: the key ends in ``-<epoch milliseconds>`` (a scheduler run's
  ``todos:scheduler-<channel>-<ms>``); keys without it have no age.
- ``array_field``: the value is a JSON array of entries each carrying this
  time field (``cron-history:``); the record's time is its newest entry.
- none of these: the record has no age (bare strings, counters, index keys
  that follow another record).
- ``deadline``: a field that holds a deadline rather than an age (a pending
  pairing code's ``expiresAt`` lies in the future). A record whose deadline
  is still ahead is *pending*: it has no age yet (:func:`pending`).

A record whose value is not what its namespace expects (malformed JSON, a
bare string where an object was expected, no time field) has no age: it is
"age unknown", which retention never deletes.

Prefixes are disjoint: no prefix starts with another, so every key belongs
to at most one namespace.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

from triggerfish_cli import cells
from triggerfish_cli.serialization import canonical_iso, loads, parse_iso, to_iso

_T = TypeVar("_T")

_KEY_MILLIS = re.compile(r"-(\d{10,16})$")
_KEY_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?")


@dataclass(frozen=True)
class Namespace:
    prefix: str
    description: str
    #: "design" (SPEC.md), "gateway" (UPSTREAM.md) or "both".
    origin: str
    time_fields: tuple[str, ...] = ()
    time_in_key: bool = False
    array_field: str | None = None
    #: Another namespace whose records this one's keys follow (index keys).
    follows: str | None = None
    #: Which time the age reads, for people: "createdAt", "key", ...
    age_note: str = ""
    #: A time field that is a deadline, not an age (see :func:`pending`).
    deadline: str | None = None
    #: The key ends in ``-<epoch ms>``, the record's time.
    key_millis: bool = False

    @property
    def name(self) -> str:
        return self.prefix.rstrip(":")

    @property
    def has_age(self) -> bool:
        return bool(self.time_fields or self.time_in_key or self.array_field or self.key_millis)


def _ns(
    prefix: str,
    description: str,
    origin: str,
    *time_fields: str,
    time_in_key: bool = False,
    array_field: str | None = None,
    follows: str | None = None,
    deadline: str | None = None,
    key_millis: bool = False,
) -> Namespace:
    note = (
        "time in key"
        if time_in_key
        else "run time in key (ms)"
        if key_millis
        else f"newest {array_field}"
        if array_field
        else " or ".join(time_fields)
        if time_fields
        else f"none (follows {follows})"
        if follows
        else "none"
    )
    if deadline is not None:
        note += f" ({deadline} is a deadline)"
    return Namespace(
        prefix,
        description,
        origin,
        tuple(time_fields),
        time_in_key,
        array_field,
        follows,
        note,
        deadline,
        key_millis,
    )


#: The registry. Order is display order.
NAMESPACES: tuple[Namespace, ...] = (
    _ns("sessions:", "session state (taint, history, channel)", "both", "createdAt"),
    _ns("main-session-id", "id of the owner's main session (one key)", "gateway", "createdAt"),
    _ns(
        "session-id:",
        "current session of a channel, session-id:<channel>",
        "gateway",
        "createdAt",
    ),
    _ns(
        "taint:",
        "session taint level (design; the gateway keeps it in sessions:)",
        "design",
        follows="sessions:",
    ),
    _ns(
        "memory:",
        "agent persistent memory, memory:<agent>:<LEVEL>:<key>",
        "gateway",
        "updatedAt",
        "createdAt",
    ),
    _ns("conv:", "conversation messages, conv:<session>:<seq>", "gateway", "timestamp"),
    _ns(
        "conv-session:", "last conversation sequence number per session", "gateway", follows="conv:"
    ),
    _ns("lineage:", "data-lineage records", "both", "origin.accessed_at"),
    _ns("lineage-session:", "lineage index: session -> lineage id", "gateway", follows="lineage:"),
    _ns(
        "lineage-hash:",
        "lineage index: content hash -> latest lineage id",
        "gateway",
        follows="lineage:",
    ),
    _ns("lineage-fwd:", "lineage index: parent -> child", "gateway", follows="lineage:"),
    _ns("audit:", "audit log entries, audit:<ISO time>:<hook>", "design", time_in_key=True),
    _ns("cron:", "cron job definitions and state", "both", "createdAt"),
    _ns(
        "cron-history:",
        "cron run history, up to 100 runs per job",
        "gateway",
        array_field="executedAt",
    ),
    _ns("trigger:", "last trigger firing per source, trigger:last:<source>", "gateway", "firedAt"),
    _ns(
        "notifications:",
        "undelivered notifications, notifications:<user>:<id>",
        "both",
        "createdAt",
    ),
    _ns(
        "exec:",
        "execution-environment run history",
        "design",
        "createdAt",
        "startedAt",
        "timestamp",
    ),
    _ns("skills:", "installed skill metadata", "design", "installedAt", "createdAt"),
    _ns("config:", "config snapshots, config:v<N>", "design", "createdAt"),
    _ns(
        "todos:",
        "agent todo lists, todos:<agent>",
        "gateway",
        key_millis=True,
    ),
    _ns(
        "pairing:",
        "channel pairing codes and linked accounts",
        "gateway",
        "linkedAt",
        "expiresAt",
        deadline="expiresAt",
    ),
    _ns("team:", "agent team state", "gateway", "createdAt"),
    _ns("workflows:", "saved workflow definitions", "gateway", "savedAt"),
    _ns("workflow-runs:", "workflow run records", "gateway", "completedAt"),
    _ns(
        "workflow-versions:",
        "workflow version proposals, workflow-versions:<name>:<versionId>",
        "gateway",
        "version.resolvedAt",
        "version.proposedAt",
    ),
    _ns("delegation:", "delegation chains, delegation:<chainId> (not wired yet)", "gateway"),
    _ns("healthcheck:", "health-check probe, written and deleted at once", "gateway"),
    _ns("prefs:", "owner preferences, prefs:owner:<name>", "gateway"),
    _ns("browser:", "browser profile watermarks (bare strings)", "gateway"),
)

_BY_PREFIX = {ns.prefix: ns for ns in NAMESPACES}
PREFIXES: tuple[str, ...] = tuple(ns.prefix for ns in NAMESPACES)
_WITHOUT_COLON = tuple(ns for ns in NAMESPACES if not ns.prefix.endswith(":"))


def get(prefix_or_name: str) -> Namespace | None:
    """A namespace by prefix (``sessions:``) or name (``sessions``)."""
    found = _BY_PREFIX.get(prefix_or_name)
    if found is None and not prefix_or_name.endswith(":"):
        found = _BY_PREFIX.get(prefix_or_name + ":")
    return found


def for_key(key: str) -> Namespace | None:
    """The namespace a key belongs to, or ``None`` for an unknown key."""
    colon = key.find(":")
    if colon >= 0:
        found = _BY_PREFIX.get(key[: colon + 1])
        if found is not None:
            return found
    for namespace in _WITHOUT_COLON:
        if key.startswith(namespace.prefix):
            return namespace
    return None


def _dig(document: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(document, dict):
            return None
        document = document.get(part)
    return document


def record_time(
    namespace: Namespace,
    key: str,
    value: str,
    loads: Callable[[str], Any] | None = None,
) -> datetime | None:
    """The time of one record as its namespace defines it; ``None`` when unknown."""
    return _record(namespace, key, value, loads, parse_iso)


def record_iso(
    namespace: Namespace,
    key: str,
    value: str,
    loads: Callable[[str], Any] | None = None,
) -> str | None:
    """:func:`record_time` as a canonical ISO string (string order is time order).

    For full scans: no datetime is built for the gateway's own time form.
    """
    return _record(namespace, key, value, loads, canonical_iso)


def time_reader(
    namespace: Namespace, loads: Callable[[str], Any] | None = None
) -> Callable[[str, str], str | None]:
    """``(key, value) -> record_iso(namespace, key, value, loads)``, specialised for speed.

    For full scans over a million records: the namespace's way of reading a
    time is resolved once, not per record. Same results as :func:`record_iso`.
    """
    fields = namespace.time_fields
    if (
        namespace.time_in_key
        or namespace.key_millis
        or namespace.array_field
        or any("." in f for f in fields)
    ):
        return lambda key, value: record_iso(namespace, key, value, loads)
    if not fields:
        return lambda key, value: None
    parse = loads or _json_loads
    fast = _fields_decoder(tuple(fields))

    def exact(value: str) -> str | None:
        try:
            document = parse(value)
        except ValueError:
            return None
        if type(document) is not dict:
            return None
        for field in fields:
            moment = canonical_iso(document.get(field))
            if moment is not None:
                return moment
        return None

    if fast is None:
        return lambda key, value: exact(value) if value and value[0] == "{" else None
    decode, failed = fast

    def read(key: str, value: str) -> str | None:
        if not value or value[0] != "{":
            return None
        try:
            found = decode(value)
        except failed:  # malformed, or not an object: as the full parser sees it
            return exact(value)
        for field in fields:
            moment = canonical_iso(getattr(found, field))
            if moment is not None:
                return moment
        return None

    return read


@functools.cache
def _fields_decoder(
    fields: tuple[str, ...],
) -> tuple[Callable[[str], Any], type[Exception] | tuple[type[Exception], ...]] | None:
    """A decoder of just these top-level fields of a JSON object, the rest skipped
    unread (msgspec, in C: about 3x faster than a full parse of a message), and what it
    raises; None without msgspec or for a field name it cannot take."""
    try:
        # lazy: msgspec adds 17 modules to `kv get --raw`; optional
        import msgspec
    except ImportError:  # pragma: no cover - msgspec is a dependency
        return None
    if not all(field.isidentifier() for field in fields):
        return None
    struct = msgspec.defstruct("Times", [(field, object, None) for field in fields], gc=False)
    # UnicodeEncodeError: text that is not UTF-8 (cells.py), which msgspec cannot encode
    return msgspec.json.Decoder(struct).decode, (msgspec.DecodeError, UnicodeEncodeError)


def _record(
    namespace: Namespace,
    key: str,
    value: str,
    loads: Callable[[str], Any] | None,
    convert: Callable[[Any], _T | None],
) -> _T | None:
    if namespace.time_in_key:
        # ISO times hold ':' themselves, and so may the hook after them.
        match = _KEY_TIME.match(key, len(namespace.prefix))
        return convert(match.group(0)) if match else None
    if namespace.key_millis:
        millis = _KEY_MILLIS.search(key)
        return convert(millis_iso(int(millis.group(1)))) if millis else None
    if not namespace.time_fields and not namespace.array_field:
        return None
    if not value or value[0] not in "{[":
        return None  # a bare string where JSON was expected
    try:
        document = (loads or _json_loads)(value)
    except ValueError:
        return None
    if namespace.array_field:
        if not isinstance(document, list):
            return None
        times = [
            convert(entry.get(namespace.array_field))
            for entry in document
            if isinstance(entry, dict)
        ]
        known = [moment for moment in times if moment is not None]
        return max(known) if known else None  # type: ignore[type-var]
    for path in namespace.time_fields:
        if "." in path:
            raw = _dig(document, path)
        else:
            raw = document.get(path) if isinstance(document, dict) else None
        moment = convert(raw)
        if moment is not None:
            return moment
    return None


def pending(
    namespace: Namespace,
    value: str,
    now: datetime,
    loads: Callable[[str], Any] | None = None,
) -> bool:
    """Whether the record's deadline (``namespace.deadline``) is still ahead of ``now``.

    A pending pairing code carries an ``expiresAt`` in the future: that is
    when it stops being valid, not when it was made, so it has no age yet.
    """
    if namespace.deadline is None or not value or value[0] != "{":
        return False
    try:
        document = (loads or _json_loads)(value)
    except ValueError:
        return False
    deadline = parse_iso(document.get(namespace.deadline)) if isinstance(document, dict) else None
    return deadline is not None and deadline > now


def millis_iso(millis: int) -> str | None:
    """Epoch milliseconds as the gateway's ISO form; ``None`` outside years 1-9999."""
    try:
        moment = datetime.fromtimestamp(millis / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return to_iso(moment)


def _json_loads(text: str) -> Any:
    return loads(text)


def group_of(key: str) -> str:
    """The display group of a key: its namespace prefix, else its first segment.

    A first segment that is not UTF-8 text (cells.py: NULL and BLOB keys too)
    is the group ``""``.
    """
    namespace = for_key(key)
    if namespace is not None:
        return namespace.prefix
    colon = key.find(":")
    if colon < 0:
        return ""
    group = key[: colon + 1]
    return group if group.isascii() or cells.is_plain(group) else ""


def resolve_prefixes(names: Iterable[str]) -> list[str]:
    """Turn namespace names or prefixes into prefixes; unknown names stay literal."""
    out = []
    for name in names:
        namespace = get(name)
        out.append(namespace.prefix if namespace else name)
    return out
