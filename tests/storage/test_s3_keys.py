"""The S3 key encoding: any key round-trips, names sort like keys, prefixes stay prefixes."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triggerfish_cli.errors import InvalidDataError
from triggerfish_cli.storage.s3.keys import (
    EMPTY_KEY,
    KeyCodec,
    decode,
    encode,
    frame,
    unframe,
)

SAFE_NAME = re.compile(r"^[-0-9:A-Za-z*.@_~!]*$")

# Every code point class that matters: ASCII (all of it), Latin-1, BMP, astral, U+10FFFF.
_chars = st.one_of(
    st.characters(min_codepoint=0, max_codepoint=0x7F),
    st.characters(codec="utf-8"),
    st.sampled_from(["é", "日", "😀", "\U0010ffff", "/", "%", ":", ".", " ", "~", "!", "_"]),
)
_keys = st.text(_chars, max_size=12)


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("sessions:3f2a-9c", "sessions:3f2a-9c"),
        ("a b/c", "a*20b.2Fc"),
        ("é", "~C3~A9"),
        ("100%", "100*25"),
        ("..", ".2E.2E"),
        ("x ", "x*20"),
        ("a_b", "a_5Fb"),
        ("", EMPTY_KEY),
        ("audit:2026-03-28T14:05:40.902Z:admin_kv_set", None),
    ],
)
def test_examples(key: str, name: str | None) -> None:
    encoded = encode(key)
    if name is not None:
        assert encoded == name
    assert decode(encoded) == key
    assert SAFE_NAME.match(encoded)


@settings(max_examples=400, deadline=None)
@given(a=_keys, b=_keys)
def test_order_and_prefixes_are_preserved(a: str, b: str) -> None:
    assert decode(encode(a)) == a
    assert (a < b) == (encode(a) < encode(b))
    assert (a == b) == (encode(a) == encode(b))
    if a:  # the empty key is a name of its own, not an empty prefix
        assert b.startswith(a) == encode(b).startswith(encode(a))


@settings(max_examples=200, deadline=None)
@given(key=_keys)
def test_names_are_safe_for_s3_and_its_tools(key: str) -> None:
    name = encode(key)
    assert SAFE_NAME.match(name)
    assert ".." not in name and "//" not in name and "/" not in name
    assert not name.endswith((" ", ".")) and "%" not in name
    assert "!" not in name or name == EMPTY_KEY


@pytest.mark.parametrize("name", ["a b", "a%20b", "*2", "*zz", "a~41", "A!x", "~FF", "é"])
def test_foreign_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidDataError, match="not a Triggerfish key"):
        decode(name)


def test_long_keys_are_hashed_within_the_limit() -> None:
    codec = KeyCodec(1024 - len("prefix/"))
    short = "memory:main-session:PUBLIC:" + "x" * 200
    assert codec.name(short) == encode(short)
    long_key = "memory:main-session:PUBLIC:" + "日本" * 400  # 2400 bytes, 7200 encoded
    name = codec.name(long_key)
    assert len(name) == codec.limit and codec.is_long(name)
    assert name.startswith(encode(long_key)[: codec.cut] + "!")
    assert codec.name(long_key + "x") != name
    assert not codec.is_long(codec.name(short))
    assert unframe(frame(long_key, "v\n1"), name) == (long_key, "v\n1")
    with pytest.raises(InvalidDataError):
        unframe(b"garbage", name)


@settings(max_examples=200, deadline=None)
@given(keys=st.sets(st.text(st.sampled_from("ab日:/"), max_size=40), max_size=25))
def test_restore_order_sorts_runs_of_long_keys(keys: set[str]) -> None:
    """With a tiny name budget most keys are long; the listing still comes out in key order."""
    codec = KeyCodec(82)  # cut = 17 encoded characters
    bodies = {codec.name(k): frame(k, f"v:{k}") for k in keys}
    listed = sorted((name, len(body)) for name, body in bodies.items())

    def read_long(name: str) -> tuple[str, str]:
        return unframe(bodies[name], name)

    entries = list(codec.restore_order(listed, read_long))
    assert [e.key for e in entries] == sorted(keys)
    for entry in entries:
        assert entry.size == len(f"v:{entry.key}".encode()) or not codec.is_long(entry.name)


def test_a_long_key_object_deleted_after_listing_is_skipped() -> None:
    codec = KeyCodec(82)
    keys = ["a" * 90, "a" * 91, "b"]
    listed = sorted((codec.name(k), 1) for k in keys)
    assert codec.is_long(codec.name("a" * 90))
    gone = codec.name("a" * 90)

    def read_long(name: str) -> tuple[str, str] | None:
        if name == gone:
            return None
        return unframe(frame("a" * 91, "v"), name)

    assert [e.key for e in codec.restore_order(listed, read_long)] == ["a" * 91, "b"]
