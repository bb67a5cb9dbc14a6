"""The namespace registry and how a record's age is read."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.gateway import GATEWAY_ROWS
from triggerfish_cli import namespaces
from triggerfish_cli.namespaces import NAMESPACES, for_key, record_time

SPEC = [
    "sessions:",
    "taint:",
    "lineage:",
    "audit:",
    "cron:",
    "notifications:",
    "exec:",
    "skills:",
    "config:",
]
UPSTREAM = [
    "sessions:",
    "main-session-id",
    "memory:",
    "conv:",
    "conv-session:",
    "lineage:",
    "lineage-session:",
    "lineage-hash:",
    "lineage-fwd:",
    "cron:",
    "cron-history:",
    "trigger:",
    "notifications:",
    "todos:",
    "pairing:",
    "team:",
    "workflows:",
    "workflow-runs:",
    "prefs:",
    "browser:",
    "session-id:",
    "workflow-versions:",
    "delegation:",
    "healthcheck:",
]


def test_registry_covers_spec_and_upstream() -> None:
    prefixes = {ns.prefix for ns in NAMESPACES}
    assert set(SPEC) <= prefixes
    assert set(UPSTREAM) <= prefixes


def test_prefixes_are_disjoint_and_described() -> None:
    for a in NAMESPACES:
        assert a.description and a.origin in ("design", "gateway", "both")
        for b in NAMESPACES:
            if a is not b:
                assert not b.prefix.startswith(a.prefix), (a.prefix, b.prefix)


@pytest.mark.parametrize(
    ("key", "prefix"),
    [
        ("memory:main-session:PUBLIC:trigger:instructions", "memory:"),
        ("trigger:last:cron", "trigger:"),
        ("pairing:linked:telegram:1", "pairing:"),
        ("main-session-id", "main-session-id"),
        ("conv-session:x", "conv-session:"),
        ("conv:x:000000000001", "conv:"),
        ("Sessions:x", None),
        ("custom:x", None),
        ("nocolon", None),
    ],
)
def test_for_key(key: str, prefix: str | None) -> None:
    found = for_key(key)
    assert (found.prefix if found else None) == prefix


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def test_ages_of_gateway_records() -> None:
    ages = {k: record_time(for_key(k), k, v) for k, v in GATEWAY_ROWS.items() if for_key(k)}
    assert ages[next(k for k in ages if k.startswith("sessions:"))] == utc(
        2026, 3, 28, 14, 5, 40, 902000
    )
    assert ages[next(k for k in ages if k.startswith("lineage:"))] == utc(2026, 3, 28, 14, 5, 42)
    assert ages[next(k for k in ages if k.startswith("cron-history:"))] == utc(
        2026, 3, 28, 9, 0, 0, 90000
    )
    assert ages["main-session-id"] is None  # bare UUID
    assert ages["browser:profile:main-session:watermark"] is None
    assert ages["prefs:owner:bumpers_default"] is None
    assert ages[next(k for k in ages if k.startswith("lineage-hash:"))] is None
    assert ages["memory:main-session:PUBLIC:old-fact"] == utc(2026, 3, 29, 8)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("audit:2026-03-28T14:05:40.902Z:admin_kv_set", "{}", utc(2026, 3, 28, 14, 5, 40, 902000)),
        (
            "audit:2026-03-28T14:05:40.902Z:hook:with:colons",
            "x",
            utc(2026, 3, 28, 14, 5, 40, 902000),
        ),
        ("audit:not-a-time:x", "{}", None),
        ("sessions:x", "{not json", None),
        ("sessions:x", "a bare string", None),
        ("sessions:x", '{"id":"x"}', None),
        ("sessions:x", '{"createdAt":"garbage"}', None),
        ("sessions:x", '{"createdAt":"2026-01-01T00:00:00+02:00"}', utc(2025, 12, 31, 22)),
        ("sessions:x", "[1,2]", None),
        ("cron-history:x", "[]", None),
        ("cron-history:x", '{"executedAt":"2026-01-01T00:00:00Z"}', None),
        ("main-session-id", '{"id":"x","createdAt":"2026-01-01T00:00:00.000Z"}', utc(2026, 1, 1)),
        ("exec:r", '{"startedAt":"2026-01-01T00:00:00Z"}', utc(2026, 1, 1)),
        (
            "session-id:telegram",
            '{"id":"s","createdAt":"2026-01-01T00:00:00.000Z"}',
            utc(2026, 1, 1),
        ),
        # workflow versions: resolvedAt, else proposedAt, both inside "version"
        (
            "workflow-versions:w:v",
            '{"version":{"proposedAt":"2026-01-01T00:00:00.000Z",'
            '"resolvedAt":"2026-01-02T00:00:00.000Z"},"classification":"PUBLIC"}',
            utc(2026, 1, 2),
        ),
        (
            "workflow-versions:w:v",
            '{"version":{"proposedAt":"2026-01-01T00:00:00.000Z"},"classification":"PUBLIC"}',
            utc(2026, 1, 1),
        ),
        ("workflow-versions:w:v", '{"proposedAt":"2026-01-01T00:00:00.000Z"}', None),
        # a scheduler run's todo list: the run's start, the key's milliseconds
        ("todos:scheduler-cron-1767225600000", '{"todos":[]}', utc(2026, 1, 1)),
        ("todos:scheduler-webhook-github-1767225600123", "{}", utc(2026, 1, 1, 0, 0, 0, 123000)),
        ("todos:main-session", '{"todos":[{"created_at":"2026-01-01T00:00:00.000Z"}]}', None),
        ("delegation:c", '{"createdAt":"2026-01-01T00:00:00.000Z"}', None),
        ("healthcheck:test", "ok", None),
    ],
)
def test_record_time_edge_cases(key: str, value: str, expected: datetime | None) -> None:
    ns = for_key(key)
    assert ns is not None
    assert record_time(ns, key, value) == expected


def test_get_by_name_or_prefix() -> None:
    assert namespaces.get("sessions") is namespaces.get("sessions:")
    assert namespaces.get("main-session-id") is not None
    assert namespaces.get("nope") is None


_values = st.one_of(
    st.sampled_from(list(GATEWAY_ROWS.values())),
    st.builds(
        lambda field, value: json.dumps({field: value}),
        st.sampled_from(["createdAt", "updatedAt", "timestamp", "completedAt", "firedAt", "x"]),
        st.one_of(
            st.none(),
            st.integers(),
            st.sampled_from(
                [
                    "2026-03-28T14:05:40.902Z",
                    "2026-03-31T10:00:00Z",
                    "2026-02-30T00:00:00.000Z",
                    "2026-03-28T16:05:40+02:00",
                    "soon",
                ]
            ),
        ),
    ),
    # dotted time fields (lineage's origin.accessed_at, workflow versions' version.*)
    st.builds(
        lambda head, tail, value: json.dumps({head: {tail: value} if tail else value}),
        st.sampled_from(["origin", "version", "x"]),
        st.sampled_from(["accessed_at", "resolvedAt", "proposedAt", "at", None]),
        st.one_of(
            st.none(),
            st.integers(),
            st.lists(st.just("2026-03-28T14:05:40.902Z"), max_size=1),
            st.sampled_from(["2026-03-28T14:05:40.902Z", "2026-03-31T10:00:00+02:00", "x"]),
        ),
    ),
    st.text(max_size=5),
    st.just("[1]"),
    st.just("{broken"),
    # what a reader of only some fields (the scan's fast path) could read otherwise
    st.sampled_from(
        [
            '{"timestamp":"2026-01-01T00:00:00.000Z","timestamp":"2026-02-01T00:00:00.000Z"}',
            '{"createdAt":"2026-01-01T00:00:00.000Z","x":"\\ud800"}',
            '{"createdAt":"2026-01-01T00:00:00.000Z","n":123456789012345678901234567890}',
            '{"createdAt":"2026-01-01T00:00:00.000Z","n":NaN}',
            '{"createdAt":"2026-01-01T00:00:00.000Z"} trailing',
            '{"createdAt":{"at":"2026-01-01T00:00:00.000Z"},"timestamp":"2026-01-01T00:00:00Z"}',
            '{"updatedAt":null,"completedAt":"2026-03-31T10:00:00Z"}',
            '{"origin":{"accessed_at":"2026-03-31T10:00:00Z"},'
            '"origin":{"accessed_at":"2026-01-01T00:00:00.000Z"}}',
            '{"version":{"proposedAt":"2026-03-01T00:00:00.000Z","resolvedAt":null}}',
            '{"version":{"resolvedAt":{"x":1},"proposedAt":"2026-03-31T10:00:00Z"}}',
            '{"origin":null,"version":[]}',
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    namespace=st.sampled_from(NAMESPACES),
    value=_values,
    key_tail=st.sampled_from(["x", "2026-03-28T14:05:40.902Z:hook", "nope:hook"]),
)
def test_time_reader_and_record_iso_agree_with_record_time(
    namespace: namespaces.Namespace, value: str, key_tail: str
) -> None:
    from triggerfish_cli.serialization import canonical_iso

    key = namespace.prefix + key_tail
    expected = record_time(namespace, key, value)
    iso = namespaces.record_iso(namespace, key, value)
    assert iso == (None if expected is None else canonical_iso(expected.isoformat()))
    for loads in (None, json.loads):
        assert namespaces.time_reader(namespace, loads)(key, value) == iso


def _first_column(readme: str, heading: str) -> set[str]:
    """The backticked names in the first column of the table under ``heading``."""
    section = readme.split(heading, 1)[1]
    names: set[str] = set()
    started = False
    for line in section.splitlines():
        if line.startswith("|"):
            started = True
            first = line.split("|")[1]
            names.update(part.strip("`") for part in first.split(", ") if part.strip())
        elif started:
            break
    return {name.strip().strip("`") for name in names}


def test_the_readme_lists_every_namespace_in_both_tables() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    prefixes = set(namespaces.PREFIXES)
    table = _first_column(readme, "#### Namespaces\n") - {"namespace", "---"}
    policies = _first_column(readme, "#### Policies\n") - {"namespace", "---"}
    assert table == prefixes
    assert policies == prefixes


def test_a_pending_code_has_a_deadline_ahead() -> None:
    pairing = namespaces.get("pairing:")
    assert pairing is not None and pairing.deadline == "expiresAt"
    now = utc(2026, 3, 28, 14, 10)
    code = '{"code":"1","channelType":"x","expiresAt":"2026-03-28T14:15:00.000Z","used":false}'
    assert namespaces.pending(pairing, code, now)
    assert not namespaces.pending(pairing, code, utc(2026, 3, 28, 14, 15))  # at the deadline
    linked = '{"channelType":"x","platformUserId":"1","linkedAt":"2026-03-28T14:15:00.000Z"}'
    assert not namespaces.pending(pairing, linked, now)
    assert not namespaces.pending(pairing, "bare", now)
    sessions = namespaces.get("sessions:")
    assert sessions is not None and not namespaces.pending(
        sessions, '{"createdAt":"2099-01-01T00:00:00.000Z"}', now
    )  # only a deadline field counts
