"""`config validate`: check a config file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from triggerfish_cli.cli.config.common import app
from triggerfish_cli.cli.options import FormatOpt, begin
from triggerfish_cli.errors import InvalidDataError


@app.command("validate")
def validate_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Argument(help="The file to check (default: the config file).", show_default=False),
    ] = None,
    fmt: FormatOpt = None,
) -> None:
    """Check a config file: YAML syntax (line, column), duplicate keys, known sections,
    our storage:/retention: sections strictly, plain-text secrets. Exit 8 on errors."""
    # lazy: config.diff and config.files add 9 modules (hashlib) to `config --help`
    from triggerfish_cli.config import diff as config_diff
    from triggerfish_cli.config import files as config_files

    st, out = begin(ctx, fmt)
    path = file or st.config_path
    config = config_files.read_config(path)
    assert config is not None
    report = config_diff.validate_text(config.text, str(path), path)

    def show() -> None:
        for problem in report.problems:
            where = f"{path}" + (f":{problem.line}" if problem.line else "")
            where += f":{problem.column}" if problem.line and problem.column else ""
            out.line(f"{where}: {problem.severity}: {problem.message}")
        if report.valid:
            out.info(f"{path}: valid ({len(report.warnings)} warning(s))")

    out.result(report.as_dict(), show, always=True)
    if not report.valid:
        raise InvalidDataError(f"{path}: invalid ({len(report.errors)} error(s))")
