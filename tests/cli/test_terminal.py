"""Every table command in a real terminal (80, 100, 200 columns) and in a pipe.

In a pseudo-terminal, parsed with a terminal emulator: no identifier (key,
namespace, name, time, level) is split across screen rows, and no line is
wider than the terminal unless one identifier alone nearly fills it. Piped:
a header and rows, no blank or rule lines, no spaces at line ends; closing
the pipe early (`| head -1`) exits 0.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.terminal import SCRIPT, environment, run_in_terminal
from triggerfish_cli.cli.output.text import display_width

pytestmark = pytest.mark.slow

NOW = "2026-05-01T00:00:00Z"


@dataclass
class Store:
    base: Path
    env: dict[str, str]
    db: Path
    memory_key: str
    scratch: Path
    serial: list[int] = field(default_factory=lambda: [0])

    def fresh(self, name: str) -> Path:
        self.serial[0] += 1
        return self.scratch / f"{name}-{self.serial[0]}"


def _run(store: Store, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, env=store.env, timeout=300
    )
    if check:
        assert result.returncode == 0, (args, result.stderr)
    return result


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Store:
    root = tmp_path_factory.mktemp("terminal")
    base, home, scratch = root / "base", root / "home", root / "scratch"
    for path in (base, home, scratch):
        path.mkdir()
    store = Store(base, environment(base, home), base / "data" / "triggerfish.db", "", scratch)
    _run(store, "demo", "create", "--records", "6000", "--seed", "3", "--now", NOW)
    config = base / "triggerfish.yaml"
    for n in (1, 2):
        config.write_text(f"models:\n  primary: model-{n}\nlogging:\n  level: info\n")
        _run(store, "config", "snapshot", "-m", f"the reason for snapshot number {n}")
    backups = base / "backups"
    backups.mkdir()
    for stamp in ("2026-02-16T14-30-45.123Z", "2026-02-17T09-00-00.000Z"):
        (backups / f"triggerfish.yaml.{stamp}").write_text(f"models:\n  primary: {stamp}\n")
    _run(store, "backup", "create")
    _run(store, "backup", "create", "--label", "a label with several words in it", "--verify")
    memories = json.loads(_run(store, "memory", "list", "-A", "-f", "json").stdout)
    store.memory_key = memories[0]["key"]
    return store


Rows = Callable[[Any], list[dict[str, Any]]]


@dataclass
class Table:
    name: str
    args: Callable[[Store], list[str]]
    ids: dict[str, str]  # header -> JSON field of an identifier column
    rows: Rows = lambda document: document


def _sweep(store: Store) -> list[str]:
    copy = store.fresh("sweep.db")
    shutil.copy(store.db, copy)
    return ["--db", str(copy), "retention", "sweep", "--yes", "--as-of", NOW]


def _migrate(store: Store) -> list[str]:
    return ["migrate", "--from", str(store.db), "--to", str(store.fresh("target.db")), "--yes"]


def _prune_rows(document: Any) -> list[dict[str, Any]]:
    return document["backups"]  # type: ignore[no-any-return]


def _imported(document: Any) -> list[dict[str, Any]]:
    return document["imported"] + document["skipped"]  # type: ignore[no-any-return]


def _namespaces(document: Any) -> list[dict[str, Any]]:
    return document["namespaces"]  # type: ignore[no-any-return]


def _stats(document: Any) -> list[dict[str, Any]]:
    return document["rows"]  # type: ignore[no-any-return]


MEMORY_IDS = {"agent": "agent", "key": "key", "level": "level", "updated": "updated_at"}

TABLES = [
    Table("kv namespaces", lambda s: ["kv", "namespaces"], {"namespace": "namespace"}),
    Table(
        "kv namespaces --ages",
        lambda s: ["kv", "namespaces", "--ages"],
        {"namespace": "namespace", "oldest": "oldest", "newest": "newest"},
    ),
    Table("kv list", lambda s: ["kv", "list", "--limit", "400"], {"key": "key"}),
    Table(
        "kv list lineage-", lambda s: ["kv", "list", "lineage-", "--limit", "300"], {"key": "key"}
    ),
    Table("retention policies", lambda s: ["retention", "policies"], {"namespace": "namespace"}),
    Table(
        "retention plan",
        lambda s: ["retention", "plan", "--as-of", NOW],
        {"namespace": "namespace", "oldest": "oldest"},
    ),
    Table(
        "retention plan --list",
        lambda s: ["retention", "plan", "--list", "--as-of", NOW],
        {"key": "key", "action": "action", "time": "time"},
    ),
    Table(
        "retention sweep",
        _sweep,
        {"namespace": "namespace"},
        lambda d: [r for r in d["namespaces"] if r["planned"] or r["unknown_age"]],
    ),
    Table(
        "memory search -A",
        lambda s: ["memory", "search", "meeting", "-A", "--limit", "30"],
        MEMORY_IDS,
    ),
    Table("memory list -A", lambda s: ["memory", "list", "-A"], MEMORY_IDS),
    Table(
        "memory history -A",
        lambda s: ["memory", "history", "-A", s.memory_key],
        {"agent": "agent", "level": "level", "status": "status", "updated": "updated_at"},
    ),
    Table("memory stats", lambda s: ["memory", "stats"], {"agent": "agent"}, _stats),
    Table(
        "backup list",
        lambda s: ["backup", "list"],
        {"created": "created", "name": "name", "kind": "kind"},
    ),
    Table(
        "backup prune",
        lambda s: ["backup", "prune", "--keep-last", "1", "--dry-run"],
        {"created": "created", "name": "name", "action": "action"},
        _prune_rows,
    ),
    Table(
        "config history",
        lambda s: ["config", "history"],
        {"created": "created_at", "user": "user", "source": "source"},
    ),
    Table(
        "config import-backups",
        lambda s: ["config", "import-backups", "--dry-run"],
        {"file": "file", "time": "created_at"},
        _imported,
    ),
    Table("migrate", _migrate, {"namespace": "namespace"}, _namespaces),
]


def _headers(line: str) -> set[str]:
    return {part for part in re.split(r"\s{2,}", line.strip()) if part}


def _identifiers(store: Store, spec: Table, shown: set[str]) -> dict[str, set[str]]:
    """header -> the values of that identifier column, from the same command's JSON."""
    document = json.loads(_run(store, "-f", "json", *spec.args(store)).stdout)
    found: dict[str, set[str]] = {}
    for row in spec.rows(document):
        for header, name in spec.ids.items():
            if header in shown and isinstance(row.get(name), str) and row[name]:
                found.setdefault(header, set()).add(row[name])
    assert found, f"{spec.name}: no identifiers to check"
    return found


