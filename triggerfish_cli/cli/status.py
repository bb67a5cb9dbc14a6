"""`triggerfish-admin status`: which store am I on, and who else is on it."""

from __future__ import annotations

from typing import Any

import typer

from triggerfish_cli.cli.context import state
from triggerfish_cli.cli.options import FormatOpt, fmt_value
from triggerfish_cli.cli.output import Column, Output, human_bytes

HELP = (
    "Which store am I on, and who else is on it. Reads only.\n\n"
    "The backend and where the store is (path, DSN or bucket; never a password), how it "
    "was chosen (--db, an environment variable, the storage: section, or the gateway's "
    "default: TRIGGERFISH_DATA_DIR, Docker's /data, ~/.triggerfish), whether it exists, "
    "its id; on SQLite its size, WAL size, journal mode and the live writers (pid, "
    "command, user, whether we may pause them); the gateway daemon (<base>/daemon.json); "
    "the last sweep and backup recorded in the store, the newest backup of this store in "
    "the default destination, memory index drift (counts) and the config versions held. "
    "--format json for monitoring. Exit 7 when the store does not exist."
)

app = typer.Typer(
    name="status",
    help=HELP,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command("status", help=HELP)
def status_cmd(ctx: typer.Context, fmt: FormatOpt = None) -> None:
    from triggerfish_cli.errors import MissingStoreError
    from triggerfish_cli.status import collect

    st = state(ctx)
    out = st.output(fmt_value(fmt))
    report = collect(st.storage_config(), st.provider)
    if report.exists or out.fmt != "table":  # a monitor gets the report of a missing store too
        show(out, report.as_dict())
    if not report.exists:
        raise report.missing or MissingStoreError(f"no Triggerfish store at {report.location}")


def show(out: Output, document: dict[str, Any]) -> None:
    if out.fmt != "table":
        out.record(document)
        return
    rows = _rows(document)
    out.record(rows, [Column(name, name) for name in rows])


def _rows(document: dict[str, Any]) -> dict[str, str]:
    """The report as one line per item, for the table."""
    rows = {
        "store": f"{document['backend']} {document['location']}",
        "chosen": document["chosen_by"] or "",
        "exists": "yes" if document["exists"] else f"NO: {document['error']}",
    }
    if not document["exists"]:
        rows["daemon"] = _daemon(document["daemon"])
        return rows
    rows["id"] = document["store_id"] or "none yet (recorded by the first command that writes)"
    rows["keys"] = str(document["keys"])
    files = document["sqlite"]
    if files:
        read_only = ", read-only here" if document["read_only"] else ""
        rows["size"] = (
            f"{human_bytes(files['size'])}, WAL {human_bytes(files['wal_size'])}, "
            f"journal {files['journal_mode']}{read_only}"
        )
    writers = document["live_writers"]
    if writers is not None:
        rows["live writers"] = (
            "; ".join(
                f"pid {w['pid']} ({w['user']}: {w['command']})"
                + ("" if w["may_signal"] else f", cannot pause: {w['why_not']}")
                for w in writers
            )
            or "none"
        )
    rows["daemon"] = _daemon(document["daemon"])
    rows["last sweep"] = _audit(document["last_sweep"])
    rows["last backup"] = _audit(document["last_backup"])
    rows["newest backup"] = _newest(document["newest_backup"])
    drift = document["memory_index"]
    if drift:
        rows["memory index"] = f"{drift['kind']}: {drift['records']} records, " + (
            "in sync"
            if not drift["to_fix"]
            else f"{drift['missing']} missing, {drift['stale']} stale, "
            f"{drift['orphaned']} orphaned: run `memory reindex`"
        )
    versions = document["config_versions"]
    if versions:
        rows["config versions"] = (
            f"{versions['count']} (v{versions['oldest']} to v{versions['newest']})"
            if versions["count"]
            else "none"
        )
    for number, note in enumerate(document["notes"], 1):
        rows[f"note {number}"] = note
    return rows


def _daemon(daemon: dict[str, Any] | None) -> str:
    if not daemon or not daemon["exists"]:
        return f"no {daemon['file'] if daemon else 'daemon.json'}"
    started = f", started {daemon['started']}" if daemon["started"] else ""
    if daemon["running"]:
        return f"running (pid {', '.join(map(str, daemon['processes']))}){started}"
    return f"not running{started}"


def _audit(record: dict[str, Any] | None) -> str:
    if not record:
        return "none recorded"
    counts = ", ".join(f"{k} {v}" for k, v in (record.get("counts") or {}).items())
    who = f" by {record['user']}" if record.get("user") else ""
    return f"{record.get('timestamp', '?')}{who}" + (f": {counts}" if counts else "")


def _newest(newest: dict[str, Any] | None) -> str:
    if not newest:
        return "no default backup directory"
    if not newest.get("name"):
        return f"none of this store in {newest['destination']}"
    return (
        f"{newest['name']} ({newest['created']}, verified {newest['verified']}; "
        f"{newest['backups']} of this store in {newest['destination']})"
    )
