"""The pure retention plan: every rule, determinism, and hypothesis properties."""

from __future__ import annotations

import json
import random
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.gateway import GATEWAY_ROWS, LINEAGE_ID, SESSION_ID
from tests.helpers.records import (
    NOW,
    ago,
    audit_key,
    conv,
    conv_session,
    cron_job,
    cron_run,
    iso,
    js,
    lineage,
    memory,
    notification,
    pairing_code,
    scheduler_todos,
    session,
    session_id,
    workflow_run,
    workflow_version,
)
from triggerfish_cli import namespaces
from triggerfish_cli.retention.plan import Guard, Plan, needed, scan_order
from triggerfish_cli.retention.policies import Policies, defaults, load_policies
from triggerfish_cli.retention.rules import make_plan
from triggerfish_cli.serialization import parse_iso


def plan_of(rows: list[tuple[str, str]], policies: Policies | None = None, **kw: object) -> Plan:
    return make_plan(rows, policies or defaults(), NOW, **kw)  # type: ignore[arg-type]


def deleted(plan: Plan) -> set[str]:
    return {action.key for action in plan.actions() if action.is_delete}


def unknown(plan: Plan) -> dict[str, str]:
    return {u.key: u.reason for ns in plan.namespaces.values() for u in ns.unknown}


# -- sessions, taint, main session ------------------------------------------------


def test_sessions_go_when_idle_for_the_policy() -> None:
    rows = [
        session("old", ago(40)),
        session("young", ago(10)),
        session("changed", ago(40), ago(5)),  # taint changed five days ago
        session("talking", ago(40)),
        conv("talking", 1, ago(39)),
        conv("talking", 2, ago(2)),  # a message two days ago
        session("edge", ago(30)),  # exactly 30 days: not older
        ("main-session-id", js({"id": "main", "createdAt": iso(ago(300))})),
        session("main", ago(300)),
    ]
    plan = plan_of(rows)
    assert deleted(plan) >= {"sessions:old"}
    assert not deleted(plan) & {
        "sessions:young",
        "sessions:changed",
        "sessions:talking",
        "sessions:edge",
        "sessions:main",
    }
    action = next(a for a in plan.actions() if a.key == "sessions:old")
    assert action.guard == Guard(prefix="conv:old:", after=None)
    assert action.expected == dict(rows)["sessions:old"]


def test_the_main_session_never_goes_in_either_form() -> None:
    for value in ("main", js({"id": "main", "createdAt": iso(ago(200))})):
        plan = plan_of([("main-session-id", value), session("main", ago(200))])
        assert "sessions:main" not in deleted(plan)


def test_session_guard_names_its_last_message() -> None:
    plan = plan_of([session("s", ago(90)), conv("s", 1, ago(89)), conv("s", 7, ago(80))])
    action = next(a for a in plan.actions() if a.key == "sessions:s")
    assert action.guard == Guard(prefix="conv:s:", after="conv:s:000000000007")


def test_taint_follows_its_session() -> None:
    rows = [
        session("old", ago(40)),
        session("young", ago(1)),
        ("taint:old", "INTERNAL"),
        ("taint:young", "INTERNAL"),
        ("taint:orphan", "PUBLIC"),
    ]
    plan = plan_of(rows)
    assert deleted(plan) == {"sessions:old", "taint:old", "taint:orphan"}
    guards = {a.key: a.guard for a in plan.actions()}
    assert guards["taint:old"] == Guard(absent="sessions:old")


def test_sessions_of_unknown_age_are_listed_and_kept() -> None:
    rows = [
        ("sessions:bare", "not json"),
        ("sessions:broken", "{nope"),
        ("sessions:notime", js({"id": "notime"})),
        ("taint:bare", "PUBLIC"),
        session("odd-message", ago(90)),
        ("conv:odd-message:000000000001", js({"timestamp": "yesterday"})),
    ]
    plan = plan_of(rows)
    assert deleted(plan) == set()
    assert unknown(plan) == {
        "sessions:bare": "not JSON (a bare string)",
        "sessions:broken": "malformed JSON",
        "sessions:notime": "no readable createdAt",
        "conv:odd-message:000000000001": "no readable timestamp",
    }


