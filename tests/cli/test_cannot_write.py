"""Exit 9 ("cannot write") for an output path whose directory is missing or is a file.

Every command that writes a file (an export, a backup, a restored or migrated
store, a demo store, an identity) names the path in one line and exits 9, as
for a full or read-only disk; nothing is left behind. Run through the
installed console script.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.script import one_line, run_script
from triggerfish_cli.errors import EXIT_CODES


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    """A regular file where a directory would be wanted."""
    path = tmp_path / "FILE"
    path.write_text("not a directory\n")
    return path


def test_export_into_a_missing_directory_is_exit_9(gateway_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "dir" / "x.jsonl"
    run = run_script("kv", "export", "-o", str(target))
    assert run.returncode == 9, run.stderr
    line = one_line(run.stderr)
    assert line.startswith("error: ") and str(target) in line and "no such directory" in line
    assert not (tmp_path / "nonexistent").exists()
    assert run.stdout == ""


def _backup(tmp_path: Path) -> Path:
    done = run_script("backup", "create", "--to", str(tmp_path / "b"), "-q")
    assert done.returncode == 0, done.stderr
    return next(p for p in (tmp_path / "b").iterdir() if p.name.endswith(".db.zst"))


@pytest.mark.parametrize(
    "command",
    [
        ["kv", "export", "-o", "{file}/x.jsonl"],
        ["backup", "create", "--to", "{file}/sub"],
        ["backup", "restore", "{archive}", "--to", "{file}/x.db", "--other-store", "--yes"],
        ["migrate", "--from", "{db}", "--to", "{file}/new.db", "--yes"],
        ["--db", "{file}/x.db", "demo", "create"],
        ["backup", "keygen", "-o", "{file}/backup.key"],
    ],
    ids=["kv-export", "backup-create", "backup-restore", "migrate", "demo-create", "keygen"],
)
def test_an_output_path_under_a_file_is_exit_9(
    command: list[str], gateway_db: Path, tmp_path: Path, a_file: Path
) -> None:
    archive = _backup(tmp_path) if "{archive}" in command else None
    args = [part.format(file=a_file, archive=archive, db=gateway_db) for part in command]
    run = run_script(*args)
    assert run.returncode == 9, run.stderr
    line = one_line(run.stderr)
    assert str(a_file) in line and "cannot write" in line and "not a directory" in line
    assert a_file.read_text() == "not a directory\n"


def test_exit_9_is_documented_for_a_missing_directory() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert f"| 9 | {EXIT_CODES[9]} |" in readme
    assert "no such directory" in EXIT_CODES[9]
