"""How store keys become S3 object names, and back, in the same order.

S3 lists object names in UTF-8 binary order, our key order. Object names
are at most 1024 bytes, and some characters are trouble for S3 or for the
tools around it (``%``, spaces, ``..`` segments, ``//``, control and
non-ASCII characters). The encoding here keeps names safe, readable for the
common keys, and **order-preserving**, so a plain ListObjectsV2 walks the
store in key order and a key prefix is an object-name prefix.

Each byte of the key's UTF-8 form maps to a code:

- ``-``, ``0-9``, ``:``, ``A-Z``, ``a-z``: the character itself.
- every other byte: an escape character and two upper-case hex digits,
  the escape chosen by where the byte falls between the literal runs, so
  that codes sort exactly like the bytes they stand for::

      00-2C  *XX     (below '-')        3B-40  @XX   (between ':' and 'A')
      2E-2F  .XX     (between '-', '0')  5B-60  _XX   (between 'Z' and 'a')
      7B-FF  ~XX     (above 'z': '{', '|', '}', '~', DEL and all non-ASCII)

  ``sessions:3f2a-...`` stays ``sessions:3f2a-...``; ``a b/c`` becomes
  ``a*20b.2Fc``; ``é`` becomes ``~C3~A9``.

The codes are a prefix code and monotone in the byte, so for any keys
``a < b`` iff ``encode(a) < encode(b)``, and ``a`` starts with ``p`` iff
``encode(a)`` starts with ``encode(p)``. The empty key is the name ``!``
(``!`` sorts below every code).

Keys whose encoding does not fit (the object name limit minus the store's
prefix) are stored under ``P + "!" + sha256(key)``, where ``P`` is the
first ``cut`` characters of the encoding; the object's body then starts
with the key itself (see :func:`frame`). Such a name sorts at the start of
the names sharing ``P`` (``!`` is below every code), so only that run of
names can be out of key order; the reader sorts that run by the real keys
(:meth:`KeyCodec.restore_order`). Runs are bounded by how many keys share
the first ``cut`` (~900) encoded characters: in practice one or two.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from triggerfish_cli.errors import InvalidDataError

#: S3's limit on an object name, in UTF-8 bytes.
MAX_NAME = 1024
EMPTY_KEY = "!"
LONG_MARK = "!"
_HASH_LEN = 64

_LITERAL = frozenset(b"-0123456789:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _escape(byte: int) -> str:
    if byte < 0x2D:
        return "*"
    if byte < 0x30:
        return "."
    if byte < 0x41:
        return "@"
    if byte < 0x61:
        return "_"
    return "~"


#: latin-1 character of each byte -> its code, for str.translate.
_ENCODE = {
    byte: chr(byte) if byte in _LITERAL else f"{_escape(byte)}{byte:02X}" for byte in range(256)
}
_ESCAPED = re.compile(r"[*.@_~][0-9A-F]{2}")


def encode(key: str) -> str:
    """The order-preserving name of ``key`` (without the length limit)."""
    if key == "":
        return EMPTY_KEY
    return key.encode("utf-8").decode("latin-1").translate(_ENCODE)


def encode_prefix(prefix: str) -> str:
    """Like :func:`encode`, but ``""`` is the empty name prefix (every key)."""
    return encode(prefix) if prefix else ""


def decode(name: str) -> str:
    """The key of a (regular) encoded name; InvalidDataError for anything else."""
    if name == EMPTY_KEY:
        return ""
    raw = _ESCAPED.sub(lambda m: chr(int(m.group()[1:], 16)), name)
    try:
        key = raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise InvalidDataError(f"object {name!r} is not a Triggerfish key") from None
    if encode(key) != name:  # stray or non-canonical characters
        raise InvalidDataError(f"object {name!r} is not a Triggerfish key")
    return key


def frame(key: str, value: str) -> bytes:
    """The body of a long-key object: ``<key bytes>\\n<key><value>``."""
    key_bytes = key.encode("utf-8")
    return b"%d\n" % len(key_bytes) + key_bytes + value.encode("utf-8")


def unframe(body: bytes, name: str) -> tuple[str, str]:
    """``(key, value)`` of a long-key object's body."""
    head, sep, rest = body.partition(b"\n")
    try:
        if not sep or not head.isdigit():
            raise ValueError
        size = int(head)
        if size > len(rest):
            raise ValueError
        return rest[:size].decode("utf-8"), rest[size:].decode("utf-8")
    except ValueError:
        raise InvalidDataError(f"object {name!r}: not a Triggerfish long-key object") from None