def _split(value: str, rows: list[str], columns: int) -> bool:
    """Is ``value`` cut over two screen rows (wrapped by the terminal, or folded in its cell)?"""
    for upper, lower in itertools.pairwise(rows):
        for cut in range(1, len(value)):
            head, tail = value[:cut], value[cut:]
            if len(upper) == columns and upper.endswith(head) and lower.startswith(tail):
                return True  # the terminal wrapped a line that ran over
            if len(head) < 3 or len(tail) < 2:
                continue
            start = upper.find(head)
            while start >= 0:  # the rest of the cell on the next row, in the same column
                if lower[start : start + len(tail)] == tail:
                    return True
                start = upper.find(head, start + 1)
    return False


@pytest.mark.parametrize("columns", [80, 100, 200])
@pytest.mark.parametrize("spec", TABLES, ids=[t.name for t in TABLES])
def test_table_in_a_terminal(demo: Store, spec: Table, columns: int) -> None:
    screen = run_in_terminal(spec.args(demo), columns, demo.env)
    headers = [line for line in screen.lines if _headers(line) & set(spec.ids)]
    assert headers, (spec.name, screen.lines[:5])
    first = re.split(r"\s{2,}", headers[0].strip())[0]
    shown = set().union(*(_headers(line) for line in headers))
    identifiers = _identifiers(demo, spec, shown)
    everything = set().union(*identifiers.values())
    longest = [value for value in everything if display_width(value) > columns - 8]
    widest_row = max(display_width(line) for line in screen.lines if line not in headers)
    for line in screen.lines:
        if display_width(line) <= columns:
            continue
        if line in headers:  # a header is as wide as its rows
            assert display_width(line) <= widest_row, (spec.name, columns, line)
        else:  # a row runs over only when one identifier alone fills the screen
            assert any(value in line for value in longest), (spec.name, columns, line)
    for header, values in identifiers.items():
        for value in values:
            if display_width(value) > columns:
                continue
            whole = any(value in row for row in screen.rows)
            if header == first:  # the first column is never left out
                assert whole, (spec.name, columns, value)
            elif not whole:  # a column that gave way is left out whole, never split
                assert not _split(value, screen.rows, columns), (spec.name, columns, value)


