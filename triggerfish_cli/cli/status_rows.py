"""`status` as a table: the report, one line per item."""

from __future__ import annotations

from typing import Any

from triggerfish_cli.cli.output.text import human_bytes


def status_rows(document: dict[str, Any]) -> dict[str, str]:
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
        rows["live writers"] = "; ".join(_writer(w) for w in writers) or "none"
    rows["daemon"] = _daemon(document["daemon"])
    rows["last sweep"] = _sweep(document["last_sweep"])
    if document["last_successful_sweep"] != document["last_sweep"]:
        rows["last successful sweep"] = _audit(document["last_successful_sweep"])
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
    rows.update({f"resumed {n}": line for n, line in enumerate(document["resumed"], 1)})
    return rows


def _writer(writer: dict[str, Any]) -> str:
    text = f"pid {writer['pid']} ({writer['user']}: {writer['command']})"
    if writer["stopped"]:
        text += f", STOPPED (state T: it cannot write or answer; kill -CONT {writer['pid']})"
    if not writer["may_signal"]:
        return text + f", cannot pause: {writer['why_not']}"
    return text + (f", never paused: {writer['not_paused']}" if writer["not_paused"] else "")


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


def _sweep(record: dict[str, Any] | None) -> str:
    """The last sweep, and how it ended when it did not end well."""
    text = _audit(record)
    if not record:
        return text
    if record.get("interrupted"):
        text += "; INTERRUPTED (the next sweep finishes the job)"
    if record.get("error"):
        text += f"; FAILED: {record['error']}"
    if record.get("only"):
        text += f"; only {', '.join(record['only'])} (--namespace)"
    return text


def _newest(newest: dict[str, Any] | None) -> str:
    if not newest:
        return "no default backup directory"
    if not newest.get("name"):
        return f"none of this store in {newest['destination']}"
    verified = newest["verified"]
    if verified == "keyless":
        verified += ": encrypted bytes intact, contents not checked"
    checked = newest.get("contents_verified_at") or "never"
    return (
        f"{newest['name']} ({newest['created']}, verified {verified}; "
        f"{newest['backups']} of this store in {newest['destination']}; "
        f"contents last verified: {checked})"
    )
