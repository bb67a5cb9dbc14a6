"""The retention plan: a pure function of the records, the policies and ``now``.

:func:`make_plan` reads ``(key, value)`` pairs in any order and returns what a
sweep would do: which records to delete (with the exact value seen, so the
sweep deletes them only if unchanged), which ``cron-history:`` arrays to trim
(with the new value), and which records have an age nobody can read. It
writes nothing and reads no clock: the same records, policies and ``now``
give the same plan, key for key.

Rules beyond "older than the policy":

- unknown namespaces and held namespaces are never touched; a record whose
  age cannot be read (no time field, malformed JSON, a bare string where JSON
  was expected) is never deleted: it is counted and listed as "age unknown";
- ``sessions:``: a session goes when it has been idle for the policy: its
  ``createdAt``, its newest taint change and its newest ``conv:`` message are
  all older. The main session (``main-session-id``) never goes;
- ``taint:<id>`` goes when ``sessions:<id>`` goes or is absent;
  ``conv-session:<id>`` when no ``conv:<id>:`` message is left; each
  ``lineage-session:``, ``lineage-hash:`` and ``lineage-fwd:`` key names a
  lineage record by its value and goes when that record goes or is absent
  (so a ``lineage-hash:`` key that points at a newer record stays);
- ``cron-history:`` runs older than the policy are trimmed inside the array
  (the key goes when no run is left); ``cron:`` jobs go only when disabled;
- ``notifications:`` go a policy after ``deliveredAt`` (the gateway deletes
  on delivery, so what it stores is undelivered and stays);
- ``pairing:`` codes go a policy past ``expiresAt``; linked accounts never;
- ``memory:`` only soft-deleted (``expired: true``) records, by ``updatedAt``
  (the deletion time); live memories never.

Follower keys carry a :class:`Guard`: the sweep re-checks it just before
deleting, so a session that got a new message during the sweep, or a
lineage record that came back, keeps what belongs to it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from triggerfish_cli import namespaces
from triggerfish_cli.namespaces import Namespace
from triggerfish_cli.retention import KEEP, Policies, Policy
from triggerfish_cli.serialization import canonical_iso, dumps
from triggerfish_cli.storage.provider import value_size

#: Relational inputs: a namespace's plan needs these namespaces read in full.
NEEDS: dict[str, tuple[str, ...]] = {
    "sessions:": ("main-session-id", "conv:"),
    "taint:": ("sessions:",),
    "conv-session:": ("conv:",),
    "lineage-session:": ("lineage:",),
    "lineage-hash:": ("lineage:",),
    "lineage-fwd:": ("lineage:",),
}

#: Order in which a sweep applies (and reads) namespaces: followers are
#: read before what they follow (a key written meanwhile then finds its
#: record), and deleted after it (their guards see it gone).
FOLLOWERS = ("taint:", "conv-session:", "lineage-session:", "lineage-hash:", "lineage-fwd:")

_CONFIG_KEY = re.compile(r"config:v(\d+)")
_LINEAGE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Guard:
    """Re-checked just before applying an action; the action is skipped if it fails.

    ``absent``: that key must not exist. ``prefix``: no key under it may be
    greater than ``after`` (``None``: no key under it at all).
    """

    absent: str | None = None
    prefix: str | None = None
    after: str | None = None


@dataclass(frozen=True)
class Action:
    """Delete ``key`` (or replace it by ``replacement``) if it still holds ``expected``."""

    key: str
    namespace: str
    expected: str
    replacement: str | None = None
    #: The record's time as its rule reads it, canonical ISO (None for followers).
    time: str | None = None
    #: Entries removed from an array (trims); 1 for a delete.
    removed: int = 1
    reason: str = ""
    guard: Guard | None = None

    @property
    def is_delete(self) -> bool:
        return self.replacement is None

    @property
    def bytes(self) -> int:
        """Value bytes this action frees."""
        freed = value_size(self.expected)
        return freed if self.replacement is None else freed - value_size(self.replacement)

    def as_row(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "namespace": self.namespace,
            "action": "delete" if self.is_delete else "trim",
            "time": self.time,
            "bytes": self.bytes,
            "entries": self.removed if not self.is_delete else None,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Unknown:
    """A record of unknown age: never deleted, listed for the operator."""

    key: str
    namespace: str
    reason: str

    def as_row(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "namespace": self.namespace,
            "action": "age unknown",
            "time": None,
            "bytes": None,
            "entries": None,
            "reason": self.reason,
        }


@dataclass
class NamespacePlan:
    policy: Policy
    records: int = 0
    actions: list[Action] = field(default_factory=list)
    unknown: list[Unknown] = field(default_factory=list)

    @property
    def deletes(self) -> int:
        return sum(1 for action in self.actions if action.is_delete)

    @property
    def trims(self) -> int:
        return sum(1 for action in self.actions if not action.is_delete)

    @property
    def bytes(self) -> int:
        return sum(action.bytes for action in self.actions)

    @property
    def oldest(self) -> str | None:
        times = [action.time for action in self.actions if action.time is not None]
        return min(times) if times else None

    def as_row(self) -> dict[str, Any]:
        return {
            "namespace": self.policy.namespace,
            "policy": self.policy.spec,
            "source": self.policy.source,
            "held": self.policy.held,
            "records": self.records,
            "delete": self.deletes,
            "trim": self.trims,
            "bytes": self.bytes,
            "oldest": self.oldest,
            "unknown_age": len(self.unknown),
            "rule": self.policy.rule,
        }


@dataclass
class Plan:
    now: datetime
    #: Namespaces the plan acts on or that are held, in apply order.
    namespaces: dict[str, NamespacePlan]
    #: Keys of unknown namespaces seen (never touched), by first segment.
    unknown_namespaces: dict[str, int] = field(default_factory=dict)

    def actions(self) -> Iterator[Action]:
        for plan in self.namespaces.values():
            yield from plan.actions

    @property
    def deletes(self) -> int:
        return sum(plan.deletes for plan in self.namespaces.values())

    @property
    def trims(self) -> int:
        return sum(plan.trims for plan in self.namespaces.values())

    @property
    def unknown_age(self) -> int:
        return sum(len(plan.unknown) for plan in self.namespaces.values())

    @property
    def bytes(self) -> int:
        return sum(plan.bytes for plan in self.namespaces.values())


def apply_order(prefixes: Iterable[str]) -> list[str]:
    """Registry order, followers last."""
    wanted = set(prefixes)
    order = [p for p in namespaces.PREFIXES if p in wanted and p not in FOLLOWERS]
    return order + [p for p in FOLLOWERS if p in wanted]


def scan_order(prefixes: Iterable[str]) -> list[str]:
    """Followers first, then ``main-session-id``, sessions, conv, lineage, the rest."""
    wanted = set(prefixes)
    first = [*FOLLOWERS, "main-session-id", "sessions:", "conv:", "lineage:"]
    order = [p for p in first if p in wanted]
    return order + [p for p in namespaces.PREFIXES if p in wanted and p not in order]


def acting(policies: Policies, only: Collection[str] | None = None) -> list[str]:
    """Namespaces a sweep deletes in (active and, with ``only``, selected)."""
    return [p for p in policies.active() if only is None or p in only]


def needed(policies: Policies, only: Collection[str] | None = None) -> list[str]:
    """Every namespace a plan must read in full: the acting ones and their inputs."""
    wanted: set[str] = set()
    for prefix in acting(policies, only):
        wanted.add(prefix)
        wanted.update(NEEDS.get(prefix, ()))
    return scan_order(wanted)


def make_plan(
    records: Iterable[tuple[str, str]],
    policies: Policies,
    now: datetime,
    *,
    only: Collection[str] | None = None,
    complete: Collection[str] | None = None,
    loads: Callable[[str], Any] | None = None,
) -> Plan:
    """The plan for ``records``, pure and deterministic.

    ``complete``: the namespaces ``records`` holds in full (default: all).
    A rule that needs a namespace not read in full acts on nothing (a
    follower is never deleted for want of reading its record). ``only``:
    act on these namespaces only.
    """
    planner = _Planner(policies, now, only, complete, loads)
    planner.feed(records)
    return planner.finish()


def _loads_default() -> Callable[[str], Any]:
    from triggerfish_cli.serialization import fast_loads

    return fast_loads()


class _Planner:
    def __init__(
        self,
        policies: Policies,
        now: datetime,
        only: Collection[str] | None,
        complete: Collection[str] | None,
        loads: Callable[[str], Any] | None,
    ) -> None:
        self.policies = policies
        self.now = now
        self.acting = set(acting(policies, only))
        self.complete = None if complete is None else set(complete)
        self.loads = loads or _loads_default()
        shown = [p.namespace for p in policies if p.namespace in self.acting or p.held]
        if only is not None:
            shown = [p for p in shown if p in only]
        self.plans = {p: NamespacePlan(policies[p]) for p in apply_order(shown)}
        #: Cutoffs as canonical ISO strings: a time older than the policy is smaller.
        self.cutoffs: dict[str, str | None] = {}
        for policy in policies:
            cutoff = policy.cutoff(now)
            self.cutoffs[policy.namespace] = (
                None if cutoff is None else canonical_iso(cutoff.isoformat())
            )
        self.specs = {policy.namespace: policy.spec for policy in policies}
        self.older_than = {prefix: f"older than {spec}" for prefix, spec in self.specs.items()}
        self.readers = {
            ns.prefix: namespaces.time_reader(ns, self.loads) for ns in namespaces.NAMESPACES
        }
        # prefix -> (namespace, handler, acts?)
        self.dispatch = {
            ns.prefix: (ns, _HANDLERS.get(ns.prefix, _Planner._plain), ns.prefix in self.acting)
            for ns in namespaces.NAMESPACES
        }
        self.unknown_ns: Counter[str] = Counter()
        self.main_ids: set[str] = set()
        self.sessions_seen: set[str] = set()
        self.sessions_gone: set[str] = set()
        self.session_candidates: list[tuple[str, str, str]] = []
        self.conv_newest: dict[str, str] = {}
        self.conv_last: dict[str, str] = {}
        self.conv_left: set[str] = set()
        self.conv_unknown: set[str] = set()
        self.lineage_seen: set[str] = set()
        self.lineage_gone: set[str] = set()
        self.deferred: list[tuple[str, str, str]] = []

    # -- helpers --------------------------------------------------------------

    def _has(self, prefix: str) -> bool:
        return self.complete is None or prefix in self.complete

    def _parse(self, value: str) -> Any:
        if not value or value[0] not in "{[":
            return None
        try:
            return self.loads(value)
        except ValueError:
            return None

    def _unknown(self, ns: Namespace, key: str, value: str, field_name: str) -> None:
        if value and value[0] in "{[" and self._parse(value) is not None:
            reason = f"no readable {field_name}"
        elif value and value[0] in "{[":
            reason = "malformed JSON"
        else:
            reason = "not JSON (a bare string)"
        self.plans[ns.prefix].unknown.append(Unknown(key, ns.prefix, reason))

    def _delete(
        self,
        ns: Namespace,
        key: str,
        value: str,
        moment: str | None,
        reason: str,
        guard: Guard | None = None,
    ) -> None:
        self.plans[ns.prefix].actions.append(
            Action(key, ns.prefix, value, time=moment, reason=reason, guard=guard)
        )

    def _older(self, prefix: str, moment: str) -> bool:
        cutoff = self.cutoffs[prefix]
        return cutoff is not None and moment < cutoff

    def _by_age(self, ns: Namespace, key: str, value: str) -> None:
        """The plain rule: the registry's record time, older than the policy."""
        moment = self.readers[ns.prefix](key, value)
        if moment is None and ns.time_in_key:
            self.plans[ns.prefix].unknown.append(Unknown(key, ns.prefix, "no ISO time in the key"))
        elif moment is None:
            self._unknown(ns, key, value, " or ".join(ns.time_fields) or "time")
        elif self._older(ns.prefix, moment):
            self._delete(ns, key, value, moment, self.older_than[ns.prefix])

    # -- reading records ----------------------------------------------------------

    def feed(self, records: Iterable[tuple[str, str]]) -> None:
        """Take in records (the hot loop of a million-key scan: keep it lean)."""
        dispatch = self.dispatch.get
        counts: Counter[str] = Counter()
        for key, value in records:
            colon = key.find(":")
            entry = dispatch(key[: colon + 1]) if colon >= 0 else None
            if entry is None:
                found = namespaces.for_key(key)
                if found is None:
                    self.unknown_ns[namespaces.group_of(key)] += 1
                    continue
                entry = self.dispatch[found.prefix]
            ns, handler, acts = entry
            counts[ns.prefix] += 1
            handler(self, ns, key, value, acts)
        for prefix, count in counts.items():
            if prefix in self.plans:
                self.plans[prefix].records += count

    def _plain(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if not acts:
            return
        if self.policies[ns.prefix].kind == KEEP:
            self.deferred.append((ns.prefix, key, value))
        else:
            self._by_age(ns, key, value)

    def _main_session_id(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        document = self._parse(value)
        if isinstance(document, dict) and isinstance(document.get("id"), str):
            self.main_ids.add(document["id"])
        elif document is None and value.strip():
            self.main_ids.add(value.strip())  # older installs: a bare UUID

    def _sessions(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        sid = key[len(ns.prefix) :]
        self.sessions_seen.add(sid)
        if acts:
            moment = self.readers[ns.prefix](key, value)
            if moment is None:
                self._unknown(ns, key, value, "createdAt")
            elif self._older(ns.prefix, moment):  # else: young, whatever its history says
                self.session_candidates.append((key, value, moment))

    def _conv(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        # The hot path: three quarters of a real store are messages.
        cut = key.rfind(":")
        sid = key[5:cut] if cut > 4 else ""  # conv:<session>:<seq>
        moment = self.readers["conv:"](key, value)
        last = self.conv_last.get(sid)
        if last is None or key > last:
            self.conv_last[sid] = key
        if moment is None:
            self.conv_unknown.add(sid)
            self.conv_left.add(sid)
            if acts:
                self._unknown(ns, key, value, "timestamp")
            return
        newest = self.conv_newest.get(sid)
        if newest is None or moment > newest:
            self.conv_newest[sid] = moment
        cutoff = self.cutoffs["conv:"]
        if acts and cutoff is not None and moment < cutoff:
            self.plans["conv:"].actions.append(
                Action(key, "conv:", value, time=moment, reason=self.older_than["conv:"])
            )
        else:
            self.conv_left.add(sid)

    def _lineage(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        lid = key[len(ns.prefix) :]
        self.lineage_seen.add(lid)
        if acts:
            before = len(self.plans[ns.prefix].actions)
            self._by_age(ns, key, value)
            if len(self.plans[ns.prefix].actions) > before:
                self.lineage_gone.add(lid)

    def _defer(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if acts:
            self.deferred.append((ns.prefix, key, value))

    def _cron(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if not acts:
            return
        document = self._parse(value)
        if not isinstance(document, dict):
            self._unknown(ns, key, value, "createdAt")
        elif document.get("enabled") is False:
            self._by_age(ns, key, value)

    def _cron_history(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if not acts:
            return
        runs = self._parse(value)
        if not isinstance(runs, list):
            self._unknown(ns, key, value, "executedAt")
            return
        policy = self.policies[ns.prefix]
        field_name = ns.array_field or "executedAt"
        timed = [
            (index, moment)
            for index, run in enumerate(runs)
            if isinstance(run, dict) and (moment := canonical_iso(run.get(field_name))) is not None
        ]
        if len(timed) < len(runs):
            # runs without a readable time stay; the rest are judged on their own
            self.plans[ns.prefix].unknown.append(
                Unknown(key, ns.prefix, f"{len(runs) - len(timed)} run(s) without {field_name}")
            )
        if policy.kind == KEEP:
            newest = sorted(timed, key=lambda item: (item[1], item[0]), reverse=True)
            drop = {index for index, _ in newest[policy.keep or 0 :]}
        else:
            drop = {index for index, moment in timed if self._older(ns.prefix, moment)}
        if not drop:
            return
        oldest = min(moment for index, moment in timed if index in drop)
        left = [run for index, run in enumerate(runs) if index not in drop]
        reason = f"{len(drop)} run(s) beyond {policy.spec}"
        if left:
            self.plans[ns.prefix].actions.append(
                Action(key, ns.prefix, value, dumps(left), oldest, len(drop), reason)
            )
        else:
            self._delete(ns, key, value, oldest, f"every run beyond {policy.spec}")

    def _notifications(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if not acts:
            return
        document = self._parse(value)
        if not isinstance(document, dict):
            self._unknown(ns, key, value, "createdAt")
            return
        delivered = canonical_iso(document.get("deliveredAt"))
        if delivered is None:
            if document.get("delivered") is True or "deliveredAt" in document:
                self._unknown(ns, key, value, "deliveredAt")
            return  # undelivered: stays
        created = self.readers[ns.prefix](key, value)
        if created is None:
            self._unknown(ns, key, value, "createdAt")
        elif self._older(ns.prefix, max(created, delivered)):
            spec = self.specs[ns.prefix]
            self._delete(ns, key, value, delivered, f"delivered more than {spec} ago")

    def _pairing(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if not acts or key.startswith("pairing:linked:"):
            return
        document = self._parse(value)
        expires = canonical_iso(document.get("expiresAt")) if isinstance(document, dict) else None
        if expires is None:
            self._unknown(ns, key, value, "expiresAt")
        elif self._older(ns.prefix, expires):
            spec = self.specs[ns.prefix]
            self._delete(ns, key, value, expires, f"past expiresAt ({spec})")

    def _memory(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if not acts:
            return
        document = self._parse(value)
        if not isinstance(document, dict) or not isinstance(document.get("expired"), bool):
            self._unknown(ns, key, value, "expired flag")
            return
        if document["expired"] is not True:
            return  # a live memory: never
        deleted = canonical_iso(document.get("updatedAt"))
        if deleted is None:
            self._unknown(ns, key, value, "updatedAt")
        elif self._older(ns.prefix, deleted):
            spec = self.specs[ns.prefix]
            self._delete(ns, key, value, deleted, f"soft-deleted more than {spec} ago")

    # -- relational rules ------------------------------------------------------

    def finish(self) -> Plan:
        self._finish_sessions()
        for prefix, key, value in self.deferred:
            ns = namespaces.get(prefix)
            assert ns is not None
            if prefix == "config:":
                continue
            self._finish_follower(ns, key, value)
        self._finish_config([(k, v) for p, k, v in self.deferred if p == "config:"])
        for plan in self.plans.values():
            plan.actions.sort(key=lambda action: action.key)
            plan.unknown.sort(key=lambda unknown: unknown.key)
        return Plan(self.now, self.plans, dict(sorted(self.unknown_ns.items())))

    def _finish_sessions(self) -> None:
        if not (self._has("conv:") and self._has("main-session-id")):
            return  # activity or the main session unknown: no session goes
        ns = namespaces.get("sessions:")
        assert ns is not None
        spec = self.policies["sessions:"].spec
        for key, value, created in self.session_candidates:
            sid = key[len(ns.prefix) :]
            if sid in self.main_ids or sid in self.conv_unknown:
                continue
            activity = max([created, *self._history(value), *self._conv_times(sid)])
            if self._older(ns.prefix, activity):
                guard = Guard(prefix=f"conv:{sid}:", after=self.conv_last.get(sid))
                self._delete(ns, key, value, activity, f"idle for more than {spec}", guard)
                self.sessions_gone.add(sid)

    def _history(self, value: str) -> list[str]:
        document = self._parse(value)
        history = document.get("history") if isinstance(document, dict) else None
        if not isinstance(history, list):
            return []
        times = [canonical_iso(step.get("timestamp")) for step in history if isinstance(step, dict)]
        return [moment for moment in times if moment is not None]

    def _conv_times(self, sid: str) -> list[str]:
        newest = self.conv_newest.get(sid)
        return [] if newest is None else [newest]

    def _finish_follower(self, ns: Namespace, key: str, value: str) -> None:
        rest = key[len(ns.prefix) :]
        if ns.prefix == "taint:":
            if self._has("sessions:") and (
                rest not in self.sessions_seen or rest in self.sessions_gone
            ):
                why = "its session goes" if rest in self.sessions_gone else "no such session"
                self._delete(ns, key, value, None, why, Guard(absent=f"sessions:{rest}"))
        elif ns.prefix == "conv-session:":
            if self._has("conv:") and rest not in self.conv_left:
                why = "its last message goes" if rest in self.conv_newest else "no messages"
                self._delete(ns, key, value, None, why, Guard(prefix=f"conv:{rest}:"))
        else:  # lineage-session:, lineage-hash:, lineage-fwd: name a record by value
            lid = value.strip()
            if not _LINEAGE_ID.fullmatch(lid):
                self.plans[ns.prefix].unknown.append(
                    Unknown(key, ns.prefix, "value names no lineage record")
                )
            elif self._has("lineage:") and (
                lid not in self.lineage_seen or lid in self.lineage_gone
            ):
                why = "its lineage record goes" if lid in self.lineage_gone else "no such record"
                self._delete(ns, key, value, None, why, Guard(absent=f"lineage:{lid}"))

    def _finish_config(self, items: list[tuple[str, str]]) -> None:
        policy = self.policies["config:"]
        ns = namespaces.get("config:")
        assert ns is not None
        versions: list[tuple[int, str, str]] = []
        for key, value in items:
            match = _CONFIG_KEY.fullmatch(key)
            if match is None:
                self.plans[ns.prefix].unknown.append(Unknown(key, ns.prefix, "not config:v<N>"))
            else:
                versions.append((int(match.group(1)), key, value))
        versions.sort(reverse=True)
        for _number, key, value in versions[policy.keep or len(versions) :]:
            moment = self.readers[ns.prefix](key, value)
            self._delete(ns, key, value, moment, f"beyond the {policy.keep} newest versions")


_Handler = Callable[[_Planner, Namespace, str, str, bool], None]

_HANDLERS: dict[str, _Handler] = {
    "main-session-id": _Planner._main_session_id,
    "sessions:": _Planner._sessions,
    "conv:": _Planner._conv,
    "lineage:": _Planner._lineage,
    "taint:": _Planner._defer,
    "conv-session:": _Planner._defer,
    "lineage-session:": _Planner._defer,
    "lineage-hash:": _Planner._defer,
    "lineage-fwd:": _Planner._defer,
    "cron:": _Planner._cron,
    "cron-history:": _Planner._cron_history,
    "notifications:": _Planner._notifications,
    "pairing:": _Planner._pairing,
    "memory:": _Planner._memory,
}
