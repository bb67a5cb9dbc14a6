"""`backup keygen`: make an age identity for encrypted backups."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from triggerfish_cli.cli.backup.common import app
from triggerfish_cli.cli.options import (
    FormatOpt,
    QuietOpt,
    begin,
)
from triggerfish_cli.serialization import now_iso


@app.command("keygen")
def keygen_cmd(
    ctx: typer.Context,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Where to write the new identity (created 0600, its missing directories "
            "0700; an existing file is never overwritten). Without it the identity goes to "
            "stdout and the public key to stderr, as age-keygen does.",
            show_default=False,
        ),
    ] = None,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Make an age identity for encrypted backups; print its public key.

    The identity (the private key) goes to FILE, mode 0600, in age-keygen's
    format; keep it off the backup host. The public key printed is what
    --recipient and backup: recipients take: backing up needs only it.
    """
    # lazy: backup.crypt adds 5 modules (hashlib) to `backup --help`
    from triggerfish_cli.backup.crypt import keygen, new_identity

    _, out = begin(ctx, fmt, quiet)
    if output is None:
        public, text = new_identity(created=now_iso())
        out.stderr.write(f"Public key: {public}\n")
        out.result({"public_key": public, "identity": text}, lambda: out.write(text), always=True)
        return
    public = keygen(output.expanduser(), created=now_iso())

    def show() -> None:
        out.line(public)
        out.info(f"identity written to {output} (0600): keep it off the backup host")

    out.result({"identity_file": str(output), "public_key": public}, show, always=True)
