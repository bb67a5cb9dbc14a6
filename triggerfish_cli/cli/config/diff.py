"""`config diff`: between two versions, or a version and the file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggerfish_cli.cli.config.common import app, version_or_newest, versions_store
from triggerfish_cli.cli.options import FormatOpt, begin, complete_config_version

if TYPE_CHECKING:
    from triggerfish_cli.cli.output import Output


@app.command("diff")
def diff_cmd(
    ctx: typer.Context,
    a: Annotated[
        str | None,
        typer.Argument(
            help="From: a version, or `current` (default: the newest).",
            metavar="[A]",
            autocompletion=complete_config_version,
        ),
    ] = None,
    b: Annotated[
        str | None,
        typer.Argument(
            help="To: a version, or `current`: the file on disk (default).",
            metavar="[B]",
            autocompletion=complete_config_version,
        ),
    ] = None,
    exit_code: Annotated[
        bool,
        typer.Option(
            "--exit-code",
            help="Exit 1 when they differ, 0 when identical (as git diff --exit-code); "
            "with -q print nothing",
        ),
    ] = False,
    fmt: FormatOpt = None,
) -> None:
    """Unified diff between two versions, or a version and the file (secrets masked).

    --format json gives {"from", "to", "identical", "changes": [{"path", "change", "old", "new"}]}
    with changed keys as dotted paths.
    """
    # lazy: config.files adds 8 modules (hashlib) to `config --help`
    from triggerfish_cli.config import files as config_files

    st, out = begin(ctx, fmt)
    provider = versions_store(st, out)

    def side(arg: str | None) -> tuple[str, str, str]:
        if arg == "current":
            config = config_files.read_config(st.config_path, missing_ok=True)
            if config is None:
                return "current", "", f"{st.config_path.name} (missing)"
            return "current", config.masked(), f"{st.config_path.name} (on disk)"
        found = version_or_newest(provider, arg)
        return f"v{found.number}", found.yaml, f"v{found.number}"

    (name_a, text_a, label_a), (name_b, text_b, label_b) = side(a), side(b or "current")
    if exit_code:
        if not out.quiet:
            _show_diff(out, text_a, text_b, (name_a, label_a), (name_b, label_b))
        if text_a != text_b:
            raise typer.Exit(1)
        return
    _show_diff(out, text_a, text_b, (name_a, label_a), (name_b, label_b))


def _show_diff(
    out: Output, text_a: str, text_b: str, a: tuple[str, str], b: tuple[str, str]
) -> None:
    # lazy: cli.output and config.diff add 13 modules (csv) to `config --help`
    from triggerfish_cli.cli.output.text import Column
    from triggerfish_cli.config import diff as config_diff

    (name_a, label_a), (name_b, label_b) = a, b

    def show() -> None:
        text = config_diff.unified(text_a, text_b, label_a, label_b)
        if text:
            out.diff(text)
        else:
            out.info(f"no differences between {label_a} and {label_b}")

    def changes() -> list[dict[str, Any]]:  # only for a document: it needs YAML that parses
        return config_diff.changes(text_a, text_b, label_a, label_b)

    out.result_rows(
        changes,
        [Column(f, f) for f in ("path", "change", "old", "new")],
        show,
        document=lambda: {
            "from": name_a,
            "to": name_b,
            "identical": text_a == text_b,
            "changes": changes(),
        },
        always=True,
    )
