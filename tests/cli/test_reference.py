"""Generated files (man page, CLI reference, completions), help --json, shell completion."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers.services import unavailable
from triggerfish_cli.cli.reference import command_tree, generated_files, walk
from triggerfish_cli.errors import EXIT_CODES

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_generated_files_are_fresh() -> None:
    stale = [
        relative
        for relative, content in generated_files().items()
        if not (ROOT / relative).exists() or (ROOT / relative).read_text() != content
    ]
    assert not stale, f"stale: {stale}; run `python scripts/generate_docs.py`"


def test_every_command_and_option_has_help() -> None:
    missing = []
    for node in walk(command_tree()):
        if not node["help"]:
            missing.append(node["path"])
        for param in node["params"]:
            if not param["help"]:
                missing.append(f"{node['path']} {param['opts'] or param['name']}")
    assert not missing, missing


def test_help_json_is_the_whole_tree(cli: CliFn) -> None:
    result = cli("help", "--json")
    assert result.exit_code == 0, result.stderr
    tree = result.json()
    paths = {node["path"] for node in walk(tree)}  # type: ignore[arg-type]
    assert {
        "triggerfish-admin",
        "triggerfish-admin kv",
        "triggerfish-admin kv list",
        "triggerfish-admin demo create",
    } <= paths
    kv_list = next(n for n in walk(tree) if n["path"] == "triggerfish-admin kv list")  # type: ignore[arg-type]
    fmt = next(p for p in kv_list["params"] if p["name"] == "fmt")
    assert fmt["choices"] == ["table", "json", "jsonl", "csv"]
    root_db = next(p for p in tree["params"] if p["name"] == "db")  # type: ignore[index]
    assert root_db["envvar"] == "TRIGGERFISH_DB"
    sub = cli("help", "kv", "list", "--json").json()
    assert sub["path"] == "triggerfish-admin kv list"  # type: ignore[index]
    text = cli("help", "kv", "list")
    assert text.exit_code == 0 and "--keys-only" in text.stdout
    assert cli("help", "nope").exit_code == 2


def test_man_page_is_complete() -> None:
    man = (ROOT / "man" / "triggerfish-admin.1").read_text()
    first = man.splitlines()[0]
    assert first.startswith('.\\"') and "Generated" in first
    assert '.TH TRIGGERFISH\\-ADMIN 1 ""' in man  # no build date
    for section in (
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "GLOBAL OPTIONS",
        "COMMANDS",
        "ENVIRONMENT",
        "FILES",
        "EXIT STATUS",
        "EXAMPLES",
        "SEE ALSO",
    ):
        assert f".SH {section}\n" in man, section
    tree = command_tree()
    for node in walk(tree):
        assert node["path"].replace("-", "\\-") in man, node["path"]
        for param in node["params"]:
            for opt in param["opts"]:
                if opt.startswith("-"):
                    assert opt.replace("-", "\\-") in man, (node["path"], opt)
    for code in EXIT_CODES:
        assert f".TP\n\\fB{code}\\fR\n" in man
    for variable in (
        "TRIGGERFISH_DATA_DIR",
        "TRIGGERFISH_DB",
        "TRIGGERFISH_CONFIG",
        "TRIGGERFISH_BACKEND",
        "TRIGGERFISH_FORMAT",
        "NO_COLOR",
    ):
        assert f"\\fB{variable.replace('-', '')}\\fR" in man, variable


def test_man_page_renders_without_warnings() -> None:
    if shutil.which("groff") is None or shutil.which("man") is None:
        unavailable("groff and man are not installed")
    page = ROOT / "man" / "triggerfish-admin.1"
    groff = subprocess.run(
        ["groff", "-man", "-ww", "-z", str(page)], capture_output=True, text=True, timeout=60
    )
    assert groff.returncode == 0 and groff.stderr == "", groff.stderr
    rendered = subprocess.run(
        ["man", "-l", str(page)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80"},
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "EXIT STATUS" in rendered.stdout and "triggerfish-admin kv list" in rendered.stdout


def test_markdown_reference_lists_everything() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    assert doc.startswith("<!-- Generated")
    for node in walk(command_tree()):
        assert f"`{node['path']}`" in doc


def test_completion_command_prints_the_committed_scripts(cli: CliFn) -> None:
    for shell, name in (
        ("bash", "triggerfish-admin.bash"),
        ("zsh", "_triggerfish-admin"),
        ("fish", "triggerfish-admin.fish"),
    ):
        result = cli("completion", shell)
        assert result.exit_code == 0
        assert result.stdout == (ROOT / "completions" / name).read_text()
    assert cli("completion", "tcsh").exit_code == 2


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


BASH = r"""
source "$1"
t() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMP_LINE="$*";
      COMPREPLY=(); _triggerfish_admin_completion triggerfish-admin;
      printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '; echo; }
t triggerfish-admin ""
t triggerfish-admin kv l
t triggerfish-admin --format ""
t triggerfish-admin kv list --namespace lin
t triggerfish-admin kv list --k
t triggerfish-admin --backend ""
t triggerfish-admin memory search --taint C
t triggerfish-admin memory ""
"""


def test_bash_completion_in_a_real_bash(gateway_db: Path) -> None:
    script = ROOT / "completions" / "triggerfish-admin.bash"
    result = subprocess.run(
        ["bash", "--norc", "-c", BASH, "bash", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert {"kv", "demo", "help", "completion"} <= set(lines[0].split())
    assert lines[1].split() == ["list"]
    assert lines[2].split() == ["csv", "json", "jsonl", "table"]
    assert lines[3].split() == ["lineage", "lineage-fwd", "lineage-hash", "lineage-session"]
    assert lines[4].split() == ["--keys-only"]
    assert {"sqlite", "memory"} <= set(lines[5].split())
    assert lines[6].split() == ["CONFIDENTIAL"]
    assert {"search", "get", "list", "save", "delete"} <= set(lines[7].split())
    assert {"kv", "memory", "config"} <= set(lines[0].split())


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_other_shells_load_the_script(shell: str) -> None:
    if shutil.which(shell) is None:
        unavailable(f"{shell} is not installed (.ci/run installs it)")
    name = "_triggerfish-admin" if shell == "zsh" else "triggerfish-admin.fish"
    script = ROOT / "completions" / name
    if shell == "fish":
        code = f"source {script}; complete -C 'triggerfish-admin kv l'"
    else:
        code = (
            f"autoload -U compinit; compinit -u; source {script}; "
            "whence -w _triggerfish_admin_completion"
        )
    result = subprocess.run(
        [shell, "-c", code], capture_output=True, text=True, timeout=120, env=_env()
    )
    assert result.returncode == 0, result.stderr
    assert ("list" in result.stdout) if shell == "fish" else ("function" in result.stdout)
