"""Retention policies: what each namespace keeps, from the defaults and ``triggerfish.yaml``.

Every known namespace has one policy:

- ``age``: records older than a duration go (``30d``, ``1y``, ``12h``, ``2w``);
- ``keep``: only the N newest stay (``config`` versions, ``cron-history`` runs);
- ``forever``: nothing goes;
- ``follows``: index keys and counters that go with the record they belong to
  (``taint:`` with its session, ``conv-session:`` with the session's last
  message, ``lineage-*:`` with their lineage record). Not configurable but to
  ``forever``.

A ``hold:`` list puts namespaces under legal hold: no sweep touches them, nor
the keys that follow them. Keys of unknown namespaces are never touched.

``retention:`` in ``triggerfish.yaml``::

    retention:
      sessions: 14d          # a duration: h, d, w, y (365 days)
      audit: 2y
      config: {keep: 20}     # or, on two lines, "config:" then "  keep: 20"
      memory: 90d            # hard-delete soft-deleted memories 90 days after deletion
      skills: forever
      hold: [lineage]        # legal hold

Anything invalid (unknown namespace, ``0d``, negative, unparseable, a kind a
namespace does not take) is an :class:`InvalidDataError` (exit 8) naming the
path in the YAML, never silently a default. The plan itself is in
:mod:`triggerfish_cli.retention.plan`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from triggerfish_cli import namespaces, timespec
from triggerfish_cli.errors import InvalidDataError

_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
MAX_DURATION = timedelta(days=1000 * 365)

AGE, KEEP, FOREVER, FOLLOWS = "age", "keep", "forever", "follows"
#: pairing: codes go as soon as they are past their expiresAt (an age of zero).
EXPIRED = "expired"


def parse_duration(text: str) -> timedelta:
    """``14d`` -> 14 days, in the one grammar of ``timespec`` (s m h d w y, ``1d12h``).

    ValueError otherwise, and for a negative, zero or over-long duration.
    """
    cleaned = text.strip()
    if cleaned.startswith("-"):
        raise ValueError(f"{text!r} is negative")
    try:
        age = timespec.parse_duration(cleaned)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a duration (write e.g. 12h, 30d, 2w, 1y, or forever)"
        ) from None
    seconds = int(age.total_seconds())
    if seconds == 0:
        raise ValueError(f"{text!r} is zero (to keep nothing, there is no setting; use 1h)")
    if seconds < 3600:
        raise ValueError(
            f"{text!r} is under an hour (m is minutes, s seconds; for months write e.g. 90d): "
            "a policy is at least 1h"
        )
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"{text!r} is longer than 1000y (write forever)")
    return timedelta(seconds=seconds)


def format_duration(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    for unit in ("y", "d", "h"):
        if seconds % _UNITS[unit] == 0 and seconds >= _UNITS[unit]:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True)
class Rule:
    """How one namespace is swept: its default, what it accepts, what goes."""

    prefix: str
    default: str
    #: Kinds an operator may configure here.
    accepts: frozenset[str]
    #: What goes under an age/keep policy; ``{policy}`` is filled in.
    goes: str
    #: Where the default comes from.
    basis: str


_AGE_OR_FOREVER = frozenset({AGE, FOREVER})
_ALL = frozenset({AGE, KEEP, FOREVER})
_FOREVER = frozenset({FOREVER})

RULES: dict[str, Rule] = {
    rule.prefix: rule
    for rule in (
        Rule(
            "sessions:",
            "30d",
            _AGE_OR_FOREVER,
            "sessions idle for {policy} (created, last taint change and last message all "
            "older); never the main session, nor a channel's current session (session-id:)",
            "SPEC.md",
        ),
        Rule("main-session-id", "forever", _FOREVER, "", "tool: names the main session"),
        Rule("session-id:", "forever", _FOREVER, "", "tool: names a channel's current session"),
        Rule("taint:", "follows sessions:", _FOREVER, "", "SPEC.md"),
        Rule(
            "memory:",
            "forever",
            _AGE_OR_FOREVER,
            "soft-deleted memories ({{expired: true}}) deleted more than {policy} ago; "
            "live memories never",
            "issue #4: soft-deleted memories are kept for audit",
        ),
        Rule("conv:", "30d", _AGE_OR_FOREVER, "messages older than {policy}", "issue #4"),
        Rule("conv-session:", "follows conv:", _FOREVER, "", "issue #4"),
        Rule(
            "lineage:",
            "90d",
            _AGE_OR_FOREVER,
            "records accessed more than {policy} ago",
            "SPEC.md (compliance)",
        ),
        Rule("lineage-session:", "follows lineage:", _FOREVER, "", "issue #4"),
        Rule("lineage-hash:", "follows lineage:", _FOREVER, "", "issue #4"),
        Rule("lineage-fwd:", "follows lineage:", _FOREVER, "", "issue #4"),
        Rule("audit:", "1y", _AGE_OR_FOREVER, "entries older than {policy}", "SPEC.md (legal)"),
        Rule(
            "cron:",
            "30d",
            _AGE_OR_FOREVER,
            "disabled jobs created more than {policy} ago; enabled jobs never (the gateway "
            "deletes a removed job and never writes enabled: false, so on its stores "
            "this deletes nothing)",
            "SPEC.md",
        ),
        Rule(
            "cron-history:",
            "30d",
            _ALL,
            "runs older than {policy} trimmed from each job's history",
            "issue #4",
        ),
        Rule(
            "trigger:",
            "forever",
            _AGE_OR_FOREVER,
            "firings older than {policy}",
            "tool: one key per trigger source",
        ),
        Rule(
            "notifications:",
            "7d",
            _AGE_OR_FOREVER,
            "notifications delivered more than {policy} ago; undelivered ones stay",
            "SPEC.md",
        ),
        Rule("exec:", "30d", _AGE_OR_FOREVER, "runs older than {policy}", "SPEC.md"),
        Rule("skills:", "forever", _FOREVER, "", "SPEC.md (permanent)"),
        Rule(
            "config:",
            "keep 10",
            _ALL,
            "config:v<N> snapshots beyond the {policy} newest",
            "SPEC.md (10 versions)",
        ),
        Rule(
            "todos:",
            "30d",
            _AGE_OR_FOREVER,
            "scheduler-run lists (todos:scheduler-<channel>-<ms>) idle for {policy} (the "
            "run's start and every item's created_at and updated_at older); other agents' "
            "lists never",
            "issue #17: one list per cron, trigger or webhook run, like its conv: messages",
        ),
        Rule(
            "pairing:",
            EXPIRED,
            _AGE_OR_FOREVER | {EXPIRED},
            "pairing codes more than {policy} past their expiresAt; linked accounts never",
            "issue #4 (codes past expiresAt)",
        ),
        Rule(
            "team:",
            "forever",
            _AGE_OR_FOREVER,
            "teams created more than {policy} ago",
            "tool: live agent teams",
        ),
        Rule(
            "workflows:",
            "forever",
            _AGE_OR_FOREVER,
            "definitions saved more than {policy} ago",
            "tool: definitions, not history",
        ),
        Rule(
            "workflow-runs:",
            "30d",
            _AGE_OR_FOREVER,
            "runs completed more than {policy} ago",
            "issue #4",
        ),
        Rule(
            "workflow-versions:",
            "forever",
            _AGE_OR_FOREVER,
            "versions resolved (approved, rejected, superseded) more than {policy} ago "
            "(version.resolvedAt); open proposals never",
            "tool: the history behind workflows:",
        ),
        Rule("delegation:", "forever", _FOREVER, "", "tool: not written by the gateway yet"),
        Rule("healthcheck:", "forever", _FOREVER, "", "tool: the gateway deletes it at once"),
        Rule("prefs:", "forever", _FOREVER, "", "tool: no time"),
        Rule("browser:", "forever", _FOREVER, "", "tool: no time"),
    )
}
assert set(RULES) == set(namespaces.PREFIXES), "every namespace needs a retention rule"


@dataclass(frozen=True)
class Policy:
    """The effective policy of one namespace."""

    namespace: str
    kind: str
    age: timedelta | None = None
    keep: int | None = None
    follows: str | None = None
    held: bool = False
    #: "default" or "config".
    source: str = "default"

    @property
    def spec(self) -> str:
        """As an operator writes it: ``30d``, ``keep 10``, ``forever``, ``follows sessions:``."""
        if self.kind == AGE and self.age is not None:
            return format_duration(self.age) if self.age else EXPIRED
        if self.kind == KEEP:
            return f"keep {self.keep}"
        if self.kind == FOLLOWS:
            return f"follows {self.follows}"
        return FOREVER

    @property
    def active(self) -> bool:
        """True when a sweep may delete something here."""
        return not self.held and self.kind != FOREVER

    def cutoff(self, now: datetime) -> datetime | None:
        """Records with a time strictly before this are older than the policy."""
        if self.kind != AGE or self.age is None:
            return None
        return now - self.age

    @property
    def rule(self) -> str:
        if self.held:
            return "legal hold: nothing is touched"
        if self.kind == FOREVER:
            if self.namespace == "memory:":
                return "soft-deleted memories kept for audit; live memories never deleted"
            return "kept forever"
        if self.kind == FOLLOWS:
            return {
                "taint:": "goes when its sessions:<id> goes or is absent",
                "conv-session:": "goes when no conv: message of its session is left",
            }.get(
                self.namespace,
                "goes when the lineage record it names goes or is absent",
            )
        if self.spec == EXPIRED:
            return "pairing codes past their expiresAt; linked accounts never"
        text = RULES[self.namespace].goes
        return text.format(policy=self.spec.removeprefix("keep "))

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "policy": self.spec,
            "kind": self.kind,
            "seconds": int(self.age.total_seconds()) if self.age is not None else None,
            "keep": self.keep,
            "follows": self.follows,
            "held": self.held,
            "source": self.source,
            "basis": RULES[self.namespace].basis,
            "rule": self.rule,
        }


def _parse_spec(prefix: str, raw: Any, where: str, source: str) -> Policy:
    """One policy value (``30d``, ``forever``, ``keep 10``, ``{keep: 10}``, ``follows x:``)."""
    rule = RULES[prefix]
    if isinstance(raw, Mapping):
        unknown = sorted(str(key) for key in raw if key != "keep")
        if unknown or "keep" not in raw:
            raise ValueError(f"a mapping here takes only keep: N (found {unknown or 'none'})")
        count = raw["keep"]
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise ValueError(f"keep: must be a positive whole number, not {count!r}")
        policy = Policy(prefix, KEEP, keep=count, source=source)
    elif isinstance(raw, str) and raw.strip().lower() == FOREVER:
        policy = Policy(prefix, FOREVER, source=source)
    elif isinstance(raw, str) and raw.strip().lower() == EXPIRED and EXPIRED in rule.accepts:
        policy = Policy(prefix, AGE, age=timedelta(0), source=source)
    elif isinstance(raw, str) and raw.startswith("keep "):  # defaults only
        policy = Policy(prefix, KEEP, keep=int(raw.split()[1]), source=source)
    elif isinstance(raw, str) and raw.startswith("follows "):  # defaults only
        policy = Policy(prefix, FOLLOWS, follows=raw.split()[1], source=source)
    elif isinstance(raw, str):
        policy = Policy(prefix, AGE, age=parse_duration(raw), source=source)
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raise ValueError(f"{raw!r} has no unit (write e.g. {raw}d)")
    else:
        raise ValueError(f"expected a duration such as 30d, forever or keep: N, not {raw!r}")
    if source == "config" and policy.kind not in rule.accepts:
        if FOLLOWS in rule.default:
            anchor = rule.default.split()[1]
            raise ValueError(
                f"{prefix} follows {anchor} (set {anchor.rstrip(':')} instead); "
                "it only takes forever"
            )
        if rule.accepts == _FOREVER:
            raise ValueError(f"{prefix} records carry no usable time; it only takes forever")
        raise ValueError(f"keep: N is only for config and cron-history, not {prefix}")
    return policy


def _namespace(name: Any, where: str) -> str:
    found = namespaces.get(name) if isinstance(name, str) else None
    if found is None:
        known = ", ".join(ns.name for ns in namespaces.NAMESPACES)
        raise InvalidDataError(f"{where}: unknown namespace {name!r} (known: {known})")
    return found.prefix


@dataclass(frozen=True)
class Policies:
    """The effective policy of every known namespace."""

    by_prefix: Mapping[str, Policy]

    def __getitem__(self, prefix: str) -> Policy:
        return self.by_prefix[prefix]

    def __iter__(self) -> Iterator[Policy]:
        return iter(self.by_prefix.values())

    def active(self) -> list[str]:
        return [policy.namespace for policy in self if policy.active]


def defaults() -> Policies:
    return Policies(
        {prefix: _parse_spec(prefix, rule.default, "", "default") for prefix, rule in RULES.items()}
    )


def load_policies(section: Any, origin: str = "triggerfish.yaml") -> Policies:
    """The defaults overridden by a ``retention:`` section; strict (exit 8 on anything wrong)."""
    base = dict(defaults().by_prefix)
    if section is None:
        return Policies(base)
    if not isinstance(section, Mapping):
        raise InvalidDataError(f"{origin}: retention: must be a mapping of namespace: policy")
    held: set[str] = set()
    for name, raw in section.items():
        if name == "hold":
            held = _holds(raw, origin)
            continue
        where = f"{origin}: retention.{name}"
        prefix = _namespace(name, where)
        try:
            base[prefix] = _parse_spec(prefix, raw, where, "config")
        except ValueError as exc:
            raise InvalidDataError(f"{where}: {exc}") from None
    for prefix in list(held):  # a hold also covers the keys that follow a namespace
        held.update(p for p, policy in base.items() if policy.follows == prefix)
    for prefix in held:
        base[prefix] = replace(base[prefix], held=True)
    return Policies(base)


def _holds(raw: Any, origin: str) -> set[str]:
    if raw is None:
        return set()
    if not isinstance(raw, list):
        raise InvalidDataError(
            f"{origin}: retention.hold: must be a list of namespaces, e.g. [lineage, audit]"
        )
    return {
        _namespace(name, f"{origin}: retention.hold[{index}]") for index, name in enumerate(raw)
    }


def check_section(section: Any, config_path: Path) -> None:
    """Validator of ``retention:`` for ``settings.OUR_SECTIONS``."""
    load_policies(section, str(config_path))


def policies_from_settings(settings: Any) -> Policies:
    """The effective policies for a loaded :class:`~triggerfish_cli.settings.Settings`."""
    text = getattr(settings, "text", None)
    if not text or "retention" not in text:
        return defaults()
    return load_policies(settings.section("retention"), str(settings.path))
