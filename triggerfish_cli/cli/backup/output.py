"""How the backup commands show their results (tables and documents)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from triggerfish_cli.cli.output import Output
from triggerfish_cli.cli.output.text import Column, human_bytes, safe, text_column

if TYPE_CHECKING:
    from triggerfish_cli.backup.dest import Entry
    from triggerfish_cli.backup.prune import PrunePlan
    from triggerfish_cli.backup.verify import Verified


def _with_store(row: dict[str, Any], entry: Entry) -> dict[str, Any]:
    """The table shows each backup's store by a short name (JSON has the whole source)."""
    # lazy: backup.stores adds 3 modules to `backup --help`
    from triggerfish_cli.backup.stores import label

    shown = {**row, "store": label(entry.manifest)}
    if entry.manifest is not None and entry.manifest.encrypted and row.get("kind"):
        shown["kind"] = f"{row['kind']}, age"  # encrypted: its keys unknown without the key
    return shown


def show_entries(out: Output, entries: Sequence[Entry], where: str) -> None:
    columns = [
        Column("created", "created"),
        Column("store", "store"),
        Column("name", "name", essential=True),
        Column("kind", "kind"),
        Column("size", "size", "right", render=human_bytes),
        Column("keys", "keys", "right"),
        text_column("label", "label"),
        Column("verified", "verified"),
        Column("max_taint", "partial", render=_partial),
        text_column("error", "error", essential=True),
    ]
    out.result_rows(
        (entry.as_dict() for entry in entries),
        columns,
        lambda: out.rows(
            (_with_store(entry.as_dict(), entry) for entry in entries),
            columns,
            empty=f"no backups in {where}",
            gives_way=("label", "max_taint", "keys", "size", "kind", "store", "created"),
        ),
        always=True,
    )


def _partial(max_taint: Any) -> str:
    return f"<= {max_taint}" if max_taint else ""


def show_verified(out: Output, results: Sequence[Verified]) -> None:
    out.result_rows(
        (result.as_dict() for result in results), [], lambda: _verified_lines(out, results)
    )


def _verified_lines(out: Output, results: Sequence[Verified]) -> None:
    # lazy: backup.stores adds 3 modules to `backup --help`
    from triggerfish_cli.backup.stores import groups, label

    stores = groups(result.manifest for result in results if result.manifest is not None)
    heading = len(stores) > 1  # several stores' backups: a heading before each store's
    group_of = {id(m): key for key, ms in stores.items() for m in ms}
    shown: str | None = None
    for result in results:
        group = group_of.get(id(result.manifest), "") if result.manifest else ""
        if heading and group != shown:
            shown = group
            where = result.manifest.source if result.manifest else "unreadable"
            out.line(f"store {label(result.manifest) or '?'} ({where}):")
        verdict = "ok" if result.ok else "FAILED"
        if result.sealed and result.ok:
            verdict = "ok outside the encryption"
        out.line(f"{result.name}: {verdict}")
        for line in result.checks:
            out.line(f"  ok: {line}")
        for line in result.failures:
            out.line(f"  FAILED: {line}")
        if result.sealed and result.ok:
            out.line(
                "  contents not checked: it is encrypted and no --identity was given "
                "(recorded as keyless for backup list and status --check)"
            )


def show_plan(out: Output, plan: PrunePlan, *, dry_run: bool) -> None:
    document = plan.as_dict()
    document["dry_run"] = dry_run

    def show() -> None:
        out.rows(
            [
                _with_store(row, decision.entry)
                for row, decision in zip(document["backups"], plan.decisions, strict=True)
            ],
            [
                Column("created", "created"),
                Column("store", "store"),
                Column("name", "name", essential=True),
                Column("verified", "verified"),
                Column("action", "action", essential=True),
                text_column("reasons", "kept by", essential=True),
            ],
            empty="no backups",
            gives_way=("store", "created", "verified"),
        )
        if not out.quiet:
            verb = "would delete" if dry_run else "deleted"
            out.line(f"{verb} {document['delete']} backup(s), kept {document['keep']}")

    out.result(document, show, always=dry_run)  # -q: nothing on success (cron)


def show_restore(out: Output, document: dict[str, Any]) -> None:
    lines = _undo_lines if "put_back" in document else _restore_lines
    out.result(document, lambda: lines(out, document))


def _undo_lines(out: Output, document: dict[str, Any]) -> None:
    """``--undo``: which file is put back, and what the store it replaces is kept as."""
    dry_run = document.get("dry_run")
    verb = "would put" if dry_run else "put"
    out.line(f"{verb} back {document['put_back']} as {document['target']}")
    if document.get("kept"):
        kept = "would be kept" if dry_run else "is kept"
        out.line(f"the current store {kept} as {document['kept']}")


def _restore_lines(out: Output, document: dict[str, Any]) -> None:
    for line in document.get("checks", []):
        out.line(f"ok: {line}")
    prefix = "would restore" if document.get("dry_run") else "restored"
    backup = document.get("backup")
    if document.get("mode"):
        partial = (
            f" (partial: nothing above {document.get('max_taint')})"
            if document.get("partial")
            else ""
        )
        if document.get("include"):
            partial += f" under {', '.join(document['include'])}"
        out.line(
            f"{prefix} {document.get('keys')} key(s) of {backup or 'the backup'}{partial} "
            f"({document.get('created')}) into {document['target']} ({document['mode']}): "
            f"{document.get('written', 0)} written, {document.get('deleted', 0)} deleted"
        )
        for space, counts in (document.get("namespaces") or {}).items():
            out.line(
                f"  {safe(space)}: {counts['write']} to write"
                + (f", {counts['delete']} to delete" if counts["delete"] else "")
                + (f" ({counts['in_target']} in the store)" if counts["in_target"] else "")
            )
    elif backup:
        out.line(f"{prefix} {backup} ({document.get('created')}) as {document['target']}")
    else:
        out.line(f"{prefix} {document['target']}")
    if document.get("kept"):
        out.line(f"the replaced store is kept as {document['kept']}")
    for note in document.get("notes", []):
        out.info(f"note: {note}")
