"""What the memory record commands share: the key argument, --tag, and table columns."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from triggerfish_cli.cli.output.text import Column

Key = Annotated[str, typer.Argument(help="The memory key, e.g. user-name.", show_default=False)]

Tag = Annotated[
    str | None,
    typer.Option("--tag", help="Only memories carrying this tag.", show_default=False),
]


def one_line(text: Any) -> str:
    """Free text on one line (the table cuts it to the terminal with …)."""
    return " ".join(str(text or "").split())


def record_columns(
    *fields: tuple[str, str], agent: bool = False, essential: tuple[str, ...] = ()
) -> list[Any]:
    """Columns for these ``(field, header)``s, the agent's first (``agent``); the
    agent's and those in ``essential`` never left out to fit a terminal."""
    shown = ([("agent", "agent")] if agent else []) + list(fields)
    return [
        Column(
            name,
            header,
            kind="text" if name == "tags" else "",
            essential=name == "agent" or name in essential,
        )
        for name, header in shown
    ]