# -- conversations ---------------------------------------------------------------


def test_conv_and_its_counter() -> None:
    rows = [
        conv("a", 1, ago(40)),
        conv("a", 2, ago(35)),
        conv_session("a", 2),  # every message goes: the counter goes
        conv("b", 1, ago(40)),
        conv("b", 2, ago(3)),
        conv_session("b", 2),  # one message stays: the counter stays
        conv_session("c", 5),  # no messages at all
        ("conv:d:000000000001", "garbage"),
        conv_session("d", 1),  # its message has no age: it stays, so does the counter
    ]
    plan = plan_of(rows)
    assert deleted(plan) == {
        "conv:a:000000000001",
        "conv:a:000000000002",
        "conv-session:a",
        "conv:b:000000000001",
        "conv-session:c",
    }
    guards = {a.key: a.guard for a in plan.actions()}
    assert guards["conv-session:a"] == Guard(prefix="conv:a:")


# -- lineage ----------------------------------------------------------------------


def test_lineage_index_keys_follow_the_record_they_name() -> None:
    rows = [
        lineage("old", ago(100), "h1"),
        lineage("new", ago(10), "h1"),
        ("lineage-session:s1:old", "old"),
        ("lineage-session:s1:new", "new"),
        ("lineage-hash:h1", "new"),  # latest wins: points at the newer record, stays
        ("lineage-hash:h0", "old"),
        ("lineage-fwd:old:new", "new"),  # the child stays: the edge stays
        ("lineage-fwd:root:old", "old"),
        ("lineage-hash:h2", "vanished"),  # names a record that is gone
        ("lineage-hash:h3", '{"id":"x"}'),  # not a lineage id
    ]
    plan = plan_of(rows)
    assert deleted(plan) == {
        "lineage:old",
        "lineage-session:s1:old",
        "lineage-hash:h0",
        "lineage-fwd:root:old",
        "lineage-hash:h2",
    }
    assert unknown(plan) == {"lineage-hash:h3": "value names no lineage record"}
    guards = {a.key: a.guard for a in plan.actions()}
    assert guards["lineage-hash:h0"] == Guard(absent="lineage:old")


def test_followers_are_never_deleted_when_their_records_were_not_read() -> None:
    rows = [("taint:x", "PUBLIC"), ("lineage-hash:h", "lid"), conv_session("s", 3)]
    plan = plan_of(rows, complete=["taint:", "lineage-hash:", "conv-session:"])
    assert deleted(plan) == set()
    plan = plan_of(
        [session("old", ago(90))], complete=["sessions:", "main-session-id"]
    )  # conv not read: activity unknown
    assert deleted(plan) == set()


def test_a_channels_current_session_never_goes() -> None:
    rows = [
        session("current", ago(90)),
        session("other", ago(90)),
        session_id("telegram", "current", ago(90)),
        ("main-session-id", js({"id": "main", "createdAt": iso(ago(300))})),
    ]
    assert deleted(plan_of(rows)) == {"sessions:other"}
    # session-id: not read in full: which sessions are in use is unknown, none goes
    plan = plan_of(rows, complete=["sessions:", "main-session-id", "conv:"])
    assert deleted(plan) == set()


# -- scheduler runs: no sessions: record, everything aged by its own times -------------


