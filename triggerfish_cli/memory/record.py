"""One memory record: its shape as the gateway writes it, parsed and checked."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from triggerfish_cli import cells
from triggerfish_cli.classification import Level
from triggerfish_cli.memory.keys import LEVELS_BY_NAME, split_key, storage_key
from triggerfish_cli.serialization import fast_loads, parse_iso


@dataclass(frozen=True)
class MemoryRecord:
    """One well-formed memory record, as stored at ``storage_key``."""

    agent: str
    level: Level
    key: str
    content: str
    tags: tuple[str, ...]
    expired: bool
    created_at: Any
    updated_at: Any
    value: str = field(repr=False)

    @functools.cached_property
    def document(self) -> dict[str, Any]:
        """The whole record as a JSON object (parsed when first asked for)."""
        # Exact (msgspec, else json): orjson reads an integer beyond 64 bits as a
        # float, and a rewrite of the record (memory delete) would keep the float.
        document = _parsers().exact(self.value)
        assert isinstance(document, dict)
        return document

    @property
    def storage_key(self) -> str:
        return storage_key(self.agent, self.level, self.key)

    @property
    def live(self) -> bool:
        return not self.expired

    def updated(self) -> datetime | None:
        return parse_iso(self.updated_at)

    def as_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "key": self.key,
            "level": self.level.name,
            "content": self.content,
            "tags": list(self.tags),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expired": self.expired,
            "source_session": self.document.get("sourceSessionId"),
            "lineage": self.document.get("lineageId"),
            "storage_key": self.storage_key,
        }


@dataclass(frozen=True)
class Malformed:
    """A kv row under ``memory:`` that is not a well-formed memory record."""

    storage_key: str
    reason: str


def parse_record(
    skey: str, value: str, loads: Callable[[str], Any] | None = None
) -> MemoryRecord | Malformed:
    """Parse one kv row. Well-formed means all of:

    - the key is ``memory:<agent>:<LEVEL>:<key>`` with one of the four levels;
    - the value is a JSON object with a string ``content``, a boolean
      ``expired``, a list of strings ``tags``, and ``classification`` equal
      to the level in the key (a record claiming another level than where it
      is stored is suspect, so it is shown to nobody).

    Anything else is :class:`Malformed`, never an exception (a key or value
    that is not UTF-8 text, cells.py, too).
    """
    plain = cells.is_plain
    if not ((skey.isascii() or plain(skey)) and (value.isascii() or plain(value))):
        return Malformed(
            skey, f"{'key' if not cells.is_plain(skey) else 'value'} is not UTF-8 text"
        )
    # Inlined (split_key, Level.name, the dataclass's frozen __init__): list and
    # search parse every row they show, and this is most of their time.
    parts = skey.split(":", 3)
    level = LEVELS_BY_NAME.get(parts[2]) if len(parts) == 4 else None
    if level is None or parts[0] != "memory" or not parts[1]:
        return Malformed(skey, "key is not memory:<agent>:<LEVEL>:<key>")
    parsers = _parsers()
    if parsers.fields is not None:
        try:
            fields = parsers.fields.decode(value)
        except parsers.error:
            pass  # not well-formed: the checks below say why
        else:
            if fields.classification == parts[2]:
                record = _new_record(MemoryRecord)
                _set_dict(record, "__dict__", {
                    "agent": parts[1],
                    "level": level,
                    "key": parts[3],
                    "content": fields.content,
                    "tags": tuple(fields.tags),
                    "expired": fields.expired,
                    "created_at": fields.createdAt,
                    "updated_at": fields.updatedAt,
                    "value": value,
                })
                return record
    try:
        document = (loads or fast_loads())(value)
    except (ValueError, TypeError):
        return Malformed(skey, "value is not valid JSON")
    if type(document) is not dict:
        return Malformed(skey, "value is not a JSON object")
    content, tags, expired = document.get("content"), document.get("tags"), document.get("expired")
    if type(content) is not str:
        return Malformed(skey, "content is not a string")
    if type(expired) is not bool:
        return Malformed(skey, "expired is not true or false")
    if type(tags) is not list:
        return Malformed(skey, "tags is not a list of strings")
    try:
        "".join(tags)  # every item a string (JSON gives no str subclass); in C, not a loop
    except TypeError:
        return Malformed(skey, "tags is not a list of strings")
    if document.get("classification") != parts[2]:
        return Malformed(skey, f"classification is not {parts[2]}, the level in its key")
    record = _new_record(MemoryRecord)
    _set_dict(record, "__dict__", {
        "agent": parts[1],
        "level": level,
        "key": parts[3],
        "content": content,
        "tags": tuple(tags),
        "expired": expired,
        "created_at": document.get("createdAt"),
        "updated_at": document.get("updatedAt"),
        "value": value,
    })
    return record


_new_record = object.__new__
_set_dict = object.__setattr__


class _Parsers(NamedTuple):
    #: A decoder of the fields a well-formed record must have, checked as it parses
    #: (msgspec, in C; the other fields are skipped), or None without msgspec.
    fields: Any
    #: What ``fields`` raises for a value that is not such a record.
    error: type[Exception] | tuple[type[Exception], ...]
    #: An exact JSON parser (orjson reads an integer beyond 64 bits as a float).
    exact: Callable[[str], Any]


@functools.cache
def _parsers() -> _Parsers:
    """Made on first use: a command that parses no record never imports msgspec."""
    try:
        # lazy: msgspec (+17 modules, ~20 ms) only once a record is parsed; optional
        import msgspec
    except ImportError:
        return _Parsers(None, Exception, json.loads)

    class Fields(msgspec.Struct, gc=False):
        content: str
        tags: list[str]
        expired: bool
        classification: str
        createdAt: Any = None
        updatedAt: Any = None

    def exact(text: str) -> Any:
        try:
            return msgspec.json.decode(text)
        except UnicodeEncodeError:  # text that is not UTF-8 (cells.py): msgspec cannot take it
            return json.loads(text)

    # UnicodeEncodeError: the same, from the fields' decoder (the checks below it then say)
    return _Parsers(msgspec.json.Decoder(Fields), (msgspec.DecodeError, UnicodeEncodeError), exact)


def disagreement(skey: str, value: str) -> str | None:
    """Why a memory row's record disagrees with its key (write-down), or None.

    A record whose ``classification``, ``agentId`` or ``key`` differ from its
    storage key would be read at the key's level: a RESTRICTED record stored
    under ``...:PUBLIC:...`` is published by a merge. Malformed values (not a
    JSON object) claim nothing and are shown to nobody: no disagreement.
    """
    parts = split_key(skey)
    if parts is None:
        return None
    agent, level, key = parts
    try:
        document = fast_loads()(value)
    except (ValueError, TypeError):
        return None
    if not isinstance(document, dict):
        return None
    if document.get("classification") != level.name:
        return f"its record is not classified {level.name}"
    if "agentId" in document and document["agentId"] != agent:
        return f"its record belongs to another agent than {agent}"
    if "key" in document and document["key"] != key:
        return "its record carries another key"
    return None
