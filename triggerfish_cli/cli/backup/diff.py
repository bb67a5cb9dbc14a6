"""`backup diff`: choose the two sides, compare them, show the counts (and keys)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggerfish_cli.cli.backup.common import app
from triggerfish_cli.cli.backup.options import (
    EndpointOpt,
    FromOpt,
    IdentityOpt,
    ScratchOpt,
    identities,
    this_store,
)
from triggerfish_cli.cli.backup.selection import pick
from triggerfish_cli.cli.context import AppState
from triggerfish_cli.cli.kv.common import RawTaintOpt
from triggerfish_cli.cli.options import (
    FormatOpt,
    QuietOpt,
    begin,
)
from triggerfish_cli.cli.output.text import Column, safe
from triggerfish_cli.errors import InvalidDataError, UsageError
from triggerfish_cli.storage.identity import read_id

if TYPE_CHECKING:
    from triggerfish_cli.backup.diff import Diff
    from triggerfish_cli.cli.output import Output

#: The word that names the live store as a side (as `config diff` names the file on disk).
LIVE = "current"
MARKS = {"added": "+", "removed": "-", "changed": "M"}


def sides(a: str | None, b: str | None, latest: bool) -> tuple[str | None, str]:
    """(A, B): with --latest, A is this store's newest backup and the one argument is B."""
    if latest:
        if b is not None:
            raise UsageError("--latest is A: give at most one more side (B)")
        return None, a or LIVE
    if a is None:
        raise UsageError("which backups? give A (and B), or --latest")
    return a, b or LIVE


def _rows(
    st: AppState,
    spec: str | None,
    latest: bool,
    where: tuple[str | None, str | None],
    stack: contextlib.ExitStack,
    scratch: Path | None,
    identities: Any = None,
) -> tuple[Any, Iterator[tuple[str, str]]]:
    """One side and its rows in key order; what they need stays open in ``stack``."""
    # lazy: backup.dest and backup.diff add 33 modules to `backup --help`
    from triggerfish_cli.backup.dest import temp_dir
    from triggerfish_cli.backup.diff import Side, archive_rows, backup_side

    if spec == LIVE and not latest:
        provider = st.provider()
        side = Side("live", provider.describe(), store_id=read_id(provider))
        return side, iter(provider.snapshot_scan(batch_size=5000))
    source, endpoint_url = where
    store = this_store(st) if latest else None
    dest, name = pick(spec, latest, source, endpoint_url, store)
    entry = dest.entry(name)
    if entry.manifest is None:
        raise InvalidDataError(entry.error or f"{name}: not a backup")
    work = stack.enter_context(temp_dir(scratch or dest.scratch_dir(), "diff"))
    path = stack.enter_context(dest.local_copy(name, work))
    manifest, rows = stack.enter_context(archive_rows(path, name, work, identities))
    return backup_side(name, manifest), rows


def run_diff(
    st: AppState,
    out: Output,
    spec: tuple[str | None, str | None, bool],
    where: tuple[str | None, str | None],
    *,
    keys: bool,
    taint: str | None,
    exit_code: bool,
    scratch: Path | None,
    identities: Any = None,
) -> bool:
    """Compare the two sides and show the result; True when they differ."""
    # lazy: backup.diff and kv.keys add 36 modules to `backup --help`
    from triggerfish_cli.backup.diff import Diff, compare
    from triggerfish_cli.classification import parse_level
    from triggerfish_cli.kv.keys import RawReads

    a, b = sides(*spec)
    latest = spec[2]
    level = parse_level(taint) if taint is not None else None
    reads = RawReads(level)
    with contextlib.ExitStack() as stack:
        side_a, rows_a = _rows(st, a, latest, where, stack, scratch, identities)
        side_b, rows_b = _rows(st, b, False, where, stack, scratch, identities)
        found = Diff(side_a, side_b, level, keys={k: [] for k in MARKS} if keys else None)
        compare(rows_a, rows_b, found, admit=reads.admit)
    if reads.count:  # memory keys above PUBLIC about to be named: audited first
        reads.audit(st.provider(), "backup diff", f"{side_a.name} {side_b.name}")
    if not (exit_code and out.quiet):
        show_diff(out, found)
    return not found.identical


