"""JSON and times in the gateway's JSON.stringify form."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triggerfish_cli.classification import Level, can_flow_to, parse_level
from triggerfish_cli.serialization import dumps, parse_iso, to_iso


def test_dumps_like_json_stringify() -> None:
    assert dumps({"b": 1, "a": [True, None], "c": "日本"}) == '{"b":1,"a":[true,null],"c":"日本"}'
    assert dumps("line\nbreak") == '"line\\nbreak"'


def test_to_iso_is_millisecond_z() -> None:
    moment = datetime(2026, 3, 28, 14, 5, 40, 902345, tzinfo=timezone.utc)
    assert to_iso(moment) == "2026-03-28T14:05:40.902Z"
    cet = moment.astimezone(timezone(timedelta(hours=1)))
    assert to_iso(cet) == "2026-03-28T14:05:40.902Z"


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 1),
        max_value=datetime(9999, 1, 1),
        timezones=st.just(timezone.utc),
    )
)
def test_iso_round_trip(moment: datetime) -> None:
    text = to_iso(moment)
    assert parse_iso(text) == moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def test_parse_iso_rejects_non_times() -> None:
    for text in ["", "yesterday", "2026-02-30T00:00:00Z", 12, None, "2026-01-01T25:00:00Z"]:
        assert parse_iso(text) is None


def test_levels() -> None:
    assert [str(level) for level in Level] == ["PUBLIC", "INTERNAL", "CONFIDENTIAL", "RESTRICTED"]
    assert parse_level("INTERNAL") is Level.INTERNAL
    for bad in ["internal", "Internal", " INTERNAL", "SECRET", ""]:
        try:
            parse_level(bad)
        except ValueError as exc:
            assert "PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED" in str(exc)
        else:
            raise AssertionError(bad)
    assert can_flow_to(Level.PUBLIC, Level.CONFIDENTIAL)
    assert not can_flow_to(Level.CONFIDENTIAL, Level.INTERNAL)
    assert can_flow_to(Level.RESTRICTED, Level.RESTRICTED)


@given(st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31)))
def test_canonical_iso_orders_like_time(moment: datetime) -> None:
    from triggerfish_cli.serialization import canonical_iso

    text = to_iso(moment)
    assert canonical_iso(text) == text  # the gateway's form comes back as it is
    assert parse_iso(canonical_iso(text)) == parse_iso(text)
    later = moment + timedelta(milliseconds=1)
    assert canonical_iso(to_iso(later)) > text  # string order is time order


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-28T14:05:40.902Z", "2026-03-28T14:05:40.902Z"),
        ("2026-03-28T14:05:40Z", "2026-03-28T14:05:40.000Z"),
        ("2026-03-28T16:05:40.9029+02:00", "2026-03-28T14:05:40.902Z"),
        ("2026-03-28 14:05", "2026-03-28T14:05:00.000Z"),
        ("2024-02-29T00:00:00.000Z", "2024-02-29T00:00:00.000Z"),
        ("2026-02-29T00:00:00.000Z", None),
        ("2026-04-31T00:00:00.000Z", None),
        ("2026-13-01T00:00:00.000Z", None),
        ("1900-02-29T00:00:00.000Z", None),
        ("0999-01-01T00:00:00Z", "0999-01-01T00:00:00.000Z"),
        ("yesterday", None),
        (None, None),
        (1711612800000, None),
    ],
)
def test_canonical_iso(text: object, expected: str | None) -> None:
    from triggerfish_cli.serialization import canonical_iso

    assert canonical_iso(text) == expected
    assert (canonical_iso(text) is None) == (parse_iso(text) is None)
