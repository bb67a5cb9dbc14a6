"""Most of a big store's messages and its lineage family, planned by a second process.

Messages (``conv:``) are most of a real store's records (461,605 of the 1M-key
bench store's 917,713 read), and each is decided on its own: its time against
the policy. What the other rules need of them is a few facts per session (its
last key, its newest time, whether one is left or unreadable). The lineage
records and the keys that follow them (:data:`FAMILY`) are read by no other
rule. So on a machine with a second core, for a store of at least
:data:`MIN_MESSAGES` messages, a worker process reads and plans the family and
the messages of most sessions while this process reads and plans the rest
(:func:`share` sizes the two parts to end together), and hands back the
message facts (:func:`conv_state`) and the family's finished plans, merged
(:func:`merge`) before the relational rules run. The plan is the same, key for
key (tests/retention/test_plan_worker.py); on the bench store the CLI reached
its apply phase after 3.7-4.0 s instead of 5.0-5.5 s.

The two processes read in two read transactions begun moments apart, not one
snapshot: what a backend without snapshots does anyway. A message, session or
follower written in between is caught by the guards the sweep re-checks just
before deleting (a session is kept when a message newer than the plan's last
one exists; a counter when a message is left).

The worker is this interpreter, isolated (``-I``: neither the current directory
nor ``PYTHON*`` variables on its path) and importing this very package; it
opens the store read-only (``StorageProvider.reader_config``), ignores Ctrl-C
(this process ends it), and exits when this process goes away (its stdin, held
open, reaches its end). A worker that cannot start or fails in any way only
costs time: this process then reads the worker's records itself.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from triggerfish_cli import namespaces
from triggerfish_cli.retention.plan import Action, NamespacePlan, Unknown
from triggerfish_cli.retention.policies import Policies
from triggerfish_cli.retention.rules import Planner
from triggerfish_cli.serialization import fast_loads
from triggerfish_cli.storage.provider import StorageProvider
from triggerfish_cli.threads import background

PREFIX = "conv:"
#: The lineage records and the keys that follow them: a family no other rule reads,
#: which the worker plans whole, its followers too.
FAMILY = ("lineage:", *(ns.prefix for ns in namespaces.NAMESPACES if ns.follows == "lineage:"))
#: Fewer messages than this and a worker costs more (its start, about 0.2 s) than it saves.
MIN_MESSAGES = 100_000
_HEX = "0123456789abcdef"


def _command() -> list[str]:
    """This interpreter, isolated, running :func:`main` of this very package (its parent
    directory first on the path): never another copy found through the current
    directory or ``PYTHONPATH``."""
    root = str(Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {root!r}); import {__name__} as w; w.main()"
    return [sys.executable, "-I", "-c", code]


#: How the worker is started (tests replace it).
COMMAND = _command()
_LENGTH = struct.Struct("<Q")
#: How long a worker that answered is given to exit before it is killed (seconds).
EXIT_GRACE = 2.0

#: What the worker hands back of the messages: each session's last message key and
#: newest time, the sessions with a message left and with one of unreadable time, the
#: deletes ``(key, value, time, reason)``, the unknowns ``(key, reason)``, the count.
ConvState = tuple[
    dict[str, str],
    dict[str, str],
    set[str],
    set[str],
    list[tuple[str, str, str | None, str]],
    list[tuple[str, str]],
    int,
]
#: And of the family, each namespace's finished plan: (actions, unknowns, records).
FamilyPlans = dict[str, tuple[list[Action], list[Unknown], int]]
State = tuple[ConvState, FamilyPlans]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


class Worker:
    """A running worker; :meth:`result` waits for its part of the plan."""

    def __init__(
        self, process: subprocess.Popen[bytes], theirs: list[str], ours: tuple[str, ...]
    ) -> None:
        self.process = process
        #: The prefixes the worker reads (the messages, the family the plan needs) ...
        self.theirs = theirs
        #: ... but for the messages this process plans itself (:func:`share`).
        self.ours = ours
        #: Why the worker gave nothing (None: it has not failed).
        self.error: str | None = None
        #: Its answer arrived whole (it is ending by itself).
        self.answered = False

    def result(self) -> State | None:
        """Its state (None: it failed, see :attr:`error`), the worker ended either way."""
        try:
            assert self.process.stdout is not None
            reply = _read_frame(self.process.stdout)
            self.answered = reply is not None
            if reply is None:
                self.error = f"the worker ended without a plan (exit {self.process.wait()})"
                return None
            kind, body = pickle.loads(reply)
            if kind != "state":
                self.error = str(body)
                return None
            if not _is_state(body):  # checked whole before any of it is merged
                self.error = "the worker's answer is not a plan's state"
                return None
            return body  # type: ignore[no-any-return]
        except Exception as exc:  # any answer but a state: plan the messages here
            self.error = f"{type(exc).__name__}: {exc}"
            return None
        finally:
            self.close()

    def close(self) -> None:
        """End the worker and reap it: one that answered exits by itself once its stdin
        closes (it may be between its answer and its exit); any other is killed."""
        process = self.process
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            process.wait(timeout=EXIT_GRACE if self.answered else 0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _is_state(body: object) -> bool:
    kinds = (dict, dict, set, set, list, list, int)
    if type(body) is not tuple or len(body) != 2:
        return False
    conv, family = body
    return (
        type(conv) is tuple
        and len(conv) == len(kinds)
        and all(isinstance(part, kind) for part, kind in zip(conv, kinds, strict=True))
        and type(family) is dict
        and all(type(plans) is tuple and len(plans) == 3 for plans in family.values())
    )


def start(
    provider: StorageProvider,
    policies: Policies,
    now: datetime,
    only: Collection[str] | None,
    prefixes: Sequence[str],
) -> Worker | None:
    """A worker planning most messages and the lineage family, when it is worth one;
    else None."""
    if PREFIX not in prefixes or _cores() < 2:
        return None
    config = provider.reader_config()
    messages = provider.count(PREFIX) if config is not None else 0
    if config is None or messages < MIN_MESSAGES:
        return None
    theirs = [PREFIX, *(prefix for prefix in prefixes if prefix in FAMILY)]
    family = sum(provider.count(prefix) for prefix in theirs[1:])
    others = sum(provider.count(prefix) for prefix in prefixes if prefix not in theirs)
    ours = share(messages, others, family)
    # all it is to do, said: what it reads, what it leaves to us, whose followers it ends
    only_list = None if only is None else sorted(only)
    job = pickle.dumps(
        (config, policies, now, only_list, list(prefixes), theirs, ours),
        protocol=pickle.HIGHEST_PROTOCOL,
    )
    try:
        process = subprocess.Popen(
            COMMAND,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
    except OSError:
        return None
    worker = Worker(process, theirs, ours)
    try:
        assert process.stdin is not None
        process.stdin.write(_LENGTH.pack(len(job)) + job)
        process.stdin.flush()  # and held open: the worker's lifeline
    except OSError:
        worker.close()
        return None
    return worker


def share(messages: int, others: int, family: int = 0) -> tuple[str, ...]:
    """The messages this process plans itself, for it and the worker to end together: the
    sessions whose id begins with one of the last hex digits (UUIDs: 1/16 each). A
    session's messages are then all on one side, and the two states merge by union.

    The worker reads the lineage ``family`` as well, this process the rest of the
    store (``others``). A record costs about the same to read and plan on either side
    (the worker's start and its answer's hand-over weigh about as much as this
    process's merge of it: on the bench store any other weighting was slower,
    interleaved runs in bench/README).
    """
    part = (messages + family - others) / (2 * messages)
    digits = max(0, min(len(_HEX) - 1, round(part * len(_HEX))))
    return tuple(f"{PREFIX}{digit}" for digit in _HEX[len(_HEX) - digits :])


def conv_state(planner: Planner) -> ConvState:
    """The planner's part that reading ``conv:`` made (the worker's answer)."""
    plan = planner.plans.get(PREFIX)
    actions = [(a.key, a.expected, a.time, a.reason) for a in plan.actions] if plan else []
    unknown = [(u.key, u.reason) for u in plan.unknown] if plan else []
    return (
        planner.conv_last,
        planner.conv_newest,
        planner.conv_left,
        planner.conv_unknown,
        actions,
        unknown,
        plan.records if plan else 0,
    )


def family_plans(planner: Planner, family: Collection[str]) -> FamilyPlans:
    """The plans of the ``family`` namespaces, finished (the worker's answer, beside
    :func:`conv_state`)."""
    planner.finish_followers(family)
    return {
        prefix: (plan.actions, plan.unknown, plan.records)
        for prefix, plan in planner.plans.items()
        if prefix in family
    }


def merge(planner: Planner, state: State) -> None:
    """Take a worker's state into ``planner``, which read none of the worker's records."""
    conv, family = state
    for prefix, (actions, unknown, records) in family.items():
        plan: NamespacePlan | None = planner.plans.get(prefix)
        if plan is not None:
            plan.actions.extend(actions)
            plan.unknown.extend(unknown)
            plan.records += records
    _merge_conv(planner, conv)


def _merge_conv(planner: Planner, state: ConvState) -> None:
    last, newest, left, unreadable, actions, unknown, records = state
    planner.conv_last.update(last)
    planner.conv_newest.update(newest)
    planner.conv_left.update(left)
    planner.conv_unknown.update(unreadable)
    plan = planner.plans.get(PREFIX)
    if plan is None:
        return
    plan.actions.extend(
        Action(key, PREFIX, value, time=moment, reason=reason)
        for key, value, moment, reason in actions
    )
    plan.unknown.extend(Unknown(key, PREFIX, reason) for key, reason in unknown)
    plan.records += records


# -- the worker process ------------------------------------------------------------------


def _read_frame(stream: IO[bytes]) -> bytes | None:
    """One length-prefixed message; None when the stream ends first. Read in chunks: a
    length that is not one (garbage) must not become one huge allocation."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (left,) = _LENGTH.unpack(head)
    chunks = []
    while left:
        chunk = stream.read(min(left, 1 << 24))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