def test_scheduler_runs_age_by_their_own_times_never_as_orphans() -> None:
    """Cron, trigger and webhook runs have a session id and no sessions: record."""
    rows = [
        # a run 40 days ago: messages, counter, lineage, todo list all go
        conv("run-old", 0, ago(40)),
        conv("run-old", 1, ago(40)),
        conv_session("run-old", 1),
        lineage("l-old", ago(100)),
        ("lineage-session:run-old:l-old", "l-old"),
        scheduler_todos("cron", ago(40), (ago(40), ago(40))),
        # a run two days ago: nothing goes, though it has no sessions: record either
        conv("run-new", 0, ago(2)),
        conv_session("run-new", 0),
        lineage("l-new", ago(2)),
        ("lineage-session:run-new:l-new", "l-new"),
        scheduler_todos("webhook-github", ago(2), (ago(2), ago(2))),
        # an old run whose list was updated five days ago: the list stays
        scheduler_todos("trigger", ago(40), (ago(40), ago(5))),
        # the owner's own list: never, whatever its items say
        ("todos:main-session", js({"todos": [{"created_at": iso(ago(400))}]})),
        ("todos:scheduler-cron-soon", js({"todos": []})),  # no run time: age unknown
    ]
    plan = plan_of(rows)
    old_todos = rows[5][0]
    assert deleted(plan) == {
        "conv:run-old:000000000000",
        "conv:run-old:000000000001",
        "conv-session:run-old",
        "lineage:l-old",
        "lineage-session:run-old:l-old",
        old_todos,
    }
    assert unknown(plan) == {
        "todos:scheduler-cron-soon": "no run time (-<ms>) at the end of the key"
    }
    todo = next(a for a in plan.actions() if a.key == old_todos)
    assert todo.reason == "scheduler run idle for more than 30d"
    assert load_policies({"todos": "forever"})["todos:"].kind == "forever"
    assert deleted(plan_of(rows, load_policies({"todos": "forever"}))) == deleted(plan) - {
        old_todos
    }


def test_workflow_versions_only_resolved_ones_and_only_with_a_policy() -> None:
    rows = [
        workflow_version("w", "v1", ago(200), ago(199), "APPROVED"),
        workflow_version("w", "v2", ago(200), None, "PROPOSED"),  # open: never
        workflow_version("w", "v3", ago(20), ago(10), "REJECTED"),
        ("workflow-versions:w:v4", js({"version": {"resolvedAt": "soon"}})),
    ]
    assert deleted(plan_of(rows)) == set()  # forever by default
    plan = plan_of(rows, load_policies({"workflow-versions": "90d"}))
    assert deleted(plan) == {"workflow-versions:w:v1"}
    assert unknown(plan) == {"workflow-versions:w:v4": "no readable version.resolvedAt"}
    assert namespaces.record_time(
        namespaces.get("workflow-versions:"), rows[1][0], rows[1][1]
    ) == parse_iso(iso(ago(200)))  # the age reads proposedAt when nothing resolved it


# -- audit, cron, notifications, pairing, workflow runs, config -----------------------


def test_audit_by_the_time_in_its_key() -> None:
    rows = [audit_key(ago(400)), audit_key(ago(300)), ("audit:nonsense:hook", "{}")]
    plan = plan_of(rows)
    assert deleted(plan) == {rows[0][0]}
    assert unknown(plan) == {"audit:nonsense:hook": "no ISO time in the key"}


def test_cron_jobs_go_only_when_disabled() -> None:
    rows = [
        cron_job("on", ago(400)),
        cron_job("off-old", ago(40), enabled=False),
        cron_job("off-new", ago(3), enabled=False),
        ("cron:bad", "x"),
    ]
    plan = plan_of(rows)
    assert deleted(plan) == {"cron:off-old"}
    assert "cron:bad" in unknown(plan)


def test_cron_history_is_trimmed_inside_the_array() -> None:
    runs = [cron_run("j", ago(45)), cron_run("j", ago(31), ok=False), cron_run("j", ago(2))]
    timeless = {"jobId": "j", "durationMs": 1, "success": True}
    rows = [
        ("cron-history:j", js(runs)),
        ("cron-history:all-old", js([cron_run("k", ago(60)), cron_run("k", ago(50))])),
        ("cron-history:fresh", js([cron_run("f", ago(1))])),
        ("cron-history:timeless", js([timeless, cron_run("t", ago(90))])),
        ("cron-history:bad", "[oops"),
    ]
    plan = plan_of(rows)
    actions = {a.key: a for a in plan.actions()}
    trim = actions["cron-history:j"]
    assert not trim.is_delete and trim.removed == 2
    assert trim.replacement == js(runs[2:])  # JSON.stringify form, run kept as written
    assert trim.expected == js(runs)
    assert trim.time == runs[0]["executedAt"]
    assert actions["cron-history:all-old"].is_delete
    assert "cron-history:fresh" not in actions
    assert actions["cron-history:timeless"].replacement == js([timeless])  # never deleted
    assert set(unknown(plan)) == {"cron-history:timeless", "cron-history:bad"}