@dataclass
class Entry:
    """One listed object: its key, its name (after the store prefix), the value's size.

    ``value`` is filled for long-key objects, whose body had to be read to
    learn the key.
    """

    key: str
    name: str
    size: int
    value: str | None = None


class KeyCodec:
    """Names within a budget of ``limit`` characters (1024 minus the store prefix)."""

    def __init__(self, limit: int = MAX_NAME) -> None:
        if limit < _HASH_LEN + 2 + 16:
            raise ValueError(f"name budget {limit} is too small")
        self.limit = limit
        #: Length of the encoded-key part of a long-key name.
        self.cut = limit - _HASH_LEN - len(LONG_MARK)

    def name(self, key: str) -> str:
        encoded = encode(key)
        if len(encoded) <= self.limit:
            return encoded
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return encoded[: self.cut] + LONG_MARK + digest

    def is_long(self, name: str) -> bool:
        return len(name) == self.limit and name[self.cut : self.cut + 1] == LONG_MARK

    def list_prefix(self, prefix: str | None) -> str:
        """The name prefix to list for a key prefix (keys must still be checked)."""
        return encode_prefix(prefix or "")[: self.cut]

    def list_after(self, key: str) -> str:
        """A name to list strictly after, that skips no name of a key > ``key``."""
        encoded = encode(key)
        return encoded if len(encoded) <= self.cut else encoded[: self.cut]

    def list_from(self, key: str) -> str | None:
        """A name to list strictly after, that skips no name of a key >= ``key``."""
        encoded = encode(key)
        if len(encoded) > self.cut:
            return encoded[: self.cut]
        return encoded[:-1] or None

    def restore_order(
        self,
        listed: Iterable[tuple[str, int]],
        read_long: Callable[[str], tuple[str, str] | None],
    ) -> Iterator[Entry]:
        """Listed ``(name, size)`` in name order -> entries in key order.

        Regular names decode in place. A long-key name starts a run of the
        names sharing its first ``cut`` characters; the run is read whole
        (``read_long`` gives a long object's key and value, None when it was
        deleted since it was listed) and sorted by key.
        """
        names = iter(listed)
        pushed: tuple[str, int] | None = None
        while True:
            if pushed is not None:
                item, pushed = pushed, None
            else:
                found = next(names, None)
                if found is None:
                    return
                item = found
            name, size = item
            if not name:  # a "folder" marker for the store prefix itself
                continue
            if not self.is_long(name):
                if LONG_MARK in name and name != EMPTY_KEY:
                    raise InvalidDataError(f"object {name!r} is not a Triggerfish key")
                yield Entry(decode(name), name, size)
                continue
            run_prefix = name[: self.cut]
            run: list[Entry | None] = [self._long_entry(name, read_long)]
            for following in names:
                if not following[0].startswith(run_prefix):
                    pushed = following
                    break
                if self.is_long(following[0]):
                    run.append(self._long_entry(following[0], read_long))
                else:
                    run.append(Entry(decode(following[0]), following[0], following[1]))
            yield from sorted((e for e in run if e is not None), key=lambda e: e.key)

    def _long_entry(
        self, name: str, read_long: Callable[[str], tuple[str, str] | None]
    ) -> Entry | None:
        found = read_long(name)
        if found is None:
            return None
        key, value = found
        if self.name(key) != name:
            raise InvalidDataError(f"object {name!r}: its key does not match its name")
        return Entry(key, name, len(value.encode("utf-8")), value)
