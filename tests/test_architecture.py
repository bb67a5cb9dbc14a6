"""The layering rules of DESIGN.md, checked on the source."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "triggerfish_cli"


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_core_never_imports_typer_or_rich() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.relative_to(PACKAGE).parts[:1]:
            continue
        assert not imports_of(path) & {"typer", "rich", "click"}, path


def test_only_output_imports_rich() -> None:
    for path in (PACKAGE / "cli").rglob("*.py"):
        if path.name != "output.py":
            assert "rich" not in imports_of(path), path


def test_core_never_prints_or_exits() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.relative_to(PACKAGE).parts[:1] or path.name == "__main__.py":
            continue
        if path.relative_to(PACKAGE).as_posix() == "storage/watchdog.py":
            continue  # a program of its own (the write gate's watchdog process)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("print", "exit", "quit"), (path, node.lineno)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                assert (node.value.id, node.attr) != ("sys", "exit"), (path, node.lineno)


def test_startup_does_not_import_heavy_modules(gateway_db: Path) -> None:
    code = (
        "import sys\n"
        "from triggerfish_cli.cli.app import app\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(app, ['kv', 'get', 'prefs:owner:bumpers_default', '--raw'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = {'rich', 'yaml', 'sqlite_utils', 'zstandard', 'psycopg', 'boto3', 'orjson'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_ruff_and_mypy_are_clean() -> None:
    root = PACKAGE.parent
    ruff = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--quiet", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    mypy = subprocess.run(
        [sys.executable, "-m", "mypy"], capture_output=True, text=True, timeout=300, cwd=root
    )
    assert mypy.returncode == 0, mypy.stdout + mypy.stderr
