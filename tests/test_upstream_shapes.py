"""A demo store against the tables of UPSTREAM.md: key shapes and field orders.

``tests/data/UPSTREAM-keys.md`` is the "Keys the gateway writes" and "Memory
records" sections of the shared ``UPSTREAM.md``, verbatim (a test checks it
still is, where the shared file is beside the repository). The tables are
parsed here, not copied into code: every key the demo writes must match a
row, its value the row's shape (fields in the row's order, optional ones
marked ``?`` or listed as optional, others only where the row says ``...``),
and every row must be written by the demo unless the row says the gateway
never leaves one behind. So the generator and the document cannot drift
apart silently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from triggerfish_cli import demo

ROOT = Path(__file__).resolve().parents[1]
COPY = ROOT / "tests" / "data" / "UPSTREAM-keys.md"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
PLACEHOLDERS = {
    "uuid": UUID,
    "sessionId": UUID,
    "lineageId": UUID,
    "parentId": UUID,
    "childId": UUID,
    "versionId": UUID,
    "12-digit seq": r"\d{12}",
    "sha256": r"[0-9a-f]{64}",
    "LEVEL": "(?:PUBLIC|INTERNAL|CONFIDENTIAL|RESTRICTED)",
    "code": r"\d+",
    "key": ".+",  # a memory key may hold ':'
    "source": ".+",  # trigger:last:cron:<job>
}
#: The cell says the gateway leaves no such key behind: the demo writes none.
NEVER_LEFT = ("not wired yet", "written and deleted at once")


# -- the shape language of the tables -----------------------------------------------------


@dataclass
class Shape:
    """``{a,b?,c{...},d[{...}],...}``: fields in order, nested shapes, where extras may come."""

    fields: list[tuple[str, bool, Shape | None, bool]] = field(default_factory=list)
    #: Index in ``fields`` after which unlisted fields may appear (a ``...``); None: nowhere.
    open_after: int | None = None
    literal: bool = False  # {"lastSequence":N}: a JSON literal, checked elsewhere


def parse_shape(text: str) -> Shape:
    tokens = re.findall(r'\.\.\.|"[^"]*"|[A-Za-z_][A-Za-z0-9_]*|[{}\[\]:,?]|\S', text)
    shape, rest = _object(tokens)
    assert not rest, (text, rest)
    return shape


def _object(tokens: list[str]) -> tuple[Shape, list[str]]:
    assert tokens[0] == "{", tokens
    shape = Shape()
    tokens = tokens[1:]
    while tokens[0] != "}":
        if tokens[0] == "...":
            shape.open_after = len(shape.fields) - 1
            tokens = tokens[1:]
        else:
            name = tokens[0].strip('"')
            shape.literal |= tokens[0].startswith('"')
            tokens = tokens[1:]
            optional = tokens[0] == "?"
            if optional:
                tokens = tokens[1:]
            if tokens[0] == ":":
                tokens = tokens[1:]
                if tokens[0] not in "{[":
                    tokens = tokens[1:]  # a literal value such as N
            nested: Shape | None = None
            array = False
            if tokens[0] == "{":
                nested, tokens = _object(tokens)
            elif tokens[0] == "[":
                nested, tokens = _object(tokens[1:])
                assert tokens[0] == "]", tokens
                tokens = tokens[1:]
                array = True
            shape.fields.append((name, optional, nested, array))
        if tokens[0] == ",":
            tokens = tokens[1:]
    return shape, tokens[1:]


def check(shape: Shape, value: Any, where: str) -> None:
    """``value`` has ``shape``'s fields, in its order, with extras only after a ``...``."""
    assert isinstance(value, dict), where
    names = [name for name, *_ in shape.fields]
    position = -1
    for key in value:
        if key in names:
            index = names.index(key)
            assert index > position, f"{where}: {key!r} out of order in {list(value)}"
            position = index
        else:
            assert shape.open_after is not None and position >= shape.open_after, (
                f"{where}: field {key!r} is not in the table ({names})"
            )
    for name, optional, nested, array in shape.fields:
        if not optional:
            assert name in value, f"{where}: no {name!r} in {list(value)}"
        if nested is not None and name in value:
            for item in value[name] if array else [value[name]]:
                check(nested, item, f"{where}.{name}")


# -- the table -----------------------------------------------------------------------------


@dataclass
class Row:
    patterns: list[re.Pattern[str]]
    cell: str
    shape: Shape | None
    optional_tail: list[str]
    roles: list[str]

    @property
    def never_left(self) -> bool:
        return any(words in self.cell for words in NEVER_LEFT)


def key_pattern(text: str) -> re.Pattern[str]:
    parts = re.split(r"<([^>]+)>", text)
    regex = "".join(
        re.escape(part) if index % 2 == 0 else f"(?:{PLACEHOLDERS.get(part, '[^:]+')})"
        for index, part in enumerate(parts)
    )
    return re.compile(regex)


