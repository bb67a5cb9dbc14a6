"""`triggerfish-admin migrate`: move a store between backends, verified and resumable."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from triggerfish_cli.cli.options import DryRunOpt, FormatOpt, QuietOpt, YesOpt, begin

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
    # lazy: locations, migrate.planning and migrate.run add 20 modules to `migrate --help`
    from triggerfish_cli.locations import parse_location
    from triggerfish_cli.migrate.planning import prepare
    from triggerfish_cli.migrate.run import Migration, check_verified

    _, out = begin(ctx, fmt, quiet)
    source_config = parse_location(source, "from", endpoint_url=endpoint_url)
    target_config = parse_location(target, "to", endpoint_url=endpoint_url)
    prepared = prepare(source_config, target_config, merge=merge)
    ctx.call_on_close(prepared.close)
    if dry_run:
        prepared.close_target()
        _report_plan(out, prepared)
        return
    if prepared.notice is not None:
        out.info(prepared.notice)
    if prepared.question is not None:
        out.confirm(prepared.question, yes=yes, what="merging into a non-empty store")
    run = Migration.of(prepared, batch_size=batch_size)
    try:
        with out.progress("copying", total=prepared.plan.to_copy) as bar:
            run.copy(bar.advance)
    except KeyboardInterrupt:
        out.info(run.stopped)
        raise
    with out.progress("verifying", total=run.verify_reads or None) as bar:
        run.verify(bar.advance)
    result = run.finish()
    _report_result(out, result)
    check_verified(result)


def _report_plan(out: Any, prepared: Any) -> None:
    out.result(prepared.as_dict(), lambda: _plan_lines(out, prepared.plan))


def _plan_lines(out: Any, plan: Any) -> None:
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
    # lazy: cli.output adds 9 modules (csv) to `migrate --help`
    from triggerfish_cli.cli.output.text import Column

    document = result.as_dict()

    def show() -> None:
        out.rows(
            document["namespaces"],
            [
                Column("namespace", "namespace", essential=True),
                Column("source_keys", "source", "right"),
                Column("target_keys", "target", "right"),
                Column("missing", "missing", "right"),
                Column("different", "diff", "right"),
                Column("extra", "extra", "right"),
                Column("source_checksum", "checksum", render=lambda v: str(v)[:8]),
                Column("ok", "ok", render=lambda v: "yes" if v else "NO", essential=True),
            ],
            empty="the source is empty",
        )
        verdict = "verified" if result.verified else "NOT verified"
        out.line(
            f"copied {result.copied} key(s) from {result.plan.source} to "
            f"{result.plan.target} in {result.seconds:.1f} s: {verdict}"
        )

    out.result(document, show)  # -q: nothing on success (the exit code says it)
    for note in result.notes():
        out.info(f"note: {note}")