def show_diff(out: Output, found: Diff) -> None:
    document = found.as_dict()
    out.result(document, lambda: _diff_lines(out, found, document))


def _diff_lines(out: Output, found: Diff, document: dict[str, Any]) -> None:
    out.line(f"from {found.a.describe()}")
    out.line(f"to   {found.b.describe()}")
    if found.taint is not None:
        out.line(f"memory rows above {found.taint.name} left out (--taint)")
    rows = [{"namespace": name, **counts} for name, counts in document["namespaces"].items()]
    columns = [
        Column("namespace", "namespace", essential=True),
        Column("added", "added", "right", essential=True),
        Column("removed", "removed", "right", essential=True),
        Column("changed", "changed", "right", essential=True),
    ]
    if rows:
        out.rows(rows, columns)
    totals = document["totals"]
    verdict = "identical" if found.identical else "differ"
    out.line(
        f"{verdict}: {totals['added']} added, {totals['removed']} removed, "
        f"{totals['changed']} changed"
    )
    if found.own_audit:
        out.line(
            f"left out: {found.own_audit} audit record(s) of triggerfish-admin's own actions "
            "(audit:*:admin_*)"
        )
    if found.keys is not None:
        listed = sorted((key, kind) for kind, keys in found.keys.items() for key in keys)
        for key, kind in listed:
            out.line(f"{MARKS[kind]} {safe(key)}", wrap=False)


@app.command("diff")
def diff_cmd(
    ctx: typer.Context,
    a: Annotated[
        str | None,
        typer.Argument(
            metavar="[A]",
            help="From: a backup file, the name of one in --from, or `current` (the live "
            "store). With --latest this is B.",
            show_default=False,
        ),
    ] = None,
    b: Annotated[
        str | None,
        typer.Argument(
            metavar="[B]",
            help="To: a backup as A, or `current`: the live store (default).",
            show_default=False,
        ),
    ] = None,
    latest: Annotated[
        bool, typer.Option("--latest", help="A is the newest backup of this store in --from.")
    ] = False,
    source: FromOpt = None,
    endpoint_url: EndpointOpt = None,
    keys: Annotated[
        bool,
        typer.Option(
            "--keys",
            help="List the keys too: + added, - removed, M changed (control characters "
            "escaped). Naming memory keys above PUBLIC writes an audit record, as kv list.",
        ),
    ] = False,
    taint: RawTaintOpt = None,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            help="Exit 1 when they differ, 0 when identical (as git diff --exit-code); "
            "with -q print nothing",
        ),
    ] = False,
    scratch: ScratchOpt = None,
    identity: IdentityOpt = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Keys added, removed and changed per namespace between two backups, or a backup
    and the live store (as restic diff); values are compared, never shown.

    Logical and physical backups alike; each backup is verified first (exit 5
    when damaged). Exit 0 whether or not they differ, unless --exit-code.
    --format json gives {"from", "to", "identical", "namespaces": {NS: {"added",
    "removed", "changed"}}, "totals"} and with --keys "keys": {"added": [...], ...}.
    With --taint, memory rows above it are left out (neither counted nor named).
    An encrypted backup needs --identity. The tool's own audit records
    (audit:*:admin_*, such as the one backup create writes after its
    snapshot) are left out, only counted (own_audit_left_out).
    """
    st, out = begin(ctx, fmt, quiet)
    differ = run_diff(
        st,
        out,
        (a, b, latest),
        (source, endpoint_url),
        keys=keys,
        taint=taint,
        exit_code=exit_code,
        scratch=scratch,
        identities=identities(identity),
    )
    if exit_code and differ:
        raise typer.Exit(1)
