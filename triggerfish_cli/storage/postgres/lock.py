"""Server-side advisory locks for the PostgreSQL backend.

A lock is ``pg_try_advisory_lock(key)`` taken on a connection of its own,
held for the ``with`` block (session level, outside any transaction): the
server releases it when we unlock, close the connection, or the process or
its connection dies, so a crashed job never leaves a stale lock. Every host
that reaches the server sees the same lock, unlike the host-local file lock
of the generic fallback.

The key is the first 64 bits of ``sha256("triggerfish-admin:<schema>:<name>")``:
one lock per job name and store (schema). A waiting process polls; the
message of a refusal names the holder's server pid, client address and
since when it holds the lock (from ``pg_locks`` and ``pg_stat_activity``).

The lock's connection is separate from the store's, so the store's
statements never run inside it and a dropped store connection does not
release it behind our back (the job fails anyway, with exit 7).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

from triggerfish_cli.errors import BusyError

POLL_SECONDS = 0.1


def lock_key(schema: str, name: str) -> int:
    """The advisory lock key (a signed bigint) of job ``name`` on ``schema``."""
    digest = hashlib.sha256(f"triggerfish-admin:{schema}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _holder(conn: Any, key: int) -> str:
    """Who holds the lock, for the message (empty when unknown)."""
    classid, objid = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
    with suppress(Exception):
        row = conn.execute(
            "SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), "
            "CASE WHEN a.client_port = -1 THEN 'a Unix socket' ELSE 'an unknown address' END), "
            "to_char(a.backend_start AT TIME ZONE 'UTC', "
            '\'YYYY-MM-DD"T"HH24:MI:SS"Z"\') '
            "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.classid::bigint = %s AND l.objid::bigint = %s LIMIT 1",
            (classid, objid),
        ).fetchone()
        if row is not None:
            pid, app, addr, since = row
            return f" (server pid {pid}, {app or 'unknown client'} from {addr}, since {since})"
    return ""


@contextmanager
def advisory_lock(
    connect: Callable[[], Any],
    schema: str,
    name: str,
    wait: float,
    what: str,
    *,
    errors: Callable[[str], AbstractContextManager[None]],
) -> Iterator[None]:
    """Hold the advisory lock of ``name`` for the block; BusyError after ``wait`` s.

    ``errors(what)`` translates driver errors while the lock is taken.
    """
    key = lock_key(schema, name)
    conn = connect()
    try:
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            with errors("lock"):
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            if row is not None and row[0]:
                break
            if time.monotonic() >= deadline:
                waited = f" after waiting {wait:g} s" if wait > 0 else ""
                raise BusyError(
                    f"{what} is held by another process{_holder(conn, key)}{waited}",
                    hint="wait for it to finish, or pass --wait SECONDS",
                )
            time.sleep(POLL_SECONDS)
        try:
            yield
        finally:
            with suppress(Exception):  # closing the connection releases it anyway
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    finally:
        with suppress(Exception):
            conn.close()
