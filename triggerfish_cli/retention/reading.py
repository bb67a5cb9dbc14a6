"""Reading a store for its retention plan: one pass over what the policies need.

:func:`read_plan` is what ``retention plan`` and ``retention sweep`` start
with. The records are read in one read transaction where the backend has
one; a big store's ``conv:`` messages are read and planned by a second
process meanwhile (:mod:`~triggerfish_cli.retention.plan_worker`).
"""

from __future__ import annotations

import gc
from collections.abc import Collection, Iterable
from datetime import datetime

from triggerfish_cli.retention import plan_worker
from triggerfish_cli.retention.plan import CRON_HISTORY_LIVE, Plan, defer, needed
from triggerfish_cli.retention.policies import Policies
from triggerfish_cli.retention.rules import Planner
from triggerfish_cli.serialization import fast_loads
from triggerfish_cli.storage.provider import StorageProvider


def read_plan(
    provider: StorageProvider,
    policies: Policies,
    now: datetime,
    *,
    only: Collection[str] | None = None,
    keep: bool = False,
) -> Plan:
    """Read what the plan needs (one snapshot where the backend has one) and plan.

    Without a snapshot (the generic fallback) namespaces are read followers
    first, so a key written meanwhile finds the record it follows; either
    way the guards are checked again when the sweep applies the plan (as they
    are for the messages a worker process reads beside the rest:
    plan_worker.py). While the gateway has the store open, ``cron-history:``
    trims are deferred (:data:`~triggerfish_cli.retention.plan.CRON_HISTORY_LIVE`).

    ``keep``: for a process that ends with the job (the CLI): everything alive
    once the plan is made is moved out of the cyclic collector's sight
    (``gc.freeze``), so that no later collection walks the plan's objects
    again (on the 1M-key bench store: 0.44 s of collections right after the
    plan, more during the sweep and at exit). The price, a cycle of garbage
    alive at that moment is never collected, is nothing to a process about to
    end, and not for a long-lived one to pay.
    """
    plan = _read_plan(provider, policies, now, only, keep)
    if provider.live_writers():
        defer(plan, "cron-history:", CRON_HISTORY_LIVE)
    return plan


def _read_plan(
    provider: StorageProvider,
    policies: Policies,
    now: datetime,
    only: Collection[str] | None,
    keep: bool,
) -> Plan:
    prefixes = needed(policies, only)
    worker = plan_worker.start(provider, policies, now, only, prefixes)
    # The plan makes no reference cycles; the cyclic collector would only walk
    # its growing sets again and again (a fifth of the time on a million keys).
    collecting = gc.isenabled()
    gc.disable()
    try:
        planner = Planner(policies, now, only, prefixes, fast_loads())
        if worker is None:
            _feed(planner, provider.scan_many(prefixes, batch_size=5000))
        else:
            rest = [prefix for prefix in prefixes if prefix not in worker.theirs]
            _feed(planner, provider.scan_many([*rest, *worker.ours], batch_size=5000))
            state = worker.result()
            if state is not None:
                plan_worker.merge(planner, state)
            else:  # the worker failed: read its records here (the same plan, later)
                theirs = provider.scan_many(worker.theirs, batch_size=5000, excluding=worker.ours)
                _feed(planner, theirs)
        return planner.finish()
    finally:
        if worker is not None:
            worker.close()
        if keep:
            gc.freeze()
        if collecting:
            gc.enable()


def _feed(planner: Planner, records: Iterable[tuple[str, str]]) -> None:
    try:
        planner.feed(records)
    finally:
        close = getattr(records, "close", None)
        if close is not None:  # end the snapshot even when planning failed
            close()