def test_cron_history_keep_n_runs() -> None:
    runs = [cron_run("j", ago(days)) for days in (5, 4, 3, 2, 1)]
    plan = plan_of([("cron-history:j", js(runs))], load_policies({"cron-history": {"keep": 2}}))
    (action,) = plan.actions()
    assert action.replacement == js(runs[3:]) and action.removed == 3


def test_notifications_go_a_week_after_delivery_undelivered_stay() -> None:
    rows = [
        notification("undelivered", ago(300)),
        notification("delivered-long-ago", ago(20), delivered=ago(10)),
        notification("delivered-lately", ago(20), delivered=ago(2)),
        (
            "notifications:owner:odd",
            js({"id": "odd", "createdAt": iso(ago(50)), "delivered": True}),
        ),
    ]
    plan = plan_of(rows)
    assert deleted(plan) == {"notifications:owner:delivered-long-ago"}
    assert unknown(plan) == {"notifications:owner:odd": "no readable deliveredAt"}


def test_pairing_codes_past_expiry_linked_accounts_never() -> None:
    rows = [
        pairing_code("telegram", "111111", ago(hours=1)),
        pairing_code("telegram", "222222", ago(hours=-1)),  # expires in an hour
        (
            "pairing:pending:slack",
            js({"code": "3", "channelType": "slack", "expiresAt": iso(ago(2)), "used": False}),
        ),
        (
            "pairing:linked:telegram:42",
            js({"channelType": "telegram", "platformUserId": "42", "linkedAt": iso(ago(900))}),
        ),
    ]
    plan = plan_of(rows)
    assert deleted(plan) == {"pairing:telegram:111111", "pairing:pending:slack"}
    grace = plan_of(rows, load_policies({"pairing": "3h"}))
    assert deleted(grace) == {"pairing:pending:slack"}


def test_workflow_runs_running_ones_are_of_unknown_age() -> None:
    rows = [
        workflow_run("done", ago(40)),
        workflow_run("recent", ago(1)),
        workflow_run("run", None),
    ]
    plan = plan_of(rows)
    assert deleted(plan) == {"workflow-runs:done"}
    assert unknown(plan) == {"workflow-runs:run": "no readable completedAt"}


def test_config_keeps_the_ten_newest_versions() -> None:
    rows = [(f"config:v{n}", js({"createdAt": iso(ago(n))})) for n in range(1, 13)]
    rows.append(("config:latest", "{}"))
    plan = plan_of(rows)
    assert deleted(plan) == {"config:v1", "config:v2"}  # by version number, not by time
    assert unknown(plan) == {"config:latest": "not config:v<N>"}


# -- memories ---------------------------------------------------------------------


def test_memories_are_kept_by_default_and_only_soft_deleted_ones_go() -> None:
    rows = [
        memory("old-deleted", "PUBLIC", ago(200), expired=True),
        memory("new-deleted", "PUBLIC", ago(5), expired=True),
        memory("live", "INTERNAL", ago(900), expired=False),
        ("memory:main-session:PUBLIC:odd", js({"key": "odd", "expired": True})),
        ("memory:main-session:PUBLIC:noflag", js({"key": "x", "updatedAt": iso(ago(900))})),
    ]
    assert deleted(plan_of(rows)) == set()
    assert "memory:" not in plan_of(rows).namespaces
    plan = plan_of(rows, load_policies({"memory": "90d"}))
    assert deleted(plan) == {"memory:main-session:PUBLIC:old-deleted"}
    assert unknown(plan) == {
        "memory:main-session:PUBLIC:odd": "no readable updatedAt",
        "memory:main-session:PUBLIC:noflag": "no readable expired flag",
    }


