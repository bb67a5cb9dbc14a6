"""What the `kv` commands share: the group, the key argument, the raw view's --taint."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from triggerfish_cli.cli.options import complete_key, sub_app

app = sub_app(
    "kv",
    "Inspect and edit the raw key-value store.\n\n"
    "Works on every namespace with exact, case-sensitive prefixes in binary key order. "
    "This is the raw view: it does not apply memory classification.",
)

Key = Annotated[
    str,
    typer.Argument(
        help="The exact key, e.g. sessions:<uuid>.",
        show_default=False,
        autocompletion=complete_key,
    ),
]


def check_raw_taint(value: str | None) -> str | None:
    # lazy: classification is not loaded by `kv --help`
    from triggerfish_cli.classification import parse_level

    if value is not None:
        try:
            parse_level(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


RawTaintOpt = Annotated[
    str | None,
    typer.Option(
        "--taint",
        "-t",
        envvar="TRIGGERFISH_TAINT",
        callback=check_raw_taint,
        metavar="LEVEL",
        show_default=False,
        help="Leave out memory rows above this level (get refuses them). Unset: the raw "
        "view shows every row; memory rows above PUBLIC it shows are audited (keys only).",
    ),
]


def raw_reads(taint: str | None) -> Any:
    # lazy: classification and kv.keys add 14 modules to `kv --help`
    from triggerfish_cli.classification import parse_level
    from triggerfish_cli.kv.keys import RawReads

    return RawReads(parse_level(taint) if taint is not None else None)
