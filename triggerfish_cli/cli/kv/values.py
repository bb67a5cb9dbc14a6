"""`kv get` and `kv set`: one value, read or written."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from triggerfish_cli.cli.kv.common import Key, RawTaintOpt, app
from triggerfish_cli.cli.options import FormatOpt, QuietOpt, begin
from triggerfish_cli.errors import InvalidDataError, UsageError


@app.command("get")
def get_cmd(
    ctx: typer.Context,
    key: Key,
    raw: Annotated[
        bool, typer.Option("--raw", "-r", help="Exact stored bytes, no newline added.")
    ] = False,
    taint: RawTaintOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """One value: pretty JSON on a TTY, exact bytes with --raw or when piped.

    --format json (or jsonl, csv) gives {"key", "value"} with the value as stored;
    --raw always gives the exact bytes, whatever the format.
    """
    # lazy: classification and kv.keys add 7 modules to `kv --help`
    from triggerfish_cli.classification import parse_level
    from triggerfish_cli.kv import keys

    st, out = begin(ctx, fmt)
    level = parse_level(taint) if taint is not None else None
    value = keys.get_value(st.provider(), key, taint=level)
    if raw:
        out.write(value)
        return

    def show() -> None:
        if out.stdout_is_tty:
            out.line(_pretty(value), wrap=False)
        else:
            out.write(value)

    out.result({"key": key, "value": value}, show, always=True)


def _pretty(value: str) -> str:
    try:
        return json.dumps(json.loads(value), ensure_ascii=False, indent=2)
    except ValueError:
        return value


@app.command("set")
def set_cmd(
    ctx: typer.Context,
    key: Key,
    value: Annotated[
        str | None,
        typer.Argument(help="The value; omit it (or give -) to read stdin.", show_default=False),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="Read the value from this file.",
            show_default=False,
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    raw: Annotated[
        bool, typer.Option("--raw", help="Store text that is not JSON (a bare string).")
    ] = False,
    fmt: FormatOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write one value. It must be JSON unless --raw.

    From a file or stdin, one trailing newline is dropped: values never end in one.
    """
    # lazy: kv.keys adds 7 modules to `kv --help`
    from triggerfish_cli.kv import keys

    st, out = begin(ctx, fmt, quiet)
    if file is not None and value is not None:
        raise UsageError("give a VALUE or --file, not both")
    if file is not None:
        text = _strip_newline(_read_text(file))
    elif value is None or value == "-":
        if sys.stdin.isatty():
            raise UsageError("no value: give VALUE, --file, or pipe it on stdin")
        text = _strip_newline(sys.stdin.read())
    else:
        text = value
    result = keys.set_value(st.provider(), key, text, raw=raw)
    out.outcome(
        result,
        f"{'replaced' if result['replaced'] else 'set'} {key} ({result['bytes']} bytes)",
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidDataError(f"{path}: not UTF-8 text") from None


def _strip_newline(text: str) -> str:
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text
