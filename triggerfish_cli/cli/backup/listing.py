"""`backup list`: the backups in a destination, grouped by store."""

from __future__ import annotations

import typer

from triggerfish_cli.cli.backup.common import app
from triggerfish_cli.cli.backup.options import (
    AllStoresOpt,
    EndpointOpt,
    FromOpt,
    by_store,
    destination,
    of_store,
    this_store,
)
from triggerfish_cli.cli.backup.output import show_entries
from triggerfish_cli.cli.options import FormatOpt, begin


@app.command("list")
def list_cmd(
    ctx: typer.Context,
    source: FromOpt = None,
    endpoint_url: EndpointOpt = None,
    all_stores: AllStoresOpt = False,
    fmt: FormatOpt = None,
) -> None:
    """This store's backups in a destination, oldest first: time, size, kind, label, verified.

    Each backup names the store it was made of (its id, else its host and
    path); --all-stores lists every store's, grouped by store.
    """
    st, out = begin(ctx, fmt)
    store = None if all_stores else this_store(st)
    dest = destination(source, endpoint_url)
    listed = dest.entries()
    entries = by_store(of_store(listed, store))
    where = dest.describe()
    if store is not None:
        others = len(listed) - len(entries)
        where = f"{where} of {store.describe()}" + (
            f" ({others} of other stores: --all-stores)" if others else ""
        )
    show_entries(out, entries, where)
