"""The hot loop of the retention plan: every record of a full scan, once.

A million-key store is planned in one pass over its records, so this loop
is kept lean: messages (``conv:``, three quarters of a real store) are
read inline, with what they need in locals (their entry in the dispatch
table of :class:`~triggerfish_cli.retention.rules.Planner` gives only their
namespace), instead of a method call per message; every other record goes
to its namespace's handler.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from triggerfish_cli import namespaces
from triggerfish_cli.retention.plan import Action

if TYPE_CHECKING:
    from triggerfish_cli.retention.rules import Planner


def feed(planner: Planner, records: Iterable[tuple[str, str]]) -> None:
    """Take ``records`` into ``planner`` (:meth:`Planner.feed`)."""
    dispatch = planner.dispatch.get
    counts: Counter[str] = Counter()
    conv_ns, _, conv_acts = planner.dispatch["conv:"]
    read_conv = planner.readers["conv:"]
    conv_last, conv_newest, conv_left = planner.conv_last, planner.conv_newest, planner.conv_left
    last_of, newest_of = conv_last.get, conv_newest.get
    cutoff = planner.cutoffs["conv:"] if conv_acts else None
    conv_actions = planner.plans["conv:"].actions if conv_acts else []
    older = planner.older_than["conv:"]
    messages = 0
    for key, value in records:
        if key.startswith("conv:"):  # conv:<session>:<seq>
            messages += 1
            cut = key.rfind(":")
            sid = key[5:cut] if cut > 4 else ""
            last = last_of(sid)
            if last is None or key > last:
                conv_last[sid] = key
            moment = read_conv(key, value)
            if moment is None:
                planner.message_without_time(conv_ns, sid, key, value, conv_acts)
                continue
            newest = newest_of(sid)
            if newest is None or moment > newest:
                conv_newest[sid] = moment
            if cutoff is not None and moment < cutoff:
                conv_actions.append(Action(key, "conv:", value, time=moment, reason=older))
            else:
                conv_left.add(sid)
            continue
        colon = key.find(":")
        entry = dispatch(key[: colon + 1]) if colon >= 0 else None
        if entry is None:
            found = namespaces.for_key(key)
            if found is None:
                planner.unknown_ns[namespaces.group_of(key)] += 1
                continue
            entry = planner.dispatch[found.prefix]
        ns, handler, acts = entry
        counts[ns.prefix] += 1
        handler(planner, ns, key, value, acts)
    if messages:
        counts["conv:"] += messages
    for prefix, count in counts.items():
        if prefix in planner.plans:
            planner.plans[prefix].records += count
