"""`triggerfish-admin kv`: inspect and edit the raw key-value store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from triggerfish_cli.cli.context import state
from triggerfish_cli.cli.options import (
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    YesOpt,
    complete_namespace,
    fmt_value,
    sub_app,
)
from triggerfish_cli.errors import InvalidDataError, RefusedError, UsageError

app = sub_app(
    "kv",
    "Inspect and edit the raw key-value store.\n\n"
    "Works on every namespace with exact, case-sensitive prefixes in binary key order. "
    "This is the raw view: it does not apply memory classification.",
)

Key = Annotated[
    str, typer.Argument(help="The exact key, e.g. sessions:<uuid>.", show_default=False)
]


def _check_raw_taint(value: str | None) -> str | None:
    from triggerfish_cli.classification import parse_level

    if value is not None:
        try:
            parse_level(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


RawTaintOpt = Annotated[
    str | None,
    typer.Option(
        "--taint",
        "-t",
        envvar="TRIGGERFISH_TAINT",
        callback=_check_raw_taint,
        metavar="LEVEL",
        show_default=False,
        help="Leave out memory rows above this level (get refuses them). Unset: the raw "
        "view shows every row; memory rows above PUBLIC it shows are audited (keys only).",
    ),
]


def _raw_reads(taint: str | None) -> Any:
    from triggerfish_cli.classification import parse_level
    from triggerfish_cli.kv import RawReads

    return RawReads(parse_level(taint) if taint is not None else None)


@app.command("namespaces")
def namespaces_cmd(
    ctx: typer.Context,
    ages: Annotated[
        bool,
        typer.Option(
            "--ages",
            help=(
                "Add oldest/newest record time and the counts of records of unknown age and "
                "of pending ones (a deadline still ahead) (reads every value)."
            ),
        ),
    ] = False,
    fmt: FormatOpt = None,
) -> None:
    """Every namespace present, with key count and total value bytes."""
    from triggerfish_cli import kv
    from triggerfish_cli.cli.output import Column, human_bytes, text_column

    st = state(ctx)
    out = st.output(fmt_value(fmt))
    rows = kv.namespace_report(st.provider(), ages=ages)
    columns = [
        Column("namespace", "namespace", render=_group_name),
        Column("keys", "keys", "right"),
        Column("bytes", "size", "right", human_bytes),
    ]
    if ages:
        columns += [
            Column("oldest", "oldest"),
            Column("newest", "newest"),
            Column("unknown_age", "age unknown", "right"),
            Column("pending", "pending", "right"),
        ]
    columns.append(text_column("description", "description"))
    total = kv.totals(rows)
    out.rows(
        (row.as_dict(ages) for row in rows),
        columns,
        footer={"namespace": "total", "keys": total.count, "bytes": total.bytes},
        empty="the store is empty",
    )


def _group_name(name: str) -> str:
    from triggerfish_cli import cells

    if name in (cells.NULL_CELL, cells.BLOB_MARK):
        return cells.kind(name).upper()
    return name or '""'


@app.command("list")
def list_cmd(
    ctx: typer.Context,
    prefix: Annotated[
        str | None,
        typer.Argument(
            help="Literal, case-sensitive key prefix (all keys if omitted).", show_default=False
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-N",
            help="A namespace name or prefix, e.g. sessions.",
            show_default=False,
            autocompletion=complete_namespace,
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-l", min=0, help="Show at most N keys (0: all).")
    ] = 0,
    keys_only: Annotated[
        bool, typer.Option("--keys-only", "-k", help="Print keys only, one per line.")
    ] = False,
    taint: RawTaintOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """Keys under a prefix, in binary key order, with their value sizes."""
    from itertools import islice

    from triggerfish_cli import kv, namespaces
    from triggerfish_cli.cli.output import Column, json_text
    from triggerfish_cli.storage.provider import value_size

    st = state(ctx)
    out = st.output(fmt_value(fmt))
    if namespace is not None:
        if prefix is not None:
            raise UsageError("give a PREFIX or --namespace, not both")
        found = namespaces.get(namespace)
        if found is None:
            raise UsageError(
                f"unknown namespace {namespace!r}", hint="see `triggerfish-admin kv namespaces`"
            )
        prefix = found.prefix
    provider = st.provider()
    stop = limit or None
    reads = _raw_reads(taint)
    if keys_only:
        keys = islice(kv.raw_keys(provider.scan_keys(prefix), reads), stop)
        if out.fmt in ("table", "csv"):
            for key in keys:
                out.line(key, wrap=False)
        elif out.fmt == "jsonl":
            for key in keys:
                out.line(json_text(key))
        else:
            out.line(json_text(list(keys)))
    else:
        rows = (
            {"key": key, "namespace": namespaces.group_of(key), "bytes": value_size(value)}
            for key, value in islice(kv.raw_rows(provider.scan(prefix), reads), stop)
        )
        columns = [
            Column("key", "key"),
            Column("bytes", "bytes", "right"),
            Column("namespace", "namespace", wide=True),
        ]
        with kv.flat_memory(provider):
            out.rows(rows, columns, empty="no keys")
    reads.audit(provider, "kv list", prefix or "")


@app.command("get")
def get_cmd(
    ctx: typer.Context,
    key: Key,
    raw: Annotated[
        bool, typer.Option("--raw", "-r", help="Exact stored bytes, no newline added.")
    ] = False,
    taint: RawTaintOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """One value: pretty JSON on a TTY, exact bytes with --raw or when piped.

    --format json (or jsonl, csv) gives {"key", "value"} with the value as stored;
    --raw always gives the exact bytes, whatever the format.
    """
    from triggerfish_cli import kv
    from triggerfish_cli.classification import parse_level

    st = state(ctx)
    level = parse_level(taint) if taint is not None else None
    value = kv.get_value(st.provider(), key, taint=level)
    out = st.output(fmt_value(fmt))
    if raw:
        out.write(value)
    elif out.fmt != "table":
        out.record({"key": key, "value": value})
    elif not out.stdout_is_tty:
        out.write(value)
    else:
        out.line(_pretty(value), wrap=False)


def _pretty(value: str) -> str:
    import json

    try:
        return json.dumps(json.loads(value), ensure_ascii=False, indent=2)
    except ValueError:
        return value


@app.command("set")
def set_cmd(
    ctx: typer.Context,
    key: Key,
    value: Annotated[
        str | None,
        typer.Argument(help="The value; omit it (or give -) to read stdin.", show_default=False),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="Read the value from this file.",
            show_default=False,
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    raw: Annotated[
        bool, typer.Option("--raw", help="Store text that is not JSON (a bare string).")
    ] = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write one value. It must be JSON unless --raw.

    From a file or stdin, one trailing newline is dropped: values never end in one.
    """
    from triggerfish_cli import kv

    st = state(ctx)
    if file is not None and value is not None:
        raise UsageError("give a VALUE or --file, not both")
    if file is not None:
        text = _strip_newline(_read_text(file))
    elif value is None or value == "-":
        if sys.stdin.isatty():
            raise UsageError("no value: give VALUE, --file, or pipe it on stdin")
        text = _strip_newline(sys.stdin.read())
    else:
        text = value
    result = kv.set_value(st.provider(), key, text, raw=raw)
    out = st.output(fmt_value(fmt), quiet or None)
    out.outcome(
        result,
        f"{'replaced' if result['replaced'] else 'set'} {key} ({result['bytes']} bytes)",
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidDataError(f"{path}: not UTF-8 text") from None


def _strip_newline(text: str) -> str:
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


@app.command("delete")
def delete_cmd(
    ctx: typer.Context,
    key: Annotated[
        str | None, typer.Argument(help="The exact key to delete.", show_default=False)
    ] = None,
    prefix: Annotated[
        str | None,
        typer.Option(
            "--prefix", "-p", help="Delete every key under this literal prefix.", show_default=False
        ),
    ] = None,
    pause: Annotated[
        float,
        typer.Option(
            "--pause",
            min=0,
            metavar="SECONDS",
            help="With --prefix: rest between two delete transactions of 1000 keys, so the "
            "gateway's own writes get in.",
        ),
    ] = 0.03,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Delete one key, or every key under --prefix (shows the count and a sample first)."""
    from triggerfish_cli import kv

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    if (key is None) == (prefix is None):
        raise UsageError("give exactly one of KEY or --prefix")
    provider = st.provider()
    if key is not None:
        if not dry_run:
            kv.get_value(provider, key)  # not found -> exit 3 before asking
            out.confirm(
                f"Delete {key} from {provider.describe()}?", yes=yes, what=f"deleting {key}"
            )
        result = kv.delete_key(provider, key, dry_run=dry_run)
        verb = "would delete" if dry_run else "deleted"
        out.outcome(result, f"{verb} {key}")
        return
    assert prefix is not None
    plan = kv.plan_prefix_delete(provider, prefix)
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
    if dry_run:  # the report is the result: stdout
        if out.fmt == "table" and not out.quiet:
            out.line(f"would delete {plan.count} key(s) under {prefix!r}, e.g.:")
            for sample in plan.sample():
                out.line(f"  {sample}", wrap=False)
        else:
            out.outcome(summary, "")
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
        summary["deleted"] = kv.delete_prefix(provider, plan, on_batch=bar.advance, pause=pause)
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
    from triggerfish_cli import kv

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
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
    deleted = kv.clear_store(provider)
    out.outcome(
        {"store": where, "deleted": deleted, "matched": count, "dry_run": False},
        f"deleted all {deleted} key(s) in {where}",
    )


@app.command("export")
def export_cmd(
    ctx: typer.Context,
    prefix: Annotated[
        str | None, typer.Argument(help="Only keys under this literal prefix.", show_default=False)
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write to this file (atomically) instead of stdout.",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    taint: RawTaintOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """Every key and value as JSON Lines: {"key": ..., "value": ...}, value exactly as stored.

    --format json gives one JSON list of the same objects, csv a key,value table
    (table, the default, means JSON Lines here).
    """
    from triggerfish_cli import kv
    from triggerfish_cli.cli.output import Column, Output
    from triggerfish_cli.fileio import atomic_writer

    st = state(ctx)
    chosen = fmt_value(fmt) or st.fmt
    provider = st.provider()
    reads = _raw_reads(taint)

    notes: list[str] = []

    def write(handle: IO[str]) -> None:
        if chosen in ("table", "jsonl"):
            for line in kv.export_lines(provider, prefix, reads, notes):
                handle.write(line)
            return
        out = Output(chosen, stdout=handle)
        rows = (
            {"key": k, "value": v}
            for k, v in kv.noting(kv.raw_rows(provider.scan(prefix, batch_size=2000), reads), notes)
        )
        out.rows(rows, [Column("key", "key"), Column("value", "value")])

    if output is None:
        with kv.flat_memory(provider):
            write(sys.stdout)
    else:
        with (
            kv.flat_memory(provider),
            atomic_writer(output, mode=EXPORT_MODE, keep_mode=False) as handle,
        ):
            write(handle)
    st.output(None).warn_all(notes)
    reads.audit(provider, "kv export", prefix or "")


#: An export holds store data: owner only, like the store and its backups.
EXPORT_MODE = 0o600


@app.command("import")
def import_cmd(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            help="A JSON Lines file from `kv export`, or - for stdin.", metavar="FILE|-"
        ),
    ],
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Import JSON Lines, all or nothing: a bad line imports nothing and is named."""
    from triggerfish_cli import kv

    st = state(ctx)
    out = st.output(fmt_value(fmt), quiet or None)
    if source == "-":
        items = kv.parse_import(sys.stdin, "stdin")
    else:
        path = Path(source)
        if path.is_dir():
            raise UsageError(f"{source}: is a directory, not a JSON Lines file")
        try:
            with path.open(encoding="utf-8") as handle:
                items = kv.parse_import(handle, source)
        except FileNotFoundError:
            from triggerfish_cli.errors import NotFoundError

            raise NotFoundError(f"{source}: no such file") from None
        except UnicodeDecodeError:
            raise InvalidDataError(f"{source}: not UTF-8 text") from None
    result = kv.import_items(st.provider(), items, dry_run=dry_run, origin=source).as_dict()
    verb = "would import" if dry_run else "imported"
    out.outcome(
        result,
        f"{verb} {result['lines']} key(s): {result['new']} new, "
        f"{result['replaced']} replaced, {result['unchanged']} unchanged",
    )
