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
from triggerfish_cli.cli.command_tree import command_tree, walk
from triggerfish_cli.cli.reference import generated_files
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


@pytest.mark.slow
def test_readme_example_outputs_are_fresh() -> None:
    """The README's example outputs are what the commands print on the fixed demo store."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from readme_examples import README, render
    finally:
        sys.path.pop(0)
    text = README.read_text(encoding="utf-8")
    assert "<!-- example-output: kv namespaces" in text
    fresh = render(text)
    assert fresh == text, "stale README example outputs; run `python scripts/generate_docs.py`"
    assert "$ triggerfish-admin kv list sessions: --limit 3\nkey" in text


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


def test_man_page_examples_are_real_commands() -> None:
    """Each EXAMPLES line names an existing command, and only options that command has."""
    import shlex

    from triggerfish_cli.cli.manpage import EXAMPLES

    nodes = {node["path"]: node for node in walk(command_tree())}
    root_opts = {opt for param in nodes["triggerfish-admin"]["params"] for opt in param["opts"]}
    captions = " ".join(caption for caption, _ in EXAMPLES)
    for needed in ("cron", "backup", "memory", "INTERNAL", "Roll"):
        assert needed in captions, needed
    commands = set()
    for _, text in EXAMPLES:
        for line in text.splitlines():
            line = line[line.index("triggerfish-admin") :]
            words = shlex.split(line.split(">")[0].split(")")[0])
            path = " ".join([w for w in words if not w.startswith("-")][:3])
            while path not in nodes:
                path = path.rsplit(" ", 1)[0]
            assert path.count(" ") == 2, line  # a group and its command
            commands.add(path)
            opts = {opt for param in nodes[path]["params"] for opt in param["opts"]}
            for word in words:
                if word.startswith("-"):
                    assert word in opts | root_opts, (line, word)
    man = (ROOT / "man" / "triggerfish-admin.1").read_text()
    assert "retention sweep \\-\\-yes \\-\\-quiet" in man
    for needed in (
        "triggerfish-admin retention sweep",
        "triggerfish-admin memory search",
        "triggerfish-admin config rollback",
    ):
        assert needed in commands


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
t triggerfish-admin config show ""
t triggerfish-admin config rollback v
t triggerfish-admin config diff 1
"""


def _bash_completes(code: str) -> str:
    """What ``code`` prints in a real bash with our completion script sourced."""
    script = ROOT / "completions" / "triggerfish-admin.bash"
    result = subprocess.run(
        ["bash", "--norc", "-c", code, "bash", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_bash_completion_in_a_real_bash(gateway_db: Path, base_dir: Path, cli: CliFn) -> None:
    config = base_dir / "triggerfish.yaml"
    for n in range(1, 13):  # 12 snapshots: the 10 newest stay, v3..v12
        config.write_text(f"models:\n  primary: model-{n}\n", encoding="utf-8")
        assert cli("config", "snapshot").exit_code == 0
    lines = _bash_completes(BASH).splitlines()
    assert {"kv", "demo", "help", "completion"} <= set(lines[0].split())
    assert lines[1].split() == ["list"]
    assert lines[2].split() == ["csv", "json", "jsonl", "table"]
    assert lines[3].split() == ["lineage", "lineage-fwd", "lineage-hash", "lineage-session"]
    assert lines[4].split() == ["--keys-only"]
    assert {"sqlite", "memory"} <= set(lines[5].split())
    assert lines[6].split() == ["CONFIDENTIAL"]
    assert {"search", "get", "list", "save", "delete"} <= set(lines[7].split())
    assert {"kv", "memory", "config"} <= set(lines[0].split())
    versions = [str(n) for n in range(3, 13)]
    assert sorted(lines[8].split(), key=int) == versions  # read from the store, newest kept
    assert sorted(lines[9].split(), key=lambda v: int(v[1:])) == [f"v{n}" for n in versions]
    assert lines[10].split() == ["10", "11", "12"]


def test_version_completion_never_creates_a_store(base_dir: Path) -> None:
    code = BASH.split("t triggerfish-admin")[0] + 't triggerfish-admin config show ""\n'
    assert _bash_completes(code).strip() == ""
    assert not (base_dir / "data" / "triggerfish.db").exists()


ZSH = r"""
autoload -U compinit; compinit -u; source "$1"
_arguments() { print -r -- "$@" }
t() { words=("$@"); CURRENT=${#words}; _triggerfish_admin_completion }
t triggerfish-admin kv l
t triggerfish-admin kv list --namespace lin
t triggerfish-admin config show ''
"""

FISH = r"""
source $argv[1]
for line in 'triggerfish-admin kv l' 'triggerfish-admin kv list --namespace lin' \
            'triggerfish-admin config show '
    complete -C "$line" | string split -f1 \t | sort | string join ' '
end
"""


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_other_shells_complete_in_a_real_shell(
    shell: str, gateway_db: Path, base_dir: Path, cli: CliFn
) -> None:
    if shutil.which(shell) is None:
        unavailable(f"{shell} is not installed (.ci/run installs it)")
    config = base_dir / "triggerfish.yaml"
    for n in (1, 2):
        config.write_text(f"models:\n  primary: model-{n}\n", encoding="utf-8")
        assert cli("config", "snapshot").exit_code == 0
    name = "_triggerfish-admin" if shell == "zsh" else "triggerfish-admin.fish"
    script = ROOT / "completions" / name
    args = ["zsh", "-f", "-c", ZSH, "zsh"] if shell == "zsh" else ["fish", "-c", FISH, "--"]
    result = subprocess.run(
        [*args, str(script)], capture_output=True, text=True, timeout=120, env=_env()
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    if shell == "zsh":  # typer hands zsh one _arguments spec per call
        assert lines[0].startswith("*: :((") and '"list"' in lines[0]
        assert '"lineage-session"' in lines[1] and '"sessions"' not in lines[1]
        assert lines[2] == '*: :(("2" "1"))'
    else:
        assert "list" in lines[0].split()
        assert lines[1].split() == ["lineage", "lineage-fwd", "lineage-hash", "lineage-session"]
        assert lines[2].split() == ["1", "2"]
