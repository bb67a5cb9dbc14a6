"""`triggerfish-admin demo`: a realistic, gateway-shaped store to try the tool on."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from triggerfish_cli.cli.options import FormatOpt, QuietOpt, begin, sub_app
from triggerfish_cli.errors import UsageError

app = sub_app(
    "demo",
    "Build a realistic demo store to try the tool on.\n\n"
    "The store is shaped exactly like one the Triggerfish gateway writes.",
)


@app.command("create")
def create_cmd(
    ctx: typer.Context,
    records: Annotated[
        int, typer.Option("--records", "-r", min=1, help="Number of keys to write.")
    ] = 2000,
    seed: Annotated[
        int, typer.Option("--seed", "-s", help="Random seed: the same seed gives the same store.")
    ] = 0,
    days: Annotated[
        int, typer.Option("--days", min=1, help="Spread record times over this many days.")
    ] = 400,
    memories: Annotated[
        int | None,
        typer.Option(
            "--memories",
            min=0,
            help="Number of memory records among --records (default 8%; at most half).",
            show_default=False,
        ),
    ] = None,
    memory_words: Annotated[
        int | None,
        typer.Option(
            "--memory-words",
            min=1,
            help="Give memories about this many words of Zipf-distributed text.",
            show_default=False,
        ),
    ] = None,
    now: Annotated[
        str | None,
        typer.Option(
            "--now",
            help="Anchor time (a date or an ISO-8601 time) instead of the current time, for a "
            "byte-identical store.",
            show_default=False,
        ),
    ] = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Fill an EMPTY store (the default one, --db PATH, or the configured backend)."""
    # lazy: audit, demo and timespec add 15 modules to `demo --help`
    from triggerfish_cli import audit
    from triggerfish_cli.demo import build_demo
    from triggerfish_cli.timespec import parse_moment

    anchor: datetime | None = None
    if now is not None:
        anchor = parse_moment(now)
        if anchor is None:
            raise UsageError(f"--now: not a date or an ISO-8601 time: {now!r}")
    st, out = begin(ctx, fmt, quiet)
    provider = st.provider(create=True)
    with out.progress("generating") as bar:
        summary = build_demo(
            provider,
            records=records,
            seed=seed,
            now=anchor,
            days=days,
            memories=memories,
            memory_words=memory_words,
            progress=bar,
        )
    audit.record(
        provider,
        "demo_create",
        target=provider.describe(),
        counts={"records": summary.records},
        details={"seed": seed},
    )
    summary.counts["audit:"] = summary.counts.get("audit:", 0) + 1  # the record just written
    result = summary.as_dict()
    result["store"] = provider.describe()
    result["keys"] = summary.records + 1
    out.outcome(
        result,
        f"wrote {summary.records} demo keys and this run's audit record to "
        f"{provider.describe()}: {summary.records + 1} keys "
        f"({summary.memories_indexed} memories indexed, seed {seed})",
    )