# -- never touched ------------------------------------------------------------------


def test_unknown_namespaces_are_counted_and_never_touched() -> None:
    rows = [("custom:thing", js({"createdAt": iso(ago(900))})), ("nocolon", "y"), ("x:1", "")]
    plan = plan_of(rows)
    assert list(plan.actions()) == []
    assert plan.unknown_namespaces == {"": 1, "custom:": 1, "x:": 1}


def test_held_namespaces_and_their_followers_are_never_touched() -> None:
    rows = [
        lineage("old", ago(400)),
        ("lineage-hash:h", "gone"),
        session("s", ago(99)),
        ("taint:orphan", "PUBLIC"),
        audit_key(ago(900)),
    ]
    plan = plan_of(rows, load_policies({"hold": ["lineage", "audit"]}))
    assert deleted(plan) == {"sessions:s", "taint:orphan"}
    assert plan.namespaces["lineage-hash:"].policy.held


def test_only_restricts_what_is_acted_on() -> None:
    rows = [session("s", ago(99)), ("taint:s", "PUBLIC"), conv("s", 1, ago(99))]
    assert deleted(plan_of(rows, only={"conv:"})) == {"conv:s:000000000001"}
    # the session is not swept this time, so its taint stays too
    assert deleted(plan_of(rows, only={"taint:"})) == set()
    assert list(plan_of(rows, only={"taint:"}).namespaces) == ["taint:"]


def test_the_gateway_store() -> None:
    plan = plan_of(list(GATEWAY_ROWS.items()))
    assert deleted(plan) == {
        f"conv:{SESSION_ID}:000000000000",
        f"conv:{SESSION_ID}:000000000001",
        f"conv-session:{SESSION_ID}",
        "pairing:telegram:482913",
        "cron-history:c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f",
    }
    # the main session (bare UUID in main-session-id) and lineage under 90 days stay
    assert f"sessions:{SESSION_ID}" not in deleted(plan)
    assert f"lineage:{LINEAGE_ID}" not in deleted(plan)


def test_scan_order_reads_followers_before_what_they_follow() -> None:
    order = needed(defaults())
    assert order.index("taint:") < order.index("sessions:")
    assert order.index("conv-session:") < order.index("conv:")
    assert order.index("lineage-hash:") < order.index("lineage:")
    assert order.index("main-session-id") < order.index("sessions:") < order.index("conv:")
    assert "skills:" not in order and "memory:" not in order
    assert needed(defaults(), only={"taint:"}) == scan_order({"taint:", "sessions:"})


# -- determinism and properties --------------------------------------------------------


def _rows_of(plan: Plan) -> list[dict[str, object]]:
    return [
        a.as_row() | {"expected": a.expected, "replacement": a.replacement} for a in plan.actions()
    ]


def test_plan_is_deterministic_and_order_independent() -> None:
    rows = [
        *GATEWAY_ROWS.items(),
        session("old", ago(40)),
        ("taint:old", "PUBLIC"),
        lineage("l1", ago(100)),
        ("lineage-hash:hh", "l1"),
        conv("old", 1, ago(40)),
        conv_session("old", 1),
    ]
    first = plan_of(rows)
    for seed in range(5):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        again = plan_of(shuffled)
        assert _rows_of(again) == _rows_of(first)
        assert [ns.as_row() for ns in again.namespaces.values()] == [
            ns.as_row() for ns in first.namespaces.values()
        ]


