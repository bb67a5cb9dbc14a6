"""`triggerfish-admin retention`: see the policies, plan a sweep, sweep."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from triggerfish_cli.cli import metrics
from triggerfish_cli.cli.context import AppState, state
from triggerfish_cli.cli.metrics import MetricsOpt
from triggerfish_cli.cli.options import (
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    YesOpt,
    fmt_value,
    sub_app,
)
from triggerfish_cli.cli.retention_output import brief, report, show_plan
from triggerfish_cli.errors import UsageError

if TYPE_CHECKING:
    from triggerfish_cli.retention.policies import Policies

app = sub_app(
    "retention",
    "Apply the retention policies: see them, plan a sweep, sweep.\n\n"
    "Policies come from the defaults and the retention: section of triggerfish.yaml. "
    "Unknown namespaces, namespaces on hold and records of unknown age are never touched.",
)

NamespaceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--namespace",
        "-N",
        metavar="NS",
        help="Only this namespace (name or prefix, e.g. sessions); repeatable.",
        show_default=False,
    ),
]
AsOfOpt = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        metavar="TIME",
        help="Judge ages as of this date or ISO time instead of now (a sweep: not in the future).",
        show_default=False,
    ),
]


def _policies(st: AppState) -> Policies:
    from triggerfish_cli.retention.policies import policies_from_settings

    return policies_from_settings(st.settings())


def _only(names: list[str] | None) -> set[str] | None:
    from triggerfish_cli import namespaces

    if not names:
        return None
    found = set()
    for name in names:
        namespace = namespaces.get(name)
        if namespace is None:
            raise UsageError(f"unknown namespace {name!r}", hint="see `retention policies`")
        found.add(namespace.prefix)
    return found


def _as_of(text: str | None, *, future: bool) -> datetime:
    from triggerfish_cli.serialization import utc_now
    from triggerfish_cli.timespec import parse_moment

    now = utc_now()
    if text is None:
        return now
    moment = parse_moment(text)
    if moment is None:
        raise UsageError(
            f"--as-of: {text!r} is not a date or an ISO time, e.g. 2026-03-28 or "
            "2026-03-28T14:05:40Z"
        )
    if not future and moment > now:
        raise UsageError("--as-of: a sweep cannot judge ages as of a time in the future")
    return moment


@app.command("policies")
def policies_cmd(ctx: typer.Context, fmt: FormatOpt = None) -> None:
    """The effective policy of every namespace, and where it comes from."""
    from triggerfish_cli.cli.output import Column, text_column

    st = state(ctx)
    policies = _policies(st)
    out = st.output(fmt_value(fmt))
    out.rows(
        (policy.as_dict() for policy in policies),
        [
            Column("namespace", "namespace"),
            Column("policy", "policy"),
            Column("source", "source"),
            Column("held", "held"),
            text_column("rule", "what goes"),
        ],
    )


@app.command("plan")
def plan_cmd(
    ctx: typer.Context,
    namespace: NamespaceOpt = None,
    list_keys: Annotated[
        bool,
        typer.Option("--list", "-l", help="One row per key: deletions, trims, ages unknown."),
    ] = False,
    as_of: AsOfOpt = None,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            help="Exit 1 when a sweep would delete or trim something, 0 when "
            "there is nothing to do (for cron alerts); with -q print nothing",
        ),
    ] = False,
    fmt: FormatOpt = None,
) -> None:
    """What a sweep would do now, per namespace (count, bytes, oldest, rule). Writes nothing."""
    from triggerfish_cli.retention.sweep import read_plan

    st = state(ctx)
    policies = _policies(st)
    only, now = _only(namespace), _as_of(as_of, future=True)
    plan = read_plan(st.provider(), policies, now, only=only)
    out = st.output(fmt_value(fmt))
    if not (exit_code and out.quiet):
        show_plan(out, plan, list_keys)
    if exit_code and (plan.deletes or plan.trims):
        raise typer.Exit(1)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM (`kill`) into KeyboardInterrupt: the batch rolls back, audit, exit 130."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@app.command("sweep")
def sweep_cmd(
    ctx: typer.Context,
    namespace: NamespaceOpt = None,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=0,
            metavar="SECONDS",
            help="Wait up to SECONDS for another sweep to finish (default: exit 6 at once).",
        ),
    ] = 0.0,
    max_delete: Annotated[
        int | None,
        typer.Option(
            "--max-delete",
            min=0,
            metavar="N",
            help="Refuse (exit 4, nothing deleted) when the plan deletes more than N records.",
            show_default=False,
        ),
    ] = None,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            min=1,
            metavar="N",
            help="Most records per write transaction (fewer when each would hold the "
            "write lock, and keep the gateway paused, over 20 ms).",
        ),
    ] = 5000,
    pause: Annotated[
        float | None,
        typer.Option(
            "--pause",
            min=0,
            metavar="SECONDS",
            help="Rest after each transaction (default on SQLite: the write gate's, 2.5 "
            "times as long as it paused the gateway; elsewhere 0.03).",
            show_default=False,
        ),
    ] = None,
    as_of: AsOfOpt = None,
    metrics_file: MetricsOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Apply the plan: delete what the policies say, in short paced batches, with a lock.

    Each record is deleted only if unchanged since the plan read it. Ctrl-C or
    kill leaves the store consistent; the next sweep finishes the job. One
    audit record per sweep. --dry-run prints the plan.
    """
    from triggerfish_cli.retention.sweep import (
        Pacing,
        apply_plan,
        check_limit,
        read_plan,
        sweep_lock,
    )

    st = state(ctx)
    policies = _policies(st)
    only, now = _only(namespace), _as_of(as_of, future=False)
    out = st.output(fmt_value(fmt), quiet or None)
    provider = st.provider()
    if dry_run:
        show_plan(out, read_plan(provider, policies, now, only=only), list_keys=False)
        return
    pacing = Pacing(batch_size=batch_size, pause=pause)
    run = metrics.begin(ctx, "retention_sweep", metrics_file)
    with _sigterm_interrupts(), sweep_lock(provider, wait):
        plan = read_plan(provider, policies, now, only=only)
        check_limit(plan, max_delete)
        if plan.deletes or plan.trims:
            if not yes and out.stdin_is_tty:
                brief(out, plan)
            out.confirm(
                f"Delete {plan.deletes} and trim {plan.trims} record(s) in "
                f"{provider.describe()}? (see `retention plan`)",
                yes=yes,
                what="the sweep",
            )
        with out.progress("sweeping", total=plan.deletes + plan.trims) as bar:
            result = apply_plan(provider, plan, pacing=pacing, on_progress=bar.advance)
    summary = result.as_dict()
    metrics.swept(run, summary)
    report(out, summary)
