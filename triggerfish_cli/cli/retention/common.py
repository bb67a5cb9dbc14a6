"""What the `retention` commands share: the group, its options, policies, times."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from triggerfish_cli import namespaces
from triggerfish_cli.cli.context import AppState
from triggerfish_cli.cli.options import complete_store_namespace, sub_app
from triggerfish_cli.errors import UsageError
from triggerfish_cli.retention.policies import Policies, policies_from_settings
from triggerfish_cli.serialization import utc_now
from triggerfish_cli.timespec import parse_moment

app = sub_app(
    "retention",
    "Apply the retention policies: see them, plan a sweep, sweep.\n\n"
    "Policies come from the defaults and the retention: section of triggerfish.yaml. "
    "Unknown namespaces, namespaces on hold and records of unknown age are never touched.",
)

NamespaceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--namespace",
        "-N",
        metavar="NS",
        help="Only this namespace (name or prefix, e.g. sessions); repeatable.",
        show_default=False,
        autocompletion=complete_store_namespace,
    ),
]
AsOfOpt = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        metavar="TIME",
        help="Judge ages as of this date or ISO time instead of now (a sweep: not in the future).",
        show_default=False,
    ),
]


def policies_of(st: AppState) -> Policies:
    return policies_from_settings(st.settings())


def only_of(names: list[str] | None) -> set[str] | None:
    if not names:
        return None
    found = set()
    for name in names:
        namespace = namespaces.get(name)
        if namespace is None:
            raise UsageError(f"unknown namespace {name!r}", hint="see `retention policies`")
        found.add(namespace.prefix)
    return found


def as_of_time(text: str | None, *, future: bool) -> datetime:
    now = utc_now()
    if text is None:
        return now
    moment = parse_moment(text)
    if moment is None:
        raise UsageError(
            f"--as-of: {text!r} is not a date or an ISO time, e.g. 2026-03-28 or "
            "2026-03-28T14:05:40Z"
        )
    if not future and moment > now:
        raise UsageError("--as-of: a sweep cannot judge ages as of a time in the future")
    return moment
