"""No write-down through the paths that bring rows in: migrate --merge and restore --merge.

A crafted source can hold ``memory:<agent>:PUBLIC:<key>`` rows whose record
says another level (or agent, or key), or a PUBLIC copy of a higher memory's
content. Merged into a store that holds memories, that would publish them
at PUBLIC. Both refuse such rows, naming them, and write nothing, as ``kv
import`` does into a store with data (tests/cli/kv/test_import.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import memory_record
from tests.helpers.memories import MAIN, mkey, write_memory_store
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

CRAFTED = {
    "level": (
        mkey(MAIN, "PUBLIC", "leak"),
        memory_record("leak", "RESTRICTED", "Merger with Globex is planned for Q3"),
    ),
    "agent": (
        mkey(MAIN, "PUBLIC", "other-agent"),
        memory_record("other-agent", "PUBLIC", "x", agent="scheduler-slack-1712000000000"),
    ),
    "key": (mkey(MAIN, "PUBLIC", "renamed"), memory_record("merger", "PUBLIC", "x")),
    "copy": (
        mkey(MAIN, "PUBLIC", "user-name"),
        memory_record("user-name", "PUBLIC", "Alice's passport number is X1234567"),
    ),
}


def source_store(path: Path, row: tuple[str, str]) -> Path:
    with SqliteStorage(path, create=True) as store:
        store.set_many([row, ("sessions:extra", "{}")])
    return path


def contents(path: Path) -> dict[str, str]:
    with SqliteStorage(path) as store:
        return {k: v for k, v in store.scan() if not k.startswith("audit:")}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_migrate_merge_refuses_rows_whose_key_and_record_disagree(
    cli: CliFn, base_dir: Path, tmp_path: Path, case: str
) -> None:
    target = write_memory_store(base_dir / "data" / "triggerfish.db")
    before = contents(target)
    source = source_store(tmp_path / "crafted.db", CRAFTED[case])
    done = cli("migrate", "--from", str(source), "--to", str(target), "--merge", "--yes")
    assert done.exit_code == 4, done.stderr
    assert CRAFTED[case][0] in done.stderr
    assert "passport" not in done.stderr and "Globex" not in done.stderr
    assert contents(target) == before


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_restore_merge_refuses_rows_whose_key_and_record_disagree(
    cli: CliFn, base_dir: Path, tmp_path: Path, case: str
) -> None:
    target = write_memory_store(base_dir / "data" / "triggerfish.db")
    before = contents(target)
    source = source_store(tmp_path / "crafted.db", CRAFTED[case])
    made = cli(
        "--db",
        str(source),
        "backup",
        "create",
        "--logical",
        "--to",
        str(tmp_path / "b"),
        "-f",
        "json",
    )
    assert made.exit_code == 0, made.stderr
    archive = tmp_path / "b" / json.loads(made.stdout)["name"]  # type: ignore[index]
    done = cli(  # a backup of another store (the crafted one): --other-store to get that far
        "--db", str(target), "backup", "restore", str(archive), "--merge", "--yes", "--other-store"
    )
    assert done.exit_code == 4, done.stderr
    assert CRAFTED[case][0] in done.stderr
    assert contents(target) == before


def test_honest_rows_still_merge(cli: CliFn, base_dir: Path, tmp_path: Path) -> None:
    target = write_memory_store(base_dir / "data" / "triggerfish.db")
    row = (mkey(MAIN, "PUBLIC", "new-fact"), memory_record("new-fact", "PUBLIC", "Likes tea"))
    source = source_store(tmp_path / "honest.db", row)
    done = cli("migrate", "--from", str(source), "--to", str(target), "--merge", "--yes")
    assert done.exit_code == 0, done.stderr
    assert contents(target)[row[0]] == row[1]