_AGE_NAMESPACES = [
    "sessions",
    "conv",
    "lineage",
    "audit",
    "cron",
    "cron-history",
    "notifications",
    "exec",
    "workflow-runs",
    "memory",
    "trigger",
    "team",
]
_durations = st.sampled_from(["1h", "12h", "1d", "7d", "30d", "90d", "1y", "forever"])
_policy_sections = st.fixed_dictionaries(
    {},
    optional={
        **{name: _durations for name in _AGE_NAMESPACES},
        "todos": _durations,
        "workflow-versions": _durations,
        "hold": st.lists(st.sampled_from([ns.name for ns in namespaces.NAMESPACES]), max_size=4),
    },
)
_ids = st.sampled_from(["a", "b", "c", "d", "main"])
_times = st.one_of(
    st.integers(-24 * 500, 24 * 500).map(lambda hours: iso(NOW - timedelta(hours=hours))),
    st.sampled_from(["", "yesterday", None, 5]),
)


@st.composite
def _record(draw: st.DrawFn) -> tuple[str, str]:
    kind = draw(
        st.sampled_from(
            [
                "sessions",
                "taint",
                "conv",
                "conv-session",
                "lineage",
                "lineage-hash",
                "audit",
                "cron",
                "cron-history",
                "notifications",
                "pairing",
                "memory",
                "exec",
                "config",
                "workflow-runs",
                "workflow-versions",
                "todos",
                "session-id",
                "unknown",
                "main",
                "bare",
            ]
        )
    )
    sid, at = draw(_ids), draw(_times)
    if kind == "sessions":
        changes = draw(st.lists(_times, max_size=1))
        return f"sessions:{sid}", js(
            {"id": sid, "createdAt": at, "history": [{"timestamp": t} for t in changes]}
        )
    if kind == "taint":
        return f"taint:{sid}", "PUBLIC"
    if kind == "conv":
        return f"conv:{sid}:{draw(st.integers(1, 3)):012d}", js({"timestamp": at})
    if kind == "conv-session":
        return f"conv-session:{sid}", js({"lastSequence": 1})
    if kind == "lineage":
        return f"lineage:{sid}", js({"origin": {"accessed_at": at}})
    if kind == "lineage-hash":
        return f"lineage-hash:{draw(st.integers(0, 3))}", sid
    if kind == "audit":
        return f"audit:{at}:hook", "{}"
    if kind == "cron":
        return f"cron:{sid}", js({"createdAt": at, "enabled": draw(st.booleans())})
    if kind == "cron-history":
        return f"cron-history:{sid}", js([{"executedAt": draw(_times)} for _ in range(3)])
    if kind == "notifications":
        return f"notifications:u:{sid}", js({"createdAt": at, "deliveredAt": draw(_times)})
    if kind == "pairing":
        return f"pairing:{draw(st.sampled_from(['x:1', 'linked:x:1', 'pending:x']))}", js(
            {"expiresAt": at, "linkedAt": at}
        )
    if kind == "memory":
        return f"memory:main-session:PUBLIC:{sid}", js(
            {"updatedAt": at, "expired": draw(st.booleans())}
        )
    if kind == "exec":
        return f"exec:{sid}", js({"createdAt": at})
    if kind == "config":
        return f"config:v{draw(st.integers(1, 15))}", js({"createdAt": at})
    if kind == "workflow-runs":
        return f"workflow-runs:{sid}", js({"completedAt": at})
    if kind == "workflow-versions":
        version = {"proposedAt": at} | ({"resolvedAt": draw(_times)} if draw(st.booleans()) else {})
        return f"workflow-versions:w:{sid}", js({"version": version})
    if kind == "todos":
        agent = draw(st.sampled_from(["main-session", f"scheduler-cron-{sid}"]))
        hours = draw(st.integers(-24 * 500, 24 * 500))
        if agent != "main-session":
            agent = f"scheduler-cron-{int((NOW - timedelta(hours=hours)).timestamp() * 1000)}"
        return f"todos:{agent}", js({"todos": [{"created_at": at, "updated_at": draw(_times)}]})
    if kind == "session-id":
        return f"session-id:{draw(st.sampled_from(['telegram', 'slack']))}", js({"id": sid})
    if kind == "main":
        return "main-session-id", sid
    if kind == "bare":
        return f"{draw(st.sampled_from(['sessions', 'lineage', 'audit', 'conv']))}:{sid}", "bare"
    return f"custom:{sid}", js({"createdAt": at})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(_record(), max_size=40), section=_policy_sections)
