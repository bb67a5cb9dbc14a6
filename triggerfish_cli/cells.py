"""Odd cells: kv keys and values that are not valid UTF-8 text, carried losslessly.

The gateway declares ``kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)``, but
SQLite stores whatever it is given: TEXT holding bytes that are not UTF-8, a
BLOB, and (a rowid table's TEXT primary key allows it) a NULL key. Every
command carries such a cell through unchanged, byte for byte and type for
type.

Inside the tool every key and value is a ``str``. A cell that is not valid
UTF-8 text is a ``str`` holding lone surrogates, which no valid text can
hold (PEP 383, as Python itself carries undecodable file names):

- TEXT that is not UTF-8: decoded with ``surrogateescape`` (each undecodable
  byte ``0xNN`` is U+DCNN);
- a BLOB: U+D800, then its bytes decoded the same way;
- NULL: U+D801 alone.

Each boundary converts explicitly: SQLite (:func:`from_sqlite`, and the
binding in ``storage/sqlite/sql.py``), JSON (:func:`to_json`, :func:`from_json`), the
terminal (:func:`display`). In JSON (``kv export``/``import``, logical
backups, ``--format json``) an odd cell is an object naming its SQLite type
and its bytes in base64, ``{"$bytes": "/wD+", "type": "text"}`` or
``{"$bytes": "AP8=", "type": "blob"}``, and a NULL key is ``null``; every
other cell is a JSON string, as always (older archives hold only those).
Backends that can hold only UTF-8 text (Postgres, S3) refuse such a cell,
naming its key (exit 8).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from triggerfish_cli.errors import InvalidDataError

BLOB_MARK = "\ud800"
NULL_CELL = "\ud801"

_SURROGATE = re.compile("[\ud800-\udfff]")


def is_plain(text: str) -> bool:
    """Valid UTF-8 text (what every backend can hold), not an odd cell."""
    return text.isascii() or _SURROGATE.search(text) is None


def kind(text: str) -> str:
    """SQLite's ``typeof()`` of the cell: ``text``, ``blob`` or ``null``."""
    if text == NULL_CELL:
        return "null"
    if text.startswith(BLOB_MARK):
        return "blob"
    return "text"


def raw_bytes(text: str) -> bytes:
    """The cell's bytes exactly as stored (NULL: none)."""
    if text == NULL_CELL:
        return b""
    if text.startswith(BLOB_MARK):
        text = text[1:]
    return text.encode("utf-8", "surrogateescape")


def from_bytes(data: bytes, kind_name: str = "text") -> str:
    """The cell of stored bytes: TEXT (UTF-8 or not) or a BLOB."""
    text = data.decode("utf-8", "surrogateescape")
    return BLOB_MARK + text if kind_name == "blob" else text


def from_sqlite(cell: Any) -> str:
    """A cell as SQLite returned it (str, bytes, None; text decoded with surrogateescape)."""
    if isinstance(cell, str):
        return cell
    if cell is None:
        return NULL_CELL
    if isinstance(cell, bytes):
        return from_bytes(cell, "blob")
    return str(cell)


def decode_text(data: bytes) -> str:
    """The ``text_factory`` for a connection that met TEXT which is not UTF-8."""
    return data.decode("utf-8", "surrogateescape")


def to_json(text: str) -> Any:
    """The JSON form of a cell: a string, ``{"$bytes": b64, "type": ...}``, or ``null``."""
    if is_plain(text):
        return text
    if text == NULL_CELL:
        return None
    return {"$bytes": base64.b64encode(raw_bytes(text)).decode("ascii"), "type": kind(text)}


def from_json(document: Any, *, null: bool = False) -> str:
    """The cell a JSON form names (see :func:`to_json`); ``ValueError`` if it names none."""
    if isinstance(document, str):
        if not is_plain(document):
            raise ValueError("a lone surrogate: not valid Unicode, so it cannot be stored as text")
        return document
    if document is None and null:
        return NULL_CELL
    if isinstance(document, dict) and set(document) == {"$bytes", "type"}:
        kind_name = document["type"]
        data = document["$bytes"]
        if kind_name in ("text", "blob") and isinstance(data, str):
            try:
                raw = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("$bytes is not base64") from None
            return from_bytes(raw, kind_name)
    raise ValueError('expected a string or {"$bytes": <base64>, "type": "text"|"blob"}')


def sort_key(text: str) -> tuple[int, bytes]:
    """SQLite's order of kv keys: NULL first, then TEXT by its bytes, then BLOBs by theirs.

    For valid text the same as ``str`` order (UTF-8 byte order is code point order).
    """
    what = kind(text)
    return (0 if what == "null" else 1 if what == "text" else 2), raw_bytes(text)


def before(low: str, high: str) -> bool:
    """``low < high`` in SQLite's key order (:func:`sort_key`)."""
    if is_plain(low) and is_plain(high):
        return low < high
    return sort_key(low) < sort_key(high)


def display(text: str) -> str:
    """How a cell is shown to people: NULL, ``x'ff01'`` for a BLOB, ``\\xNN`` for a bad byte.

    Control characters are escaped afterwards by the output layer.
    """
    if is_plain(text):
        return text
    if text == NULL_CELL:
        return "NULL"
    if text.startswith(BLOB_MARK):
        return f"x'{raw_bytes(text).hex()}'"
    return re.sub("[\udc80-\udcff]", lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", text)


def describe(text: str) -> str:
    """An odd cell in a sentence: ``a NULL``, ``a BLOB x'ff'``, ``text that is not UTF-8``."""
    what = kind(text)
    if what == "null":
        return "a NULL"
    if what == "blob":
        return "a BLOB"
    return "text that is not UTF-8"


def name(key: str) -> str:
    """A key in a message: ``'a\\xff'`` quoted, a BLOB as ``x'ff01'``, or ``NULL``."""
    shown = display(key)
    return shown if kind(key) != "text" else f"'{shown}'"


def note(key: str, value: str, verb: str) -> str:
    """The warning naming an odd row: ``key 'a' has a value that is a BLOB: ...``."""
    if is_plain(key):
        return f"key {name(key)} has a value that is {describe(value)}: {verb} as base64"
    what = f"key {name(key)}" if kind(key) == "null" else f"key {name(key)} is {describe(key)}"
    if not is_plain(value):
        what += f", and its value is {describe(value)}"
    how = "null" if kind(key) == "null" else "base64"
    return f"{what}: {verb} as {how}" + (", the value as base64" if not is_plain(value) else "")


def refuse(key: str, value: str, where: str) -> None:
    """For a backend that holds only UTF-8 text: refuse an odd row, naming its key (exit 8)."""
    for field_name, cell in (("key", key), ("value", value)):
        if not is_plain(cell):
            raise InvalidDataError(
                f"{where}: key {name(key)}: its {field_name} is {describe(cell)}, "
                "which this backend cannot hold (only UTF-8 text)",
                hint="leave the row out (`kv delete`), or keep the store on SQLite",
            )
