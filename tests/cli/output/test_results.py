"""Output owns the table-or-document choice: result, result_rows, for_people, strings."""

from __future__ import annotations

import io
from typing import Any

import pytest

from triggerfish_cli.cli.output import Output
from triggerfish_cli.cli.output.text import Column

FORMATS = ("table", "json", "jsonl", "csv")
COLUMNS = [Column("name", "name"), Column("n", "n", "right")]
ROWS = [{"name": "a", "n": 1}, {"name": "b", "n": 2}]


def run(fmt: str, call: Any, *, quiet: bool = False) -> tuple[str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    out = Output(fmt, quiet=quiet, color=False, stdout=stdout, stderr=stderr)
    call(out)
    return stdout.getvalue(), stderr.getvalue()


@pytest.mark.parametrize("quiet", [False, True])
def test_result_writes_the_document_or_shows_it(quiet: bool) -> None:
    def call(out: Output) -> None:
        out.result({"a": 1, "b": [1, 2]}, lambda: out.line("for people"))

    assert run("json", call, quiet=quiet)[0] == '{\n  "a": 1,\n  "b": [\n    1,\n    2\n  ]\n}\n'
    assert run("jsonl", call, quiet=quiet)[0] == '{"a":1,"b":[1,2]}\n'
    assert run("csv", call, quiet=quiet)[0] == 'a,b\n1,"[1,2]"\n'
    assert run("table", call, quiet=quiet)[0] == ("" if quiet else "for people\n")


def test_result_always_shows_a_table_even_when_quiet() -> None:
    def call(out: Output) -> None:
        out.result({"a": 1}, lambda: out.line("the value"), always=True)

    assert run("table", call, quiet=True)[0] == "the value\n"


def test_result_gives_csv_its_rows_and_builds_the_document_only_when_written() -> None:
    built: list[str] = []

    def document() -> dict[str, Any]:
        built.append("document")
        return {"rows": ROWS}

    def call(out: Output) -> None:
        out.result(document, lambda: out.line("table"), rows=ROWS, columns=COLUMNS)

    assert run("csv", call)[0] == "name,n\na,1\nb,2\n"
    assert run("table", call)[0] == "table\n"
    assert built == []
    assert run("jsonl", call)[0] == '{"rows":[{"name":"a","n":1},{"name":"b","n":2}]}\n'
    assert built == ["document"]


def test_result_rows_writes_rows_and_json_the_document_when_given() -> None:
    def call(out: Output, document: Any = None) -> None:
        out.result_rows(lambda: ROWS, COLUMNS, lambda: out.line("table"), document=document)

    assert run("json", call)[0] == '[\n  {"name":"a","n":1},\n  {"name":"b","n":2}\n]\n'
    assert run("json", lambda out: call(out, {"all": 2}))[0] == '{\n  "all": 2\n}\n'
    assert run("jsonl", lambda out: call(out, {"all": 2}))[0] == (
        '{"name":"a","n":1}\n{"name":"b","n":2}\n'
    )
    assert run("csv", call)[0] == "name,n\na,1\nb,2\n"
    assert run("table", call)[0] == "table\n"
    assert run("table", call, quiet=True)[0] == ""


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("quiet", [False, True])
def test_for_people_shows_only_on_a_table_and_not_quiet(fmt: str, quiet: bool) -> None:
    stdout, _ = run(fmt, lambda out: out.for_people(lambda: out.line("note")), quiet=quiet)
    assert stdout == ("note\n" if fmt == "table" and not quiet else "")


def test_strings_in_every_format() -> None:
    def call(out: Output) -> None:
        out.strings(iter(["a", "b\x1b"]))

    assert run("table", call)[0] == "a\nb\\x1b\n"
    assert run("csv", call)[0] == "a\nb\\x1b\n"
    assert run("jsonl", call)[0] == '"a"\n"b\\u001b"\n'
    assert run("json", call)[0] == '["a","b\\u001b"]\n'


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_strings_as_json_are_never_folded_on_a_terminal(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key with spaces, longer than the terminal is wide, stays one JSON string."""
    monkeypatch.setenv("COLUMNS", "20")
    key = "conv:a session with spaces in its name:000001"
    stdout = _Terminal()
    Output(fmt, color=False, stdout=stdout, stderr=io.StringIO()).strings([key])
    assert stdout.getvalue() == ('["' + key + '"]\n' if fmt == "json" else '"' + key + '"\n')
