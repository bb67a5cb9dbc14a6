"""SQL conditions on the ``key`` column for the SQL backends (SQLite and Postgres).

Both select key ranges the same way, with index range scans (never
``LIKE``): keys under a prefix are ``prefix <= key < prefix_upper_bound``.
Only the parameter mark and the always-true condition differ.
"""

from __future__ import annotations

from triggerfish_cli.storage.provider import prefix_upper_bound

Clause = tuple[str, list[str]]


def between(low: str | None, high: str | None, *, mark: str, true: str) -> Clause:
    """``low <= key < high`` (None: unbounded)."""
    conditions: list[str] = []
    params: list[str] = []
    if low is not None:
        conditions.append(f"key >= {mark}")
        params.append(low)
    if high is not None:
        conditions.append(f"key < {mark}")
        params.append(high)
    return " AND ".join(conditions) or true, params


def under(prefix: str | None, start_after: str | None, *, mark: str, true: str) -> Clause:
    """Keys under ``prefix`` (None or empty: all) that sort after ``start_after``."""
    if prefix:
        if start_after is not None and start_after >= prefix:
            condition, params = f"key > {mark}", [start_after]
        else:
            condition, params = f"key >= {mark}", [prefix]
        upper = prefix_upper_bound(prefix)
        if upper is None:
            return condition, params
        return f"{condition} AND key < {mark}", [*params, upper]
    if start_after is not None:
        return f"key > {mark}", [start_after]
    return true, []
