"""Issue 35 through the commands: the 13 shapes `config snapshot` stored with exit 0 are
refused (exit 4) by path, nothing stored, no value printed; ``--redact`` stores none of
them; the env shape is refused by `config import-backups` too; a 478-byte alias bomb
is refused with exit 8 and one line by the installed command."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.config.test_secret_shapes import STORED, Stored
from tests.conftest import CliFn
from tests.test_safe_yaml import billion_laughs

SCRIPT = Path(sys.executable).parent / "triggerfish-admin"
BACKUP = "triggerfish.yaml.2026-02-16T14-30-45.123Z"


@pytest.fixture
def db(base_dir: Path) -> Path:
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    path = base_dir / "data" / "triggerfish.db"
    SqliteStorage(path, create=True).close()
    return path


def rows(db: Path) -> dict[str, str]:
    """Every key and value in the store."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return dict(conn.execute("SELECT key, value FROM kv").fetchall())


def versions(db: Path) -> dict[str, str]:
    return {key: value for key, value in rows(db).items() if key.startswith("config:v")}


def script(*args: str, base: Path) -> subprocess.CompletedProcess[str]:
    """The installed console script, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env["TRIGGERFISH_DATA_DIR"] = str(base)
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def never_echoed(shape: Stored, *outputs: str) -> None:
    for output in outputs:
        for secret in shape.secrets:
            assert secret not in output, shape.name


@pytest.mark.parametrize("fmt", ["table", "json"])
@pytest.mark.parametrize("shape", STORED, ids=[s.name for s in STORED])
def test_snapshot_refuses_each_shape_by_path(
    cli: CliFn, base_dir: Path, db: Path, shape: Stored, fmt: str
) -> None:
    config = base_dir / "triggerfish.yaml"
    config.write_text(shape.text)
    refused = cli("--db", str(db), "--config", str(config), "config", "snapshot", "-f", fmt)
    assert refused.exit_code == 4, refused.stderr
    assert shape.path in refused.stderr and refused.stdout == ""
    assert versions(db) == {}
    checked = cli("--config", str(config), "config", "validate", "-f", fmt)
    assert shape.path in checked.stdout + checked.stderr
    never_echoed(shape, refused.stderr, checked.stdout, checked.stderr)


@pytest.mark.parametrize("shape", STORED, ids=[s.name for s in STORED])
def test_redact_stores_none_of_each_shape(
    cli: CliFn, base_dir: Path, db: Path, shape: Stored
) -> None:
    config = base_dir / "triggerfish.yaml"
    config.write_text(shape.text)
    result = cli(
        "--db", str(db), "--config", str(config), "config", "snapshot", "--redact", "-f", "json"
    )
    assert result.exit_code == 0, result.stderr
    assert result.json()["redacted"] == [shape.path]  # type: ignore[index]
    (record,) = versions(db).values()
    assert [entry["path"] for entry in json.loads(record)["redacted"]] == [shape.path]
    never_echoed(shape, result.stdout, result.stderr, *rows(db).values())


def test_import_backups_refuses_the_env_shape(base_dir: Path, db: Path) -> None:
    (env_shape,) = [s for s in STORED if s.name.startswith("Kubernetes env")]
    config = base_dir / "triggerfish.yaml"
    config.write_text("models: {primary: {model: x}}\n")
    (base_dir / "backups").mkdir()
    (base_dir / "backups" / BACKUP).write_text(env_shape.text)
    for fmt in ("table", "json"):
        refused = script("--db", str(db), "--config", str(config), "config", "import-backups",
                         "-f", fmt, base=base_dir)  # fmt: skip
        assert refused.returncode == 4, refused.stderr
        assert f"{BACKUP}: {env_shape.path}" in refused.stderr
        assert versions(db) == {}
        never_echoed(env_shape, refused.stdout, refused.stderr)


def test_the_alias_bomb_is_refused_with_exit_8_and_one_line(base_dir: Path, db: Path) -> None:
    config = base_dir / "triggerfish.yaml"
    config.write_text(billion_laughs())
    for command in (["config", "validate"], ["config", "snapshot"]):
        result = script("--db", str(db), "--config", str(config), *command, base=base_dir)
        assert result.returncode == 8, (command, result.stderr)
        assert result.stdout == ""
        assert result.stderr.splitlines() == [
            "error: the YAML expands through its aliases from 34 to 490,329,070 values: "
            "refused as an alias bomb (aliases may add at most 10,000)"
        ]
    assert versions(db) == {}


def test_the_alias_bomb_is_refused_everywhere_yaml_is_read(
    cli: CliFn, base_dir: Path, db: Path
) -> None:
    config = base_dir / "triggerfish.yaml"
    config.write_text("models: {primary: {model: x}}\n")
    assert cli("--db", str(db), "--config", str(config), "config", "snapshot").exit_code == 0
    later = "triggerfish.yaml.2099-01-01T00-00-00.000Z"  # newer than v1: it would be imported
    (base_dir / "backups").mkdir()
    (base_dir / "backups" / later).write_text(billion_laughs())
    imported = cli("--db", str(db), "--config", str(config), "config", "import-backups")
    assert imported.exit_code == 8 and f"{later}: the YAML expands" in imported.stderr
    config.write_text(billion_laughs())
    diff = cli("--db", str(db), "--config", str(config), "config", "diff")
    assert diff.exit_code == 8 and "alias bomb" in diff.stderr
    # The storage: section is read by every command: a bomb in the file stops them all.
    config.write_text(billion_laughs() + "storage: {backend: sqlite, path: *i}\n")
    listed = cli("--config", str(config), "kv", "list")
    assert listed.exit_code == 8 and "alias bomb" in listed.stderr
    assert list(versions(db)) == ["config:v1"]
