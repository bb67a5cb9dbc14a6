"""`kv import` (issue 36): --create makes a store, memory rows come in at the taint.

Through the installed console script, as the help example is typed:
``kv export -t RESTRICTED | triggerfish-admin --db copy.db kv import --create
-t RESTRICTED -`` copies a whole demo store, every key and value byte for
byte, in each format ``kv export`` writes, with the memory search index built.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CliFn, StoreHandle
from tests.helpers.gateway import dump_tables, memory_record
from tests.helpers.memories import MAIN, mkey

SCRIPT = str(Path(sys.executable).parent / "triggerfish-admin")
FORMATS = ("jsonl", "json", "csv")


def shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``line`` run by bash in ``cwd`` (pipes as typed), the program named as installed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env["TRIGGERFISH_DATA_DIR"] = str(cwd / "base")
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", line.replace("triggerfish-admin", shlex.quote(SCRIPT))],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def rows(path: Path) -> dict[bytes, bytes]:
    """Every kv row, key and value as their exact bytes."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        found = conn.execute("SELECT CAST(key AS BLOB), CAST(value AS BLOB) FROM kv").fetchall()
    return {bytes(key): bytes(value) for key, value in found}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("demo")
    made = shell("triggerfish-admin --db src.db demo create -r 1500 --now 2026-05-01 -q", where)
    assert made.returncode == 0, made.stderr
    return where / "src.db"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_whole_store_copies_byte_for_byte_through_a_pipe(
    demo: Path, tmp_path: Path, fmt: str
) -> None:
    before = rows(demo)
    assert sum(key.startswith(b"memory:") for key in before) > 50
    line = (
        f"triggerfish-admin --db {demo} kv export -t RESTRICTED -f {fmt} | "
        "triggerfish-admin --db copy.db kv import --create -t RESTRICTED -"
    )
    done = shell(line, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"imported {len(before)} key(s): {len(before)} new")
    copy = rows(tmp_path / "copy.db")
    added = {key: copy.pop(key) for key in set(copy) - set(before)}
    assert copy == before  # every key, every value byte identical
    assert [json.loads(value)["hook"] for value in added.values()] == ["admin_kv_import"]
    assert (tmp_path / "copy.db").stat().st_mode & 0o777 == 0o600
    check = shell(
        "triggerfish-admin --db copy.db memory reindex -t RESTRICTED --dry-run -f json", tmp_path
    )
    drift = json.loads(check.stdout)
    assert drift["tables_missing"] is False and drift["records"] > 50
    assert (drift["missing"], drift["stale"], drift["orphaned"]) == (0, 0, 0)
    assert drift["in_sync"] == drift["records"]


def test_a_missing_store_is_exit_7_and_the_hint_names_create(demo: Path, tmp_path: Path) -> None:
    line = (
        f"triggerfish-admin --db {demo} kv export -t RESTRICTED "
        "| triggerfish-admin --db copy.db kv import -t RESTRICTED -"
    )
    done = shell(line, tmp_path)
    assert done.returncode == 7
    assert "kv import --create" in done.stderr and "demo create" not in done.stderr
    assert not (tmp_path / "copy.db").exists()


def test_create_refuses_a_store_that_holds_keys(demo: Path, tmp_path: Path) -> None:
    export = tmp_path / "all.jsonl"
    assert shell(f"triggerfish-admin --db {demo} kv export -t RESTRICTED -o {export}",
                 tmp_path).returncode == 0  # fmt: skip
    before = dump_tables(demo)
    again = shell(f"triggerfish-admin --db {demo} kv import --create -t RESTRICTED {export}",
                  tmp_path)  # fmt: skip
    assert again.returncode == 4
    assert "already holds" in again.stderr and "without --create" in again.stderr
    assert dump_tables(demo) == before