#: Set once the worker's answer is being written: the parent closes our stdin as soon
#: as it has read it, and the lifeline then ends us as done (0), not as orphaned (3).
_ANSWERING = threading.Event()


def _lifeline(stream: IO[bytes]) -> None:
    """End this process the moment the parent's end of ``stream`` closes (it went away)."""

    def watch() -> None:
        try:
            while stream.read(65536):
                pass
        except OSError:
            pass
        os._exit(0 if _ANSWERING.is_set() else 3)

    background(watch, name="tfadmin-lifeline")


def _plan(job: bytes) -> State:
    # lazy: the factory (backends) is what the worker needs; the parent has it loaded
    from triggerfish_cli.storage.factory import open_provider

    config, policies, now, only, prefixes, theirs, ours = pickle.loads(job)
    provider = open_provider(config)
    try:
        planner = Planner(policies, now, only, set(prefixes), fast_loads())
        records = provider.scan_many(theirs, batch_size=5000, excluding=ours)
        try:
            planner.feed(records)
        finally:
            close = getattr(records, "close", None)
            if close is not None:
                close()
        return conv_state(planner), family_plans(planner, [p for p in theirs if p != PREFIX])
    finally:
        provider.close()


def main() -> None:
    # lazy: gc (built in) only matters here
    import gc

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    gc.disable()  # no reference cycles: as in the parent's plan
    job = _read_frame(sys.stdin.buffer)
    if job is None:
        os._exit(2)
    _lifeline(sys.stdin.buffer)
    reply: tuple[str, Any]
    try:
        reply = ("state", _plan(job))
    except BaseException as exc:  # any failure: the parent reads the messages itself
        reply = ("error", f"{type(exc).__name__}: {exc}")
    body = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    _ANSWERING.set()
    out = sys.stdout.buffer
    out.write(_LENGTH.pack(len(body)) + body)
    out.flush()
    os._exit(0)  # no teardown: nothing to flush, and no walk of the heap at exit


if __name__ == "__main__":
    main()