def parse_rows(markdown: str) -> list[Row]:
    section = markdown.split("## Keys the gateway writes", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        key_cell, cell = line.split(" | ")[:2]
        patterns = [key_pattern(k) for k in re.findall(r"`([^`]+)`", key_cell)]
        ticks = re.findall(r"`([^`]+)`", cell)
        shape = None
        braces = [t for t in ticks if t.startswith("{")]
        if braces and not cell.startswith("`{_truncated"):
            shape = parse_shape(braces[0])
        tail: list[str] = []
        for marker in ("optional `", "add `"):
            for found in re.findall(re.escape(marker) + r"([^`]+)`", cell):
                tail += found.split(",")
        roles = (
            re.findall(r"`([a-z_]+)`", cell.split("roles ", 1)[1].split(";")[0])
            if ("roles " in cell)
            else []
        )
        rows.append(Row(patterns, cell.strip(" |"), shape, tail, roles))
    return rows


def memory_fields(markdown: str) -> list[str]:
    section = markdown.split("## Memory records", 1)[1]
    example = re.search(r"\{.*?\}", section, re.S)
    assert example is not None
    return list(json.loads(example.group(0)))


# -- the tests -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def markdown() -> str:
    return COPY.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def store() -> dict[str, str]:
    rows, _fts, _meta = demo.generate(
        20_000, seed=11, now=datetime(2026, 11, 1, tzinfo=timezone.utc), days=200
    )
    return dict(rows)


def matching(rows: list[Row], key: str) -> list[Row]:
    return [row for row in rows if any(p.fullmatch(key) for p in row.patterns)]


def test_the_tables_parse(markdown: str) -> None:
    rows = parse_rows(markdown)
    assert len(rows) >= 25
    sessions = next(r for r in rows if r.patterns[0].pattern.startswith("sessions"))
    assert sessions.shape is not None
    assert [name for name, *_ in sessions.shape.fields] == [
        "id", "userId", "channelId", "taint", "createdAt", "history", "bumpersEnabled",
    ]  # fmt: skip
    conv = next(r for r in rows if r.roles)
    assert conv.roles == ["user", "assistant", "tool_call", "compaction_summary"]
    assert conv.optional_tail[:4] == ["lineage_id", "tool_name", "tool_args", "token_count"]
    assert memory_fields(markdown)[:3] == ["key", "agentId", "classification"]


def test_every_demo_key_has_the_shape_of_its_row(markdown: str, store: dict[str, str]) -> None:
    rows = parse_rows(markdown)
    memory_order = memory_fields(markdown)
    used: set[int] = set()
    for key, value in store.items():
        found = matching(rows, key)
        assert found, f"{key}: no row of UPSTREAM.md has this key shape"
        row = found[0]
        used.add(id(row))
        cell = row.cell
        if cell.startswith("bare"):
            assert not value.startswith(("{", "[")), key
            if "UUID" in cell:
                assert re.fullmatch(UUID, value), key
        elif cell.startswith("JSON `true`"):
            assert value in ("true", "false"), key
        elif cell.startswith("memory record"):
            record = json.loads(value)
            assert list(record) == [f for f in memory_order if f in record], key
            assert set(memory_order) - set(record) <= {"lineageId"}, key
        elif cell.startswith("JSON array of"):
            entries = json.loads(value)
            assert isinstance(entries, list) and 0 < len(entries) <= 100, key
            for entry in entries:
                assert row.shape is not None
                check(row.shape, entry, key)
        elif row.shape is not None and not row.shape.literal:
            record = json.loads(value)
            shape = row.shape
            if row.optional_tail:  # conv: the base fields, then the optional ones in order
                base = [name for name, *_ in shape.fields]
                assert list(record)[: len(base)] == base, key
                tail = list(record)[len(base) :]
                assert tail == [f for f in row.optional_tail if f in tail], key
                assert record["role"] in row.roles, key
            else:
                check(shape, record, key)
        elif row.shape is not None:  # a literal: {"lastSequence":N}, {"todos":[...]}
            record = json.loads(value)
            assert list(record) == [name for name, *_ in row.shape.fields], key
            for name, _optional, nested, array in row.shape.fields:
                if nested is not None:
                    for item in record[name] if array else [record[name]]:
                        check(nested, item, key)
        else:  # described in words: "team state with `createdAt`, `status`"
            record = json.loads(value)
            for word in re.findall(r"`([A-Za-z]+)`", cell):
                assert word in record, key
    unused = [row.cell for row in rows if id(row) not in used and not row.never_left]
    assert unused == [], "rows of UPSTREAM.md the demo store never writes"
    for row in rows:
        if row.never_left:
            assert id(row) not in used, row.cell


def test_the_copy_is_the_shared_document(markdown: str) -> None:
    candidates = [
        ROOT.parent / "shared" / "UPSTREAM.md",
        ROOT.parents[1] / "shared" / "UPSTREAM.md",
    ]
    shared = next((path for path in candidates if path.is_file()), None)
    if shared is None:
        pytest.skip("the shared UPSTREAM.md is not beside this checkout")
    assert markdown.strip() in shared.read_text(encoding="utf-8"), (
        f"tests/data/UPSTREAM-keys.md is no longer a verbatim part of {shared}: copy the "
        "sections again and bring the demo generator in line"
    )
