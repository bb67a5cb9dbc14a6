"""Retention policies: defaults, the retention: section of triggerfish.yaml, strict errors."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from triggerfish_cli import namespaces
from triggerfish_cli.errors import InvalidDataError
from triggerfish_cli.retention.policies import (
    defaults,
    format_duration,
    load_policies,
    parse_duration,
    policies_from_settings,
)
from triggerfish_cli.settings import OUR_SECTIONS, check_our_sections, load_settings


def test_defaults_follow_the_spec_and_the_issue() -> None:
    policies = defaults()
    specs = {policy.namespace: policy.spec for policy in policies}
    assert specs == {
        "sessions:": "30d",
        "main-session-id": "forever",
        "session-id:": "forever",
        "taint:": "follows sessions:",
        "memory:": "forever",
        "conv:": "30d",
        "conv-session:": "follows conv:",
        "lineage:": "90d",
        "lineage-session:": "follows lineage:",
        "lineage-hash:": "follows lineage:",
        "lineage-fwd:": "follows lineage:",
        "audit:": "1y",
        "cron:": "30d",
        "cron-history:": "30d",
        "trigger:": "forever",
        "notifications:": "7d",
        "exec:": "30d",
        "skills:": "forever",
        "config:": "keep 10",
        "todos:": "30d",  # scheduler-run lists only (issue #17); other lists never
        "pairing:": "expired",
        "team:": "forever",
        "workflows:": "forever",
        "workflow-runs:": "30d",
        "workflow-versions:": "forever",
        "delegation:": "forever",
        "healthcheck:": "forever",
        "prefs:": "forever",
        "browser:": "forever",
    }
    assert list(specs) == list(namespaces.PREFIXES)  # every namespace, registry order
    assert all(policy.source == "default" and not policy.held for policy in policies)
    assert policies["audit:"].age == timedelta(days=365)
    assert policies["config:"].keep == 10
    assert "skills:" not in policies.active() and "memory:" not in policies.active()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("14d", timedelta(days=14)),
        ("1y", timedelta(days=365)),
        ("2w", timedelta(days=14)),
        ("12h", timedelta(hours=12)),
        (" 30D ", timedelta(days=30)),
        ("1000y", timedelta(days=365000)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0d", "zero"),
        ("-5d", "negative"),
        ("30", "not a duration"),
        ("1.5d", "not a duration"),
        ("30 days", "not a duration"),
        ("3m", "minutes"),  # m is minutes in the one grammar: a policy that short is refused
        ("forever and ever", "not a duration"),
        ("1001y", "longer than 1000y"),
        ("", "not a duration"),
    ],
)
def test_bad_durations(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_duration(text)


def test_format_duration_round_trips() -> None:
    for text in ("30d", "1y", "12h", "400d", "2y"):
        assert format_duration(parse_duration(text)) == text
    assert format_duration(parse_duration("2w")) == "14d"


def test_overrides_keep_forever_and_sources() -> None:
    policies = load_policies(
        {
            "sessions": "14d",
            "audit:": "2y",
            "config": {"keep": 20},
            "cron-history": {"keep": 50},
            "skills": "forever",
            "memory": "90d",
            "pairing": "1h",
            "conv": "forever",
        }
    )
    assert policies["sessions:"].spec == "14d" and policies["sessions:"].source == "config"
    assert policies["audit:"].age == timedelta(days=730)
    assert policies["config:"].keep == 20
    assert policies["cron-history:"].spec == "keep 50"
    assert policies["memory:"].spec == "90d" and policies["memory:"].active
    assert policies["conv:"].kind == "forever" and not policies["conv:"].active
    assert policies["pairing:"].age == timedelta(hours=1)
    assert policies["lineage:"].source == "default"
    assert load_policies({"pairing": "expired"})["pairing:"].age == timedelta(0)


def test_hold_covers_the_namespace_and_what_follows_it() -> None:
    policies = load_policies({"hold": ["lineage", "sessions:"], "lineage": "30d"})
    held = {policy.namespace for policy in policies if policy.held}
    assert held == {
        "lineage:",
        "lineage-session:",
        "lineage-hash:",
        "lineage-fwd:",
        "sessions:",
        "taint:",
    }
    assert policies["lineage:"].spec == "30d"  # the policy stays, the hold wins
    assert not set(policies.active()) & held
    assert "legal hold" in policies["lineage:"].rule
    assert load_policies({"hold": ["taint"]})["sessions:"].held is False


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"sesions": "30d"}, "retention.sesions: unknown namespace 'sesions'"),
        ({"sessions": "0d"}, "retention.sessions: '0d' is zero"),
        ({"sessions": "-3d"}, "retention.sessions: '-3d' is negative"),
        ({"sessions": "thirty days"}, "retention.sessions: 'thirty days' is not a duration"),
        ({"sessions": 30}, "retention.sessions: 30 has no unit (write e.g. 30d)"),
        ({"sessions": None}, "retention.sessions: expected a duration"),
        ({"sessions": True}, "retention.sessions: expected a duration"),
        ({"sessions": {"keep": 5}}, "retention.sessions: keep: N is only for config"),
        ({"config": {"keep": 0}}, "retention.config: keep: must be a positive whole number"),
        ({"config": {"keep": -1}}, "retention.config: keep: must be a positive whole number"),
        ({"config": {"kept": 3}}, "retention.config: a mapping here takes only keep: N"),
        ({"taint": "7d"}, "retention.taint: taint: follows sessions: (set sessions instead)"),
        ({"lineage-hash": "7d"}, "retention.lineage-hash: lineage-hash: follows lineage:"),
        ({"skills": "7d"}, "retention.skills: skills: records carry no usable time"),
        ({"hold": "lineage"}, "retention.hold: must be a list of namespaces"),
        ({"hold": ["lineage", "nope"]}, "retention.hold[1]: unknown namespace 'nope'"),
        ({"sessions": "expired"}, "retention.sessions: 'expired' is not a duration"),
        (["sessions"], "retention: must be a mapping"),
    ],
)
def test_invalid_policies_are_errors_naming_the_path(section: object, message: str) -> None:
    with pytest.raises(InvalidDataError) as info:
        load_policies(section, "/etc/tf/triggerfish.yaml")
    assert info.value.exit_code == 8
    assert str(info.value).startswith("/etc/tf/triggerfish.yaml: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_section_is_registered_for_config_validate(tmp_path: Path) -> None:
    assert OUR_SECTIONS["retention"] == "triggerfish_cli.retention.policies:check_section"
    path = tmp_path / "triggerfish.yaml"
    path.write_text("models: {primary: x}\nretention:\n  sessions: 14d\n  hold: [audit]\n")
    check_our_sections(load_settings(path, explicit=True))
    path.write_text("retention:\n  sessions: 0d\n")
    with pytest.raises(InvalidDataError, match=r"retention\.sessions: '0d' is zero"):
        check_our_sections(load_settings(path, explicit=True))


def test_policies_from_settings(tmp_path: Path) -> None:
    path = tmp_path / "triggerfish.yaml"
    assert policies_from_settings(load_settings(path, explicit=False)) == defaults()
    path.write_text("models: {primary: x}\n")
    assert policies_from_settings(load_settings(path, explicit=True)) == defaults()
    path.write_text("retention:\n  sessions: 14d\n  config:\n    keep: 3\n")
    policies = policies_from_settings(load_settings(path, explicit=True))
    assert policies["sessions:"].spec == "14d" and policies["config:"].keep == 3


def test_cutoff() -> None:
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    policies = defaults()
    assert policies["sessions:"].cutoff(now) == now - timedelta(days=30)
    assert policies["config:"].cutoff(now) is None
    assert policies["skills:"].cutoff(now) is None
    assert policies["pairing:"].cutoff(now) == now
