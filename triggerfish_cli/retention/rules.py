"""The rules of the retention plan: one pass over the records, then the relational rules.

:func:`make_plan` and its engine :class:`Planner` (see
:mod:`triggerfish_cli.retention.plan` for what the plan is and the rules it
applies). It reads each record once, keeps only
what the relational rules need (which sessions, messages and lineage records
exist, the newest message of each session, the candidates), and decides the
followers, the sessions and the ``config:`` versions at the end. Times are
compared as canonical ISO strings (string order is time order), never as
datetimes, because a real store is read a million records at a time.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from typing import Any

from triggerfish_cli import namespaces
from triggerfish_cli.memory.keys import naming_level
from triggerfish_cli.namespaces import Namespace
from triggerfish_cli.retention.feed import feed
from triggerfish_cli.retention.plan import (
    Action,
    Guard,
    NamespacePlan,
    Plan,
    Unknown,
    acting,
    apply_order,
)
from triggerfish_cli.retention.policies import KEEP, Policies
from triggerfish_cli.serialization import canonical_iso, dumps, fast_loads

_CONFIG_KEY = re.compile(r"config:v(\d+)")
_LINEAGE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _loads_default() -> Callable[[str], Any]:
    return fast_loads()


class Planner:
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
            ns.prefix: (ns, _HANDLERS.get(ns.prefix, Planner._plain), ns.prefix in self.acting)
            for ns in namespaces.NAMESPACES
        }
        self.unknown_ns: Counter[str] = Counter()
        self.in_use: set[str] = set()
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
        """Take in records (the hot loop: :func:`~triggerfish_cli.retention.feed.feed`)."""
        feed(self, records)

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
            self.in_use.add(document["id"])
        elif document is None and value.strip():
            self.in_use.add(value.strip())  # older installs: a bare UUID

    def _session_id(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        document = self._parse(value)
        if isinstance(document, dict) and isinstance(document.get("id"), str):
            self.in_use.add(document["id"])  # a channel's current session stays too

    def _sessions(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        sid = key[len(ns.prefix) :]
        self.sessions_seen.add(sid)
        if acts:
            moment = self.readers[ns.prefix](key, value)
            if moment is None:
                self._unknown(ns, key, value, "createdAt")
            elif self._older(ns.prefix, moment):  # else: young, whatever its history says
                self.session_candidates.append((key, value, moment))

    def message_without_time(
        self, ns: Namespace, sid: str, key: str, value: str, acts: bool
    ) -> None:
        """A message with no readable time: its session stays, whatever its age."""
        self.conv_unknown.add(sid)
        self.conv_left.add(sid)
        if acts:
            self._unknown(ns, key, value, "timestamp")

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

    def _todos(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if not acts or not key.startswith("todos:scheduler-"):
            return  # the owner's and other agents' lists: never
        started = self.readers[ns.prefix](key, value)
        if started is None:
            self.plans[ns.prefix].unknown.append(
                Unknown(key, ns.prefix, "no run time (-<ms>) at the end of the key")
            )
            return
        document = self._parse(value)
        items = document.get("todos") if isinstance(document, dict) else None
        if not isinstance(items, list):
            self._unknown(ns, key, value, "todos list")
            return
        times = [started]
        for item in items:
            for field_name in ("created_at", "updated_at"):
                raw = item.get(field_name) if isinstance(item, dict) else None
                moment = canonical_iso(raw)
                if moment is None and raw is not None:
                    self.plans[ns.prefix].unknown.append(
                        Unknown(key, ns.prefix, f"an item's {field_name} is not a time")
                    )
                    return
                if moment is not None:
                    times.append(moment)
        activity = max(times)
        if self._older(ns.prefix, activity):
            spec = self.specs[ns.prefix]
            self._delete(ns, key, value, activity, f"scheduler run idle for more than {spec}")

    def _workflow_versions(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if not acts:
            return
        document = self._parse(value)
        version = document.get("version") if isinstance(document, dict) else None
        if not isinstance(version, dict):
            self._unknown(ns, key, value, "version")
            return
        if "resolvedAt" not in version:
            return  # an open proposal: never
        resolved = canonical_iso(version.get("resolvedAt"))
        if resolved is None:
            self._unknown(ns, key, value, "version.resolvedAt")
        elif self._older(ns.prefix, resolved):
            spec = self.specs[ns.prefix]
            self._delete(ns, key, value, resolved, f"resolved more than {spec} ago")

    def _memory(self, ns: Namespace, key: str, value: str, acts: bool) -> None:
        if not acts:
            return
        self.plans[ns.prefix].levels[naming_level(key)] += 1
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

    def finish_followers(self, prefixes: Collection[str]) -> None:
        """Decide the follower keys of ``prefixes`` now (what they follow is all read):
        a worker planning the lineage family whole (plan_worker.py)."""
        kept = []
        for prefix, key, value in self.deferred:
            ns = namespaces.get(prefix)
            if prefix in prefixes and ns is not None and ns.follows:
                self._finish_follower(ns, key, value)
            else:
                kept.append((prefix, key, value))
        self.deferred = kept

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
        if not (self._has("conv:") and self._has("main-session-id") and self._has("session-id:")):
            return  # activity or the sessions in use unknown: no session goes
        ns = namespaces.get("sessions:")
        assert ns is not None
        spec = self.policies["sessions:"].spec
        for key, value, created in self.session_candidates:
            sid = key[len(ns.prefix) :]
            if sid in self.in_use or sid in self.conv_unknown:
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


_Handler = Callable[[Planner, Namespace, str, str, bool], None]

#: Each namespace's handler in :meth:`Planner.feed` (``conv:`` is read inline there).
_HANDLERS: dict[str, _Handler] = {
    "main-session-id": Planner._main_session_id,
    "session-id:": Planner._session_id,
    "sessions:": Planner._sessions,
    "lineage:": Planner._lineage,
    "taint:": Planner._defer,
    "conv-session:": Planner._defer,
    "lineage-session:": Planner._defer,
    "lineage-hash:": Planner._defer,
    "lineage-fwd:": Planner._defer,
    "cron:": Planner._cron,
    "cron-history:": Planner._cron_history,
    "notifications:": Planner._notifications,
    "pairing:": Planner._pairing,
    "memory:": Planner._memory,
    "todos:": Planner._todos,
    "workflow-versions:": Planner._workflow_versions,
}


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
    planner = Planner(policies, now, only, complete, loads)
    planner.feed(records)
    return planner.finish()
