"""`kv namespaces` and `kv list`: what the store holds, by namespace and by key."""

from __future__ import annotations

from itertools import islice
from typing import Annotated

import typer

from triggerfish_cli import cells
from triggerfish_cli.cli.kv.common import RawTaintOpt, app, raw_reads
from triggerfish_cli.cli.options import FormatOpt, begin, complete_namespace, taint_level
from triggerfish_cli.errors import UsageError
from triggerfish_cli.storage.provider import value_size


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
    taint: RawTaintOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """Every namespace present, with key count and total value bytes.

    With --taint (or TRIGGERFISH_TAINT), memory rows above it are neither
    counted nor sized.
    """
    # lazy: cli.output and kv.keys add 16 modules (csv) to `kv --help`
    from triggerfish_cli.cli.output.text import Column, human_bytes, text_column
    from triggerfish_cli.kv import keys

    st, out = begin(ctx, fmt)
    level = taint_level(taint) if taint is not None else None
    rows = keys.namespace_report(st.provider(), ages=ages, taint=level)
    columns = [
        Column("namespace", "namespace", render=_group_name, essential=True),
        Column("keys", "keys", "right", essential=True),
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
    total = keys.totals(rows)
    out.rows(
        (row.as_dict(ages) for row in rows),
        columns,
        footer={"namespace": "total", "keys": total.count, "bytes": total.bytes},
        empty="the store is empty",
    )
    if level is not None:
        out.info(f"memory rows above {level.name} left out (--taint)")


def _group_name(name: str) -> str:
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
    # lazy: namespaces, cli.output, kv.keys and kv.transfer add 17 modules to `kv --help`
    from triggerfish_cli import namespaces
    from triggerfish_cli.cli.output.text import Column
    from triggerfish_cli.kv import keys, transfer

    st, out = begin(ctx, fmt)
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
    reads = raw_reads(taint)
    if keys_only:
        out.strings(islice(keys.raw_keys(provider.scan_keys(prefix), reads), stop))
    else:
        rows = (
            {"key": key, "namespace": namespaces.group_of(key), "bytes": value_size(value)}
            for key, value in islice(keys.raw_rows(provider.scan(prefix), reads), stop)
        )
        columns = [
            Column("key", "key", essential=True),
            Column("bytes", "bytes", "right"),
            Column("namespace", "namespace", wide=True),
        ]
        with transfer.flat_memory(provider):
            out.rows(rows, columns, empty="no keys")
    reads.audit(provider, "kv list", prefix or "")
