"""Leases: the S3 backend's lock between processes of this tool, on any host.

A lease is one small object, ``<store prefix>#tfadmin-lock/<name>`` (``#``
never begins an encoded key name, so the store's listings skip it). It is
created with a conditional put (``If-None-Match: *``): of two processes
putting it at once, exactly one succeeds. Its body says who holds it and
until when (JSON: ``holder``, ``pid``, ``host``, ``since``, ``expires``, epoch
seconds). While the block runs a thread renews it every ``ttl / 4`` seconds
with ``If-Match`` on its ETag, and it is deleted (``If-Match`` again) when
the block ends.

A holder that dies without releasing it (``kill -9``, a lost machine)
leaves it behind; once its ``expires`` has passed another process takes it
over by deleting it with ``If-Match`` on the ETag it read and creating its
own, so two processes taking over at once cannot both win. Expiry compares
the lease's time with the taker's clock: hosts must agree on the time to
within a small part of the TTL (NTP).

Residual risk, documented: a holder stalled for longer than the TTL
(stopped, swapping, network partition) loses its lease without noticing
until its next renewal, and another job may start meanwhile. Renewal then
fails and the job is told when its block ends (BusyError, exit 6).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

from triggerfish_cli.errors import BusyError, NotFoundError, TriggerfishError
from triggerfish_cli.storage.locks import lock_file_name
from triggerfish_cli.threads import background

#: Marks lease object names; never the first character of an encoded key.
LEASE_MARK = "#"
DEFAULT_TTL = 60.0
POLL_SECONDS = 0.25


def lease_name(name: str) -> str:
    return f"{LEASE_MARK}tfadmin-lock/{lock_file_name(name)}"


class LeaseLost(TriggerfishError):
    """Internal: a conditional request failed because someone else changed the lease."""


def _describe(body: dict[str, Any]) -> str:
    since = body.get("since")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)) if since else "?"
    return f" (pid {body.get('pid', '?')} on {body.get('host', '?')} since {when})"


@contextmanager
def lease(
    client: Any,
    bucket: str,
    key: str,
    wait: float,
    what: str,
    *,
    errors: Callable[[str], AbstractContextManager[None]],
    precondition: type[Exception],
    ttl: float = DEFAULT_TTL,
) -> Iterator[None]:
    """Hold the lease object ``key`` for the block; BusyError after ``wait`` s."""
    me = uuid.uuid4().hex
    deadline = time.monotonic() + max(0.0, wait)

    def body() -> bytes:
        now = time.time()
        return json.dumps(
            {
                "holder": me,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "since": started,
                "expires": now + ttl,
            }
        ).encode()

    def read() -> tuple[dict[str, Any], str] | None:
        try:
            with errors("lock"):
                response = client.get_object(Bucket=bucket, Key=key)
                raw = response["Body"].read()
        except NotFoundError:
            return None
        try:
            found = json.loads(raw)
        except ValueError:
            found = {}
        return (found if isinstance(found, dict) else {}), str(response.get("ETag", ""))

    started = time.time()
    etag = ""
    while True:
        try:
            with errors("lock"):
                created = client.put_object(Bucket=bucket, Key=key, Body=body(), IfNoneMatch="*")
            etag = str(created["ETag"])
            break
        except precondition:
            pass
        current = read()
        if current is not None:
            holder, held_etag = current
            expires = holder.get("expires")
            if not isinstance(expires, (int, float)) or expires < time.time():
                # Expired (or unreadable): take it over, unless someone else just did.
                with suppress(precondition, NotFoundError), errors("lock"):
                    client.delete_object(Bucket=bucket, Key=key, IfMatch=held_etag)
                continue
            if time.monotonic() >= deadline:
                waited = f" after waiting {wait:g} s" if wait > 0 else ""
                raise BusyError(
                    f"{what} is held by another process{_describe(holder)}{waited}",
                    hint="wait for it to finish, or pass --wait SECONDS "
                    f"(a crashed holder's lease expires {ttl:g} s after its last renewal)",
                )
        time.sleep(POLL_SECONDS)

    state = {"etag": etag, "lost": False}
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl / 4):
            try:
                with errors("lock"):
                    state["etag"] = client.put_object(
                        Bucket=bucket, Key=key, Body=body(), IfMatch=state["etag"]
                    )["ETag"]
            except (precondition, NotFoundError):
                state["lost"] = True
                return
            except TriggerfishError:
                continue  # S3 unreachable for a moment: try again at the next beat

    renewer = background(renew, name="triggerfish-s3-lease")
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        if not state["lost"]:
            with suppress(precondition, NotFoundError, TriggerfishError), errors("lock"):
                client.delete_object(Bucket=bucket, Key=key, IfMatch=state["etag"])
    if state["lost"]:
        raise BusyError(
            f"{what}: the lease expired while the job ran and another process may have "
            "taken it over",
            hint="the job itself completed; check that no other job overlapped with it",
        )
