"""JSON and times in the gateway's JSON.stringify form."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

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
