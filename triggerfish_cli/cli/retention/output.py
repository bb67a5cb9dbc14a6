"""How `retention` shows plans and sweep summaries (tables, JSON, CSV)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from triggerfish_cli.cli.output import Output
from triggerfish_cli.cli.output.text import Column, human_bytes, text_column
from triggerfish_cli.serialization import to_iso

if TYPE_CHECKING:
    from triggerfish_cli.classification import Level
    from triggerfish_cli.retention.plan import Plan
    from triggerfish_cli.storage.provider import StorageProvider


def plan_rows(out: Output, plan: Plan) -> None:
    out.rows(
        (ns_plan.as_row() for ns_plan in plan.namespaces.values()),
        [
            Column("namespace", "namespace", essential=True),
            Column("policy", "policy", render=lambda v: "" if v is None else str(v)),
            Column("held", "held"),
            Column("delete", "delete", "right", essential=True),
            Column("trim", "trim", "right", essential=True),
            Column("bytes", "size", "right", human_bytes),
            Column("oldest", "oldest"),
            Column("unknown_age", "age unknown", "right"),
            text_column("rule", "rule"),
        ],
        footer={
            "namespace": "total",
            "delete": plan.deletes,
            "trim": plan.trims,
            "bytes": plan.bytes,
            "unknown_age": plan.unknown_age,
        },
        empty="no namespace to sweep",
    )


def key_rows(plan: Plan) -> Iterator[dict[str, Any]]:
    for ns_plan in plan.namespaces.values():
        rows = [action.as_row() for action in ns_plan.actions]
        rows += [unknown.as_row() for unknown in ns_plan.unknown]
        yield from sorted(rows, key=lambda row: row["key"])


def audit_names(provider: StorageProvider, plan: Plan, taint: Level | None) -> None:
    """The raw-read audit record of the memory keys above PUBLIC a plan list names
    (as kv list), written before they are shown: if it cannot be, none are."""
    # lazy: kv.keys is not loaded by `retention plan` without --list
    from triggerfish_cli.kv.keys import RawReads

    memories = plan.namespaces.get("memory:")
    if memories is None:
        return
    reads = RawReads(taint)
    for key in sorted([*(a.key for a in memories.actions), *(u.key for u in memories.unknown)]):
        reads.admit(key)
    reads.audit(provider, "retention plan --list", "memory:")


def hidden_note(out: Output, taint: Level | None) -> None:
    if taint is not None:
        out.info(
            f"memory rows above {taint.name} left out (--taint); "
            "a sweep deletes those the policies name all the same"
        )


def show_plan(out: Output, plan: Plan, list_keys: bool, hidden: Level | None = None) -> None:
    """``plan`` as a table or rows; ``hidden``: the taint it was seen at (seen_at), noted."""
    if list_keys:
        out.rows(
            key_rows(plan),
            [
                Column("key", "key", essential=True),
                Column("action", "action", essential=True),
                Column("time", "time"),
                Column("bytes", "bytes", "right"),
                text_column("reason", "reason"),
            ],
            empty="nothing to delete and no record of unknown age",
        )
    else:
        plan_rows(out, plan)
    out.info(
        f"plan as of {to_iso(plan.now)}: delete {plan.deletes} record(s), trim {plan.trims} "
        f"({human_bytes(plan.bytes)}); {plan.unknown_age} of unknown age kept"
    )
    hidden_note(out, hidden)


def brief(out: Output, plan: Plan) -> None:
    """What the sweep is about to do, on stderr, before asking."""
    for ns_plan in plan.namespaces.values():
        if ns_plan.actions:
            trims = f", trim {ns_plan.trims}" if ns_plan.trims else ""
            out.info(
                f"  {ns_plan.policy.namespace}  delete {ns_plan.deletes}{trims} "
                f"({human_bytes(ns_plan.bytes)}): {ns_plan.policy.rule}"
            )


def report(out: Output, summary: dict[str, Any]) -> None:
    if out.quiet:
        return
    columns = [
        Column("namespace", "namespace", essential=True),
        Column("policy", "policy"),
        Column("planned", "planned", "right"),
        Column("deleted", "deleted", "right", essential=True),
        Column("trimmed", "trimmed", "right", essential=True),
        Column("changed", "kept: changed", "right"),
        Column("guarded", "kept: guard", "right"),
        Column("unknown_age", "age unknown", "right"),
        Column("bytes", "freed", "right", human_bytes),
    ]

    def show() -> None:
        rows = [row for row in summary["namespaces"] if row["planned"] or row["unknown_age"]]
        if rows:
            out.rows(rows, columns)
        out.line(
            f"swept {summary['store']} as of {summary['as_of']}: deleted {summary['deleted']}, "
            f"trimmed {summary['trimmed']} ({human_bytes(summary['bytes'])}) in "
            f"{summary['seconds']:.1f} s; kept {summary['changed']} changed meanwhile, "
            f"{summary['guarded']} by guard, {summary['unknown_age']} of unknown age; "
            f"audit {summary['audit_key']}"
        )

    out.result(summary, show, rows=summary["namespaces"], columns=columns)
