"""`triggerfish-admin retention sweep`: apply the plan beside the live gateway."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from triggerfish_cli.cli import metrics
from triggerfish_cli.cli.kv.common import RawTaintOpt
from triggerfish_cli.cli.metrics import MetricsOpt
from triggerfish_cli.cli.options import DryRunOpt, FormatOpt, QuietOpt, YesOpt, begin, taint_level
from triggerfish_cli.cli.retention.common import (
    AsOfOpt,
    NamespaceOpt,
    app,
    as_of_time,
    only_of,
    policies_of,
)
from triggerfish_cli.cli.retention.output import brief, hidden_note, report, show_plan
from triggerfish_cli.retention.plan import hides, seen_at
from triggerfish_cli.retention.reading import read_plan
from triggerfish_cli.retention.sweep import (
    Pacing,
    apply_plan,
    check_limit,
    sweep_lock,
)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM (`kill`) into KeyboardInterrupt: the batch rolls back, audit, exit 130."""
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
    taint: RawTaintOpt = None,
    metrics_file: MetricsOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Apply the plan: delete what the policies say, in short paced batches, with a lock.

    Each record is deleted only if unchanged since the plan read it. Ctrl-C or
    kill leaves the store consistent; the next sweep finishes the job. One
    audit record per sweep. --dry-run prints the plan. With --taint (or
    TRIGGERFISH_TAINT) the sweep deletes the same records, but says nothing of the
    memory rows above it (neither counted nor sized; the audit record counts all).
    """
    st, out = begin(ctx, fmt, quiet)
    policies = policies_of(st)
    only, now = only_of(namespace), as_of_time(as_of, future=False)
    level = taint_level(taint) if taint is not None else None
    provider = st.provider()
    keep = st.owns_process  # the plan's objects out of the collector's sight
    if dry_run:
        whole = read_plan(provider, policies, now, only=only, keep=keep)
        hidden = level if hides(whole, level) else None
        show_plan(out, seen_at(whole, level), list_keys=False, hidden=hidden)
        return
    pacing = Pacing(batch_size=batch_size, pause=pause)
    run = metrics.begin(ctx, "retention_sweep", metrics_file)
    with _sigterm_interrupts(), sweep_lock(provider, wait):
        plan = read_plan(provider, policies, now, only=only, keep=keep)
        check_limit(plan, max_delete, level)
        hidden = level if hides(plan, level) else None
        seen = seen_at(plan, level)
        # with memory rows hidden it cannot say there is nothing to do: it asks
        if seen.deletes or seen.trims or hidden is not None:
            if not yes and out.stdin_is_tty:
                brief(out, seen)
            also = "" if hidden is None else f" (plus any memory rows above {hidden.name} due)"
            out.confirm(
                f"Delete {seen.deletes} and trim {seen.trims} record(s){also} in "
                f"{provider.describe()}? (see `retention plan`)",
                yes=yes,
                what="the sweep",
            )
        with out.progress("sweeping", total=seen.deletes + seen.trims) as bar:
            result = apply_plan(
                provider, plan, pacing=pacing, on_progress=bar.advance, taint=level, only=only
            )
    summary = result.as_dict(shown=True)
    metrics.swept(run, summary)
    report(out, summary)
    hidden_note(out, hidden)