@pytest.mark.parametrize("spec", TABLES, ids=[t.name for t in TABLES])
def test_table_in_a_pipe(demo: Store, spec: Table) -> None:
    result = _run(demo, *spec.args(demo))
    lines = result.stdout.split("\n")
    assert lines[-1] == "" and len(lines) > 2, (spec.name, result.stdout[:500])
    for line in lines[:-1]:
        assert line.strip(), (spec.name, "blank line")
        assert not re.fullmatch(r"[\s─━—=+|-]+", line), (spec.name, "rule", line)
        assert line == line.rstrip(), (spec.name, "trailing spaces", line)
        assert "\x1b" not in line
    shown = _headers(lines[0])
    assert shown & set(spec.ids)
    for values in _identifiers(demo, spec, shown).values():
        for value in values:
            assert value in result.stdout  # nothing cut off a terminal


LISTINGS = [
    ["kv", "list"],
    ["kv", "list", "--keys-only"],
    ["kv", "export"],
    ["kv", "namespaces"],
    ["retention", "plan", "--list", "--as-of", NOW],
    ["memory", "list", "-A"],
    ["kv", "list", "-f", "json"],
    ["kv", "list", "-f", "csv"],
    ["retention", "plan", "--list", "--as-of", NOW, "-f", "jsonl"],
]


@pytest.mark.parametrize("args", LISTINGS, ids=[" ".join(a) for a in LISTINGS])
def test_closed_pipe_exits_0(demo: Store, args: list[str]) -> None:
    command = " ".join(f"'{word}'" for word in [SCRIPT, *args])
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{command} | head -1"],
        capture_output=True,
        text=True,
        env=demo.env,
        timeout=300,
    )
    assert (result.returncode, result.stderr) == (0, ""), (args, result.stderr)
    assert result.stdout.count("\n") == 1


def test_progress_on_a_terminal_has_count_percent_and_eta(demo: Store) -> None:
    db = demo.fresh("progress.db")
    made = run_in_terminal(["demo", "create", "--db", str(db), "--records", "60000"], 100, demo.env)
    assert "/60000" in made.raw and "%" in made.raw and "eta" in made.raw, made.raw[-2000:]
    assert "writing" in made.raw and "generating" in made.raw
    backup = demo.fresh("backups")
    created = run_in_terminal(
        ["--db", str(db), "backup", "create", "--to", str(backup)], 100, demo.env
    )
    assert "snapshot" in created.raw and "%" in created.raw, created.raw[-2000:]
    checked = run_in_terminal(  # --latest: the newest backup of this store (--db)
        ["--db", str(db), "backup", "verify", "--latest", "--from", str(backup)], 100, demo.env
    )
    assert "checking triggerfish-" in checked.raw and "%" in checked.raw, checked.raw[-2000:]
    assert "integrity check of" in checked.raw
    # off a terminal: no progress at all
    piped = _run(demo, "--db", str(db), "backup", "verify", "--latest", "--from", str(backup))
    assert "checking" not in piped.stderr and "%" not in piped.stderr
