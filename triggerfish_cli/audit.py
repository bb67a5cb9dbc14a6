"""Audit records of what the admin tool changed.

Every mutation writes one record under the design's audit namespace,
``audit:<ISO time>:admin_<action>``, so an operator can later see who
changed what. The value is compact JSON::

    {"timestamp":"2026-03-28T14:05:40.902Z","hook":"admin_kv_delete",
     "action":"kv_delete","user":"alice","host":"gw1",
     "tool":"triggerfish-admin 0.1.0","store":"6f1c...","target":"sessions:",
     "counts":{"deleted":12}}

Records never hold secrets or memory content: only names, keys and counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from triggerfish_cli import __version__, cells
from triggerfish_cli.serialization import dumps, to_iso, utc_now
from triggerfish_cli.storage.identity import ensure_id
from triggerfish_cli.storage.provider import StorageProvider

PREFIX = "audit:"


def os_user() -> str:
    """The OS user running the tool (never fails)."""
    # lazy: getpass (+2 modules, termios) is not loaded by `kv get --raw`
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no passwd entry, e.g. in a container
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def _hostname() -> str:
    # lazy: socket (+3 modules, ~8 ms) is not loaded by `kv get --raw`
    import socket

    return socket.gethostname()


def is_own(key: str) -> bool:
    """An audit record this tool wrote (``audit:<time>:admin_<action>``)."""
    return key.startswith(PREFIX) and key.rpartition(":")[2].startswith("admin_")


def audit_key(moment: datetime, action: str) -> str:
    return f"{PREFIX}{to_iso(moment)}:admin_{action}"


def record(
    provider: StorageProvider,
    action: str,
    *,
    target: str | None = None,
    counts: Mapping[str, int] | None = None,
    details: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> str:
    """Write one audit record and return its key.

    ``action`` is a short snake_case name (``kv_delete``); the hook in the
    key is ``admin_<action>``. Two records in the same millisecond get
    distinct keys (the later one moves on by a millisecond). Every command
    that changes a store ends here, so the store's identity is recorded here
    the first time (storage/identity.py) and named in the record.
    """
    store = ensure_id(provider)
    moment = now or utc_now()
    key = audit_key(moment, action)
    while provider.get(key) is not None:
        moment += timedelta(milliseconds=1)
        key = audit_key(moment, action)
    value: dict[str, Any] = {
        "timestamp": to_iso(moment),
        "hook": f"admin_{action}",
        "action": action,
        "user": os_user(),
        "host": _hostname(),
        "tool": f"triggerfish-admin {__version__}",
        "store": store,
    }
    if target is not None:
        value["target"] = target
    if counts is not None:
        value["counts"] = dict(counts)
    if details:
        value.update(details)
    gate = provider.gate_stats()
    if gate and gate.get("freezes"):  # what this command's writes cost the live writers
        value["gate"] = {
            name: gate[name]
            for name in ("freezes", "frozen_seconds", "longest_freeze_ms", "busy_retries")
        }
    text = dumps(value)
    if not cells.is_plain(text):  # keys that are not UTF-8 text (cells.py), as they are shown
        text = dumps(_shown(value))
    provider.set(key, text)
    return key


def _shown(document: Any) -> Any:
    if isinstance(document, str):
        return cells.display(document)
    if isinstance(document, dict):
        return {cells.display(k): _shown(v) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [_shown(item) for item in document]
    return document


# -- reading our own records back (status, status --check) --------------------------------


def hook_keys(provider: StorageProvider, hooks: tuple[str, ...]) -> dict[str, list[str]]:
    """The keys of the records of each of ``hooks`` (``admin_<action>``), oldest first."""
    found: dict[str, list[str]] = {hook: [] for hook in hooks}
    for key in provider.scan_keys(PREFIX, batch_size=5000):
        hook = key.rpartition(":")[2]
        if hook in found:
            found[hook].append(key)
    return found


def newest_own(
    provider: StorageProvider,
    keys: list[str],
    store: str | None,
    accept: Callable[[dict[str, Any]], bool] | None = None,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The newest of the records ``keys`` (oldest first) that names the store ``store``
    (and that ``accept(record)`` takes), and the newer ones passed over.

    Audit records travel with the data (a migrate, a restore elsewhere): a
    record that names another store, or none (written before stores had ids),
    is never this store's. Each record returned has its ``key``."""
    passed: list[dict[str, Any]] = []
    newest_first = keys[::-1]
    for start in range(0, len(newest_first), 200):
        chunk = newest_first[start : start + 200]
        values = provider.get_many(chunk)
        for key in chunk:
            record = _parsed(values.get(key))
            if record is None:
                continue
            record["key"] = key
            ours = store is not None and record.get("store") == store
            if ours and (accept is None or accept(record)):
                return record, passed
            passed.append(record)
    return None, passed


def _parsed(value: str | None) -> dict[str, Any] | None:
    try:
        data = json.loads(value or "")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
