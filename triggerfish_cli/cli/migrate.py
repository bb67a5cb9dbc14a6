"""`triggerfish-admin migrate`: move a store between backends, verified and resumable."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from triggerfish_cli.cli.context import state
from triggerfish_cli.cli.options import DryRunOpt, FormatOpt, QuietOpt, YesOpt, fmt_value
from triggerfish_cli.errors import InvalidDataError, TriggerfishError

HELP = (
    "Move a store to another backend, verified and resumable.\n\n"
    "SOURCE and TARGET are each a SQLite path, a postgresql:// DSN (add ?schema=NAME; "
    "never a password: use PGPASSWORD or ~/.pgpass), an s3://bucket/prefix URL "
    "(credentials from the AWS environment; the endpoint from --endpoint-url or "
    "AWS_ENDPOINT_URL), or a YAML file "
    "whose storage: section describes the store (needed for S3-compatible endpoints).\n\n"
    "Keys stream in key order in batches; the target records its progress, so after "
    "an interruption the same command continues where it stopped. Afterwards both "
    "stores are compared per namespace (counts, checksums, values). The source is "
    "opened read-only. A non-empty target is refused unless --merge. "
    "The memory search index is not copied: a SQLite target's (the gateway's own) is rebuilt "
    "from the copied memory: keys once the copy verified."
)

app = typer.Typer(
    name="migrate",
    help=HELP,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command("migrate", help=HELP)
def migrate_cmd(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Option(
            "--from",
            metavar="SOURCE",
            help="The store to copy from (never modified).",
            show_default=False,
        ),
    ],
    target: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="TARGET",
            help="The store to copy into (created if missing).",
            show_default=False,
        ),
    ],
    merge: Annotated[
        bool,
        typer.Option("--merge", help="Copy into a non-empty target; source values win."),
    ] = False,
    endpoint_url: Annotated[
        str | None,
        typer.Option(
            "--endpoint-url",
            metavar="URL",
            help="S3-compatible endpoint for s3:// locations "
            "(default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS).",
            show_default=False,
        ),
    ] = None,
    batch_size: Annotated[
        int,
        typer.Option("--batch-size", min=1, max=100_000, help="Keys per batch (one write)."),
    ] = 5000,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    from triggerfish_cli import locations, migrate

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    source_config = locations.parse_location(source, "from", endpoint_url=endpoint_url)
    target_config = locations.parse_location(target, "to", endpoint_url=endpoint_url)
    src = locations.open_source(source_config)
    ctx.call_on_close(src.close)
    dst = locations.open_target(target_config, create=False)
    plan = migrate.plan(src, dst, merge=merge, target_config=target_config)
    if dry_run:
        if dst is not None:
            dst.close()
        _report_plan(out, plan)
        return
    if dst is None:  # checked and refused nothing: now create it
        dst = locations.open_target(target_config, create=True)
        assert dst is not None
        plan.target = dst.describe()
    ctx.call_on_close(dst.close)
    if plan.target_state == "finishing":
        out.info(
            f"finishing the migration from {plan.source}: copied and verified before it "
            "was stopped"
        )
    if plan.target_state == "resumable" and plan.resume is not None:
        out.info(
            f"resuming the migration from {plan.source}: {plan.resume.copied} key(s) "
            f"copied before, {plan.to_copy} to go"
        )
    if plan.target_state == "non-empty":
        out.confirm(
            f"Merge {plan.source_keys} key(s) into the non-empty {plan.target}? "
            "Source values replace target values.",
            yes=yes,
            what="merging into a non-empty store",
        )
    if plan.merge and plan.target_state != "finishing":  # finishing copies nothing
        # rows merged into a store that may hold memories: no write-down
        from triggerfish_cli.memory.keys import PREFIX
        from triggerfish_cli.memory.records import refuse_write_down

        refuse_write_down(src.scan(PREFIX, batch_size=2000), dst, plan.source)
    run = migrate.Migration(src, dst, plan, batch_size=batch_size)
    copied = [0]
    try:
        with out.progress("copying", total=plan.to_copy) as bar:

            def advance(count: int) -> None:
                copied[0] += count
                bar.advance(count)

            run.copy(advance)
    except TriggerfishError as exc:  # one line: what stopped it, and how to go on
        if isinstance(exc, InvalidDataError):  # a row the target cannot hold: named, no retry
            raise
        exc.hint = "; ".join(
            part
            for part in (
                exc.hint,
                f"stopped after copying {copied[0]} key(s) in this run; "
                "run the same command again to continue where it stopped",
            )
            if part
        )
        raise
    except KeyboardInterrupt:
        out.info(
            f"stopped after copying {copied[0]} key(s) in this run; "
            "run the same command again to continue where it stopped"
        )
        raise
    with out.progress("verifying", total=run.verify_reads or None) as bar:
        run.verify(bar.advance)
    result = run.finish()
    _report_result(out, result)
    migrate.check_verified(result)


def _report_plan(out: Any, plan: Any) -> None:
    document = {**plan.as_dict(), "dry_run": True}
    if out.fmt != "table":
        out.record(document)
        return
    if out.quiet:
        return
    state = {
        "missing": "does not exist yet: it would be created",
        "empty": "is empty",
        "non-empty": "holds keys: they would be merged (source values win)",
        "resumable": f"holds an unfinished migration from this source, after key "
        f"{plan.resume.last_key!r}"
        if plan.resume
        else "",
        "finishing": "holds a copied and verified migration from this source that was "
        "stopped before it finished: it would be finished (index, audit record)",
    }[plan.target_state]
    out.line(f"source {plan.source}: {plan.source_keys} key(s)")
    out.line(f"target {plan.target} {state}")
    if plan.target_state == "finishing":
        out.line("would finish it: index, audit record, progress record removed (dry run)")
        return
    out.line(f"would copy {plan.to_copy} key(s), then verify every namespace (dry run)")


def _report_result(out: Any, result: Any) -> None:
    from triggerfish_cli.cli.output import Column

    document = result.as_dict()
    if out.fmt != "table":
        out.record(document)
    elif out.quiet:  # -q: nothing on success (the exit code says it); a failure still errs
        pass
    else:
        out.rows(
            document["namespaces"],
            [
                Column("namespace", "namespace"),
                Column("source_keys", "source", "right"),
                Column("target_keys", "target", "right"),
                Column("missing", "missing", "right"),
                Column("different", "diff", "right"),
                Column("extra", "extra", "right"),
                Column("source_checksum", "checksum", render=lambda v: str(v)[:8]),
                Column("ok", "ok", render=lambda v: "yes" if v else "NO"),
            ],
            empty="the source is empty",
        )
        if not out.quiet:
            verdict = "verified" if result.verified else "NOT verified"
            out.line(
                f"copied {result.copied} key(s) from {result.plan.source} to "
                f"{result.plan.target} in {result.seconds:.1f} s: {verdict}"
            )
    for note in result.notes():
        out.info(f"note: {note}")
