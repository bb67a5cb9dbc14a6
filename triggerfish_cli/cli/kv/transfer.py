"""`kv export` and `kv import`: every key and value, out to a file and back."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from triggerfish_cli.cli.context import AppState, state
from triggerfish_cli.cli.kv.common import RawTaintOpt, app, check_raw_taint, raw_reads
from triggerfish_cli.cli.options import (
    DryRunOpt,
    FormatOpt,
    QuietOpt,
    begin,
    complete_level,
    fmt_value,
    taint_level,
)
from triggerfish_cli.errors import (
    InvalidDataError,
    MissingStoreError,
    NotFoundError,
    RefusedError,
    UsageError,
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
            help="Write to this file (atomically) instead of stdout; a name ending in "
            ".json or .csv picks that format when --format is not given.",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    taint: RawTaintOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """Every key and value as JSON Lines: {"key": ..., "value": ...}, value exactly as stored.

    --format json gives one JSON list of the same objects, csv a key,value table
    (table, the default, means JSON Lines here). `kv import` reads all three back
    (a whole store: both at --taint RESTRICTED).
    """
    # lazy: cli.output adds 14 modules to `kv --help`; kv.transfer to `kv get`
    from triggerfish_cli.cli.output import Output
    from triggerfish_cli.cli.output.text import Column
    from triggerfish_cli.fileio import atomic_writer
    from triggerfish_cli.kv import keys, transfer

    st = state(ctx)
    chosen = fmt_value(fmt) or st.fmt
    if fmt is None and chosen == "table" and output is not None:
        chosen = SUFFIX_FORMATS.get(output.suffix.lower(), chosen)
    provider = st.provider()
    reads = raw_reads(taint)

    notes: list[str] = []

    def write(handle: IO[str]) -> None:
        if chosen in ("table", "jsonl"):
            for line in transfer.export_lines(provider, prefix, reads, notes):
                handle.write(line)
            return
        out = Output(chosen, stdout=handle)
        rows = (
            {"key": k, "value": v}
            for k, v in transfer.noting(
                keys.raw_rows(provider.scan(prefix, batch_size=2000), reads), notes
            )
        )
        columns = [Column("key", "key", essential=True), Column("value", "value", essential=True)]
        out.rows(rows, columns)

    if output is None:
        with transfer.flat_memory(provider):
            write(sys.stdout)
    else:
        with (
            transfer.flat_memory(provider),
            atomic_writer(output, mode=EXPORT_MODE, keep_mode=False) as handle,
        ):
            write(handle)
    st.output(None).warn_all(notes)
    reads.audit(provider, "kv export", prefix or "")


#: An export holds store data: owner only, like the store and its backups.
EXPORT_MODE = 0o600
#: The format an --output file's name asks for, when no --format is given.
SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


ImportTaintOpt = Annotated[
    str,
    typer.Option(
        "--taint",
        "-t",
        envvar="TRIGGERFISH_TAINT",
        callback=check_raw_taint,
        autocompletion=complete_level,
        metavar="LEVEL",
        help="Import memory rows at this level and below (the level in the key and the one "
        "its record states); a row above it refuses the whole import (exit 4). "
        "RESTRICTED takes a whole store's export.",
    ),
]
CreateOpt = Annotated[
    bool,
    typer.Option(
        "--create",
        help="Make a new store (SQLite: the gateway's tables, mode 0600, the memory search "
        "index built) when it does not exist. Like `restic init`, refused (exit 4, nothing "
        "written) when the store already holds keys: import into it without --create.",
    ),
]


@app.command("import")
def import_cmd(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            help="A file from `kv export` (JSON Lines, a JSON list, or CSV/TSV with a "
            "key,value header: told apart by their first line), or - for stdin.",
            metavar="FILE|-",
        ),
    ],
    create: CreateOpt = False,
    taint: ImportTaintOpt = "PUBLIC",
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Import an export, all or nothing: a bad line or row imports nothing and is named.

    Memory rows are written as `memory save` writes them (with the memory search
    index in step), at --taint and below only. Values that are not UTF-8 text
    come back only from JSON Lines or JSON ({"$bytes": <base64>, "type": ...});
    a CSV cell is always text.
    """
    # lazy: kv.transfer is not loaded by `kv get --raw`
    from triggerfish_cli.kv import transfer

    st, out = begin(ctx, fmt, quiet)
    origin = "stdin" if source == "-" else source
    if create:  # checked before the store is made
        checked = transfer.check_import(read_source(source), taint_level(taint), origin)
        provider, fresh = import_target(st, create=True, dry_run=dry_run)
    else:  # a missing store is named before stdin is read
        provider, fresh = import_target(st, create=False, dry_run=dry_run)
        checked = transfer.check_import(read_source(source), taint_level(taint), origin)
    result = transfer.import_items(provider, checked, dry_run=dry_run, fresh=fresh).as_dict()
    verb = "would import" if dry_run else "imported"
    out.outcome(
        result,
        f"{verb} {result['lines']} key(s): {result['new']} new, "
        f"{result['replaced']} replaced, {result['unchanged']} unchanged"
        + (f" ({result['memories']} memory row(s))" if result["memories"] else ""),
    )


def read_source(source: str) -> dict[str, str]:
    """The items of an import file (or stdin), read and checked whole."""
    # lazy: kv.transfer is not loaded by `kv get --raw`
    from triggerfish_cli.kv import transfer

    if source == "-":
        try:
            return transfer.read_import(sys.stdin.buffer, "stdin")[1]
        except UnicodeDecodeError:
            raise InvalidDataError("stdin: not UTF-8 text") from None
    path = Path(source)
    if path.is_dir():
        raise UsageError(f"{source}: is a directory, not a file from `kv export`")
    try:
        with path.open("rb") as handle:
            return transfer.read_import(handle, source)[1]
    except FileNotFoundError:
        raise NotFoundError(f"{source}: no such file") from None
    except UnicodeDecodeError:
        raise InvalidDataError(f"{source}: not UTF-8 text") from None


def import_target(st: AppState, *, create: bool, dry_run: bool) -> tuple[Any, bool]:
    """The store to import into (None: one --create would make, in a dry run), and
    whether it is new (made by --create, or an empty one it takes)."""
    try:
        provider = st.provider(create=create and not dry_run)
    except MissingStoreError as exc:
        if create:  # a dry run: nothing is made
            return None, True
        raise MissingStoreError(
            exc.message, hint="make a new store with `triggerfish-admin kv import --create`"
        ) from None
    if create:
        keys = provider.count()
        if keys:
            raise RefusedError(
                f"{provider.describe()} already holds {keys} key(s): --create makes a new "
                "store; nothing was written",
                hint="import into it without --create, or name a new store with --db",
            )
    return provider, create
