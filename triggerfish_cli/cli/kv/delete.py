"""`kv delete` and `kv clear`: one key, a prefix, or the whole store."""

from __future__ import annotations

from typing import Annotated

import typer

from triggerfish_cli.cli.kv.common import app, raw_reads
from triggerfish_cli.cli.options import (
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    YesOpt,
    begin,
    complete_key,
)
from triggerfish_cli.errors import RefusedError, UsageError


@app.command("delete")
def delete_cmd(
    ctx: typer.Context,
    key: Annotated[
        str | None,
        typer.Argument(
            help="The exact key to delete.", show_default=False, autocompletion=complete_key
        ),
    ] = None,
    prefix: Annotated[
        str | None,
        typer.Option(
            "--prefix", "-p", help="Delete every key under this literal prefix.", show_default=False
        ),
    ] = None,
    pause: Annotated[
        float | None,
        typer.Option(
            "--pause",
            min=0,
            metavar="SECONDS",
            help="With --prefix: rest after each delete transaction of at most 1000 keys "
            "(default on SQLite: the write gate's, 2.5 times as long as it paused the "
            "gateway; elsewhere 0.03).",
            show_default=False,
        ),
    ] = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Delete one key, or every key under --prefix (shows the count and a sample first)."""
    # lazy: kv.keys adds 7 modules to `kv --help`
    from triggerfish_cli.kv import keys

    st, out = begin(ctx, fmt, quiet)
    if (key is None) == (prefix is None):
        raise UsageError("give exactly one of KEY or --prefix")
    provider = st.provider()
    if key is not None:
        if not dry_run:
            keys.get_value(provider, key)  # not found -> exit 3 before asking
            out.confirm(
                f"Delete {key} from {provider.describe()}?", yes=yes, what=f"deleting {key}"
            )
        result = keys.delete_key(provider, key, dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        out.outcome(result, f"{verb} {key}")
        return
    assert prefix is not None
    plan = keys.plan_prefix_delete(provider, prefix)
    summary = {
        "prefix": prefix,
        "matched": plan.count,
        "sample": plan.sample(),
        "deleted": 0,
        "dry_run": dry_run,
    }
    if plan.count == 0:
        out.outcome(summary, f"no keys under {prefix!r}")
        return
    if dry_run or not out.quiet:  # the sample names memory keys above PUBLIC: audited first
        reads = raw_reads(None)
        for sample in plan.sample():
            reads.admit(sample)
        reads.audit(provider, "kv delete --prefix", prefix)
    if dry_run:  # the report is the result: stdout

        def show() -> None:
            out.line(f"would delete {plan.count} key(s) under {prefix!r}, e.g.:")
            for sample in plan.sample():
                out.line(f"  {sample}", wrap=False)

        out.result(summary, show)
        return
    if not out.quiet:  # what the question is about: beside it, on stderr
        out.info(f"{plan.count} key(s) under {prefix!r}, e.g.:")
        for sample in plan.sample():
            out.info(f"  {sample}")
    out.confirm(
        f"Delete {plan.count} key(s) under {prefix!r}?",
        yes=yes,
        what=f"deleting {plan.count} key(s)",
    )
    with out.progress("deleting", total=plan.count) as bar:
        summary["deleted"] = keys.delete_prefix(provider, plan, on_batch=bar.advance, pause=pause)
    out.outcome(summary, f"deleted {summary['deleted']} key(s) under {prefix!r}")


@app.command("clear")
def clear_cmd(
    ctx: typer.Context,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Delete EVERY key in the store. Needs --yes, and typing the store's name on a TTY."""
    # lazy: kv.keys adds 7 modules to `kv --help`
    from triggerfish_cli.kv import keys

    st, out = begin(ctx, fmt, quiet)
    provider = st.provider()
    count = provider.count()
    where = provider.describe()
    if dry_run:
        out.outcome(
            {"store": where, "deleted": 0, "matched": count, "dry_run": True},
            f"would delete all {count} key(s) in {where}",
        )
        return
    if not yes:
        raise RefusedError("clearing the whole store needs --yes")
    out.confirm_by_typing(
        f"This deletes all {count} key(s) in {where}.", where, what="clearing the store"
    )
    deleted = keys.clear_store(provider)
    out.outcome(
        {"store": where, "deleted": deleted, "matched": count, "dry_run": False},
        f"deleted all {deleted} key(s) in {where}",
    )