def test_plan_never_deletes_what_it_must_not(
    records: list[tuple[str, str]], section: dict[str, object]
) -> None:
    store = dict(records)  # later writes win, as in the store
    policies = load_policies(section)
    plan = make_plan(store.items(), policies, NOW)
    gone = deleted(plan)
    for action in plan.actions():
        ns = namespaces.for_key(action.key)
        assert ns is not None, "an unknown namespace was touched"
        policy = policies[ns.prefix]
        assert not policy.held and policy.kind != "forever", action.key
        assert store[action.key] == action.expected
        if policy.kind == "follows":
            anchor = action.guard.absent if action.guard and action.guard.absent else None
            if anchor is not None:  # taint:, lineage-*: the record is absent or goes too
                assert anchor not in store or anchor in gone
            else:  # conv-session: no message of the session is left
                sid = action.key.removeprefix("conv-session:")
                assert not {k for k in store if k.startswith(f"conv:{sid}:")} - gone
        elif policy.kind == "age":
            cutoff = policy.cutoff(NOW)
            assert cutoff is not None
            moment = namespaces.record_time(ns, action.key, store[action.key])
            if action.is_delete:
                # never a record of unknown age, never one younger than its policy
                assert moment is not None and moment < cutoff, action.key
            else:
                kept = json.loads(action.replacement or "[]")
                removed = [run for run in json.loads(action.expected) if run not in kept]
                assert removed and all(
                    (t := parse_iso(run.get("executedAt"))) is not None and t < cutoff
                    for run in removed
                )
            if ns.prefix == "memory:":
                assert json.loads(store[action.key])["expired"] is True
            if ns.prefix == "sessions:":
                assert action.key != "sessions:" + store.get("main-session-id", "")
                current = [
                    json.loads(v)["id"] for k, v in store.items() if k.startswith("session-id:")
                ]
                assert action.key.removeprefix("sessions:") not in current
            if ns.prefix == "todos:":
                assert action.key.startswith("todos:scheduler-")
                items = json.loads(store[action.key])["todos"]
                raw = [i.get(f) for i in items for f in ("created_at", "updated_at")]
                times = [parse_iso(value) for value in raw if value is not None]
                assert all(t is not None and t < cutoff for t in times), raw
            if ns.prefix == "workflow-versions:":
                resolved = parse_iso(json.loads(store[action.key])["version"].get("resolvedAt"))
                assert resolved is not None and resolved < cutoff
    listed = set(unknown(plan))
    assert not {a.key for a in plan.actions() if a.is_delete} & listed


def test_a_namespace_plans_totals_follow_its_actions() -> None:
    from triggerfish_cli.retention.plan import Action, NamespacePlan, defer

    policies = defaults()
    ns_plan = NamespacePlan(policies["conv:"])
    plan = Plan(parse_iso("2026-11-01T00:00:00Z"), {"conv:": ns_plan})  # type: ignore[arg-type]
    assert (plan.deletes, plan.trims, plan.bytes) == (0, 0, 0)
    ns_plan.actions.append(Action("conv:a:1", "conv:", "xxxx"))
    assert (plan.deletes, plan.trims, plan.bytes) == (1, 0, 4)
    ns_plan.actions.append(Action("conv:a:2", "conv:", "é" * 3, replacement="é"))
    assert (ns_plan.deletes, ns_plan.trims, ns_plan.bytes) == (1, 1, 8)  # 6 - 2 bytes freed
    assert ns_plan.as_row()["delete"] == 1 and ns_plan.as_row()["bytes"] == 8
    assert defer(plan, "conv:", "later") == 2
    assert (plan.deletes, plan.trims, plan.bytes, ns_plan.deferred) == (0, 0, 0, 2)
