"""`triggerfish-admin retention policies`: the effective policy of every namespace."""

from __future__ import annotations

import typer

from triggerfish_cli.cli.options import FormatOpt, begin
from triggerfish_cli.cli.output.text import Column, text_column
from triggerfish_cli.cli.retention.common import (
    app,
    policies_of,
)


@app.command("policies")
def policies_cmd(ctx: typer.Context, fmt: FormatOpt = None) -> None:
    """The effective policy of every namespace, and where it comes from."""
    st, out = begin(ctx, fmt)
    policies = policies_of(st)
    out.rows(
        (policy.as_dict() for policy in policies),
        [
            Column("namespace", "namespace", essential=True),
            Column("policy", "policy", essential=True),
            Column("source", "source"),
            Column("held", "held"),
            text_column("rule", "what goes"),
        ],
        gives_way=("source", "held"),
    )