def test_create_takes_an_empty_file_and_a_dry_run_makes_nothing(
    demo: Path, tmp_path: Path
) -> None:
    export = tmp_path / "all.jsonl"
    assert shell(f"triggerfish-admin --db {demo} kv export -t RESTRICTED -o {export}",
                 tmp_path).returncode == 0  # fmt: skip
    dry = shell(f"triggerfish-admin --db new.db kv import --create -t RESTRICTED {export} -n "
                "-f json", tmp_path)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["new"] == len(export.read_text().splitlines())
    assert not (tmp_path / "new.db").exists()
    (tmp_path / "empty.db").touch()
    done = shell(f"triggerfish-admin --db empty.db kv import --create -t RESTRICTED {export}",
                 tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_memory_rows_above_the_taint_refuse_the_whole_import(
    demo: Path, tmp_path: Path, fmt: str
) -> None:
    export = tmp_path / f"all.{fmt}"
    assert shell(f"triggerfish-admin --db {demo} kv export -t RESTRICTED -o {export}",
                 tmp_path).returncode == 0  # fmt: skip
    target = tmp_path / "target.db"
    assert shell(f"triggerfish-admin --db {target} demo create -r 50 -q", tmp_path).returncode == 0
    before = dump_tables(target)
    refused = shell(f"triggerfish-admin --db {target} kv import -t INTERNAL {export}", tmp_path)
    assert refused.returncode == 4
    assert "above the taint INTERNAL" in refused.stderr and "nothing was written" in refused.stderr
    assert dump_tables(target) == before
    made = shell(f"triggerfish-admin --db new.db kv import --create {export}", tmp_path)
    assert made.returncode == 4 and "above the taint PUBLIC" in made.stderr
    assert not (tmp_path / "new.db").exists()


def test_a_record_stating_a_higher_level_than_its_key_counts_at_that_level(
    cli: CliFn, store: StoreHandle
) -> None:
    value = memory_record("plan", "CONFIDENTIAL", "the merger plan")
    line = json.dumps({"key": mkey(MAIN, "PUBLIC", "plan"), "value": value}) + "\n"
    refused = cli(*store.args, "kv", "import", "-", input=line)
    assert refused.exit_code == 4 and "above the taint PUBLIC" in refused.stderr
    assert store.contents() == {}


def test_memory_rows_are_imported_into_a_store_and_found_by_search(
    cli: CliFn, store: StoreHandle
) -> None:
    """On every backend: the rows land, and the index is kept in step (search finds them)."""
    lines = [
        {"key": "prefs:owner:bumpers_default", "value": "true"},
        {"key": mkey(MAIN, "PUBLIC", "drink"), "value": memory_record("drink", "PUBLIC",
                                                                       "likes green tea")},
        {"key": mkey(MAIN, "INTERNAL", "vault"), "value": memory_record("vault", "INTERNAL",
                                                                        "vault combination")},
    ]  # fmt: skip
    text = "".join(json.dumps(line) + "\n" for line in lines)
    made = cli(*store.args, "memory", "reindex", "-t", "RESTRICTED")  # the index tables, as the
    assert made.exit_code == 0, made.stderr  # gateway makes them when it starts
    done = cli(*store.args, "kv", "import", "-", "--taint", "INTERNAL", "-f", "json", input=text)
    assert done.exit_code == 0, done.stderr
    assert done.json()["memories"] == 2  # type: ignore[index]
    found = cli(*store.args, "memory", "search", "green", "tea", "-f", "json")
    assert [hit["key"] for hit in found.json()] == ["drink"]  # type: ignore[union-attr]
    hidden = cli(*store.args, "memory", "search", "vault", "-f", "json")
    assert hidden.json() == []
    seen = cli(*store.args, "memory", "search", "vault", "-t", "INTERNAL", "-f", "json")
    assert [hit["key"] for hit in seen.json()] == ["vault"]  # type: ignore[union-attr]
    changed = text.replace("green tea", "black coffee")
    assert cli(*store.args, "kv", "import", "-", "-t", "INTERNAL", input=changed).exit_code == 0
    assert cli(*store.args, "memory", "search", "green", "-f", "json").json() == []
    again = cli(*store.args, "memory", "search", "coffee", "-f", "json")
    assert [hit["key"] for hit in again.json()] == ["drink"]  # type: ignore[union-attr]
    drift = cli(*store.args, "memory", "reindex", "-t", "INTERNAL", "-n", "-f", "json").json()
    assert [drift[name] for name in ("missing", "stale", "orphaned")] == [0, 0, 0]  # type: ignore[index]
