"""The retention plan: a pure function of the records, the policies and ``now``.

:func:`~triggerfish_cli.retention.rules.make_plan` reads ``(key, value)``
pairs in any order and returns what a sweep would do: which records to delete
(with the exact value seen, so the sweep deletes them only if unchanged),
which ``cron-history:`` arrays to trim (with the new value), and which
records have an age nobody can read. It writes nothing and reads no clock:
the same records, policies and ``now`` give the same plan, key for key.

Rules beyond "older than the policy":

- unknown namespaces and held namespaces are never touched; a record whose
  age cannot be read (no time field, malformed JSON, a bare string where JSON
  was expected) is never deleted: it is counted and listed as "age unknown";
- ``sessions:``: a session goes when it has been idle for the policy: its
  ``createdAt``, its newest taint change and its newest ``conv:`` message are
  all older. The main session (``main-session-id``) and a channel's current
  session (named by a ``session-id:<channel>`` key) never go;
- ``taint:<id>`` goes when ``sessions:<id>`` goes or is absent;
  ``conv-session:<id>`` when no ``conv:<id>:`` message is left; each
  ``lineage-session:``, ``lineage-hash:`` and ``lineage-fwd:`` key names a
  lineage record by its value and goes when that record goes or is absent
  (so a ``lineage-hash:`` key that points at a newer record stays);
- ``cron-history:`` runs older than the policy are trimmed inside the array
  (the key goes when no run is left); ``cron:`` jobs go only when disabled
  (which the gateway never writes: it deletes removed jobs);
- ``notifications:`` go a policy after ``deliveredAt`` (the gateway deletes
  on delivery, so what it stores is undelivered and stays);
- ``pairing:`` codes go a policy past ``expiresAt``; linked accounts never;
- ``memory:`` only soft-deleted (``expired: true``) records, by ``updatedAt``
  (the deletion time); live memories never;
- ``todos:`` only a scheduler run's list (``todos:scheduler-<channel>-<ms>``),
  idle for the policy: the run's start (the key's milliseconds) and every
  item's ``created_at`` and ``updated_at`` older; other agents' lists never;
- ``workflow-versions:`` only resolved versions, by ``version.resolvedAt``;
  open proposals never.

Scheduler runs (cron, trigger, webhook) each get a fresh session id with no
``sessions:`` record. Their ``conv:`` messages go by their own ``timestamp``,
their ``conv-session:`` counter with the last of them, their
``lineage-session:`` keys with the lineage records they name, their todo
list by its own times: none of it is ever treated as the orphan of a
missing session.

Follower keys carry a :class:`Guard`: the sweep re-checks it just before
deleting, so a session that got a new message during the sweep, or a
lineage record that came back, keeps what belongs to it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from triggerfish_cli import namespaces
from triggerfish_cli.classification import Level
from triggerfish_cli.memory.keys import PREFIX as MEMORY_PREFIX
from triggerfish_cli.memory.keys import may_name
from triggerfish_cli.retention.policies import Policies, Policy
from triggerfish_cli.storage.provider import value_size

#: Namespaces that only index another (``Namespace.follows``), in registry order.
#: A sweep reads them before what they follow (a key written meanwhile then
#: finds its record), and deletes them after it (their guards see it gone).
FOLLOWERS = tuple(ns.prefix for ns in namespaces.NAMESPACES if ns.follows)

#: Relational inputs: a namespace's plan needs these namespaces read in full:
#: a follower what it follows; a session whether it is in use or still talking.
NEEDS: dict[str, tuple[str, ...]] = {
    "sessions:": ("main-session-id", "session-id:", "conv:"),
    **{ns.prefix: (ns.follows,) for ns in namespaces.NAMESPACES if ns.follows},
}


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

    @cached_property
    def bytes(self) -> int:
        """Value bytes this action frees (measured once: a plan adds them up several times)."""
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
    #: Actions left for later, and why (:func:`defer`).
    deferred: int = 0
    note: str | None = None
    #: ``memory:`` only: its records by the lowest taint that may name them
    #: (``memory.keys.naming_level``), for :func:`seen_at`.
    levels: Counter[Level] = field(default_factory=Counter)

    #: (the list counted, its length, its deletes): see :meth:`_deletes`; and the same
    #: for its bytes (:meth:`_bytes`), counted apart: a sweep asks for the counts only.
    _tally: tuple[list[Action], int, int] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _freed: tuple[list[Action], int, int] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def _kept(self, tally: tuple[list[Action], int, int] | None) -> int | None:
        """A tally of :attr:`actions`, while the list is the same one at the same length
        (planning only appends, sorts, or replaces it); None: count again."""
        if tally is not None and tally[0] is self.actions and tally[1] == len(self.actions):
            return tally[2]
        return None

    def _deletes(self) -> int:
        deletes = self._kept(self._tally)
        if deletes is None:
            deletes = sum(1 for action in self.actions if action.replacement is None)
            self._tally = (self.actions, len(self.actions), deletes)
        return deletes

    def _bytes(self) -> int:
        freed = self._kept(self._freed)
        if freed is None:  # measures every value: 0.3 s for the 1M-key store's plan
            freed = sum(action.bytes for action in self.actions)
            self._freed = (self.actions, len(self.actions), freed)
        return freed

    @property
    def deletes(self) -> int:
        return self._deletes()

    @property
    def trims(self) -> int:
        return len(self.actions) - self._deletes()

    @property
    def bytes(self) -> int:
        return self._bytes()

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
            "deferred": self.deferred,
            "rule": self.note or self.policy.rule,
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


def hides(plan: Plan, taint: Level | None) -> bool:
    """Whether ``taint`` hides part of ``plan``: memory rows above it (RESTRICTED sees all).

    A function of the policies and the taint, never of the records, so that what
    a command says about the hiding tells nothing of what is hidden.
    """
    return taint is not None and taint < Level.RESTRICTED and MEMORY_PREFIX in plan.namespaces


def seen_at(plan: Plan, taint: Level | None) -> Plan:
    """``plan`` as a reader at ``taint`` may see it: memory rows above the taint are
    neither named, counted nor sized (a sweep still applies the whole plan: retention
    is not a read). ``taint`` None: the whole plan."""
    if taint is None or not hides(plan, taint):
        return plan
    whole = plan.namespaces[MEMORY_PREFIX]
    seen = NamespacePlan(
        whole.policy,
        records=sum(count for level, count in whole.levels.items() if level <= taint),
        actions=[action for action in whole.actions if may_name(action.key, taint)],
        unknown=[unknown for unknown in whole.unknown if may_name(unknown.key, taint)],
        deferred=whole.deferred,
        note=whole.note,
    )
    return Plan(plan.now, {**plan.namespaces, MEMORY_PREFIX: seen}, plan.unknown_namespaces)


#: Why a sweep leaves ``cron-history:`` alone while the gateway runs (UPSTREAM.md).
CRON_HISTORY_LIVE = (
    "deferred while the gateway runs: its daemon keeps each job's history in memory and "
    "rewrites the whole array after each run, so a trim would come back"
)


def defer(plan: Plan, prefix: str, note: str) -> int:
    """Take ``prefix``'s actions out of ``plan`` (they are counted as deferred)."""
    ns_plan = plan.namespaces.get(prefix)
    if ns_plan is None or not ns_plan.actions:
        return 0
    ns_plan.deferred, ns_plan.actions, ns_plan.note = len(ns_plan.actions), [], note
    return ns_plan.deferred


def apply_order(prefixes: Iterable[str]) -> list[str]:
    """Registry order, followers last."""
    wanted = set(prefixes)
    order = [p for p in namespaces.PREFIXES if p in wanted and p not in FOLLOWERS]
    return order + [p for p in FOLLOWERS if p in wanted]


def scan_order(prefixes: Iterable[str]) -> list[str]:
    """Followers first, then the sessions in use (``main-session-id``, ``session-id:``),
    sessions, conv, lineage, the rest."""
    wanted = set(prefixes)
    first = [*FOLLOWERS, "main-session-id", "session-id:", "sessions:", "conv:", "lineage:"]
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
