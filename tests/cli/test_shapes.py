"""One shape for every command: -f json in every position, results on stdout, one grammar.

Also: every command's --help ends with examples that are real commands,
--exit-code for cron alerts, and the man page installed with the package.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers.services import unavailable
from triggerfish_cli.cli.command_tree import command_tree, walk

ROOT = Path(__file__).resolve().parents[2]

#: Every command that prints data, with the arguments it needs (read-only or dry runs).
DATA_COMMANDS: list[list[str]] = [
    ["kv", "namespaces"],
    ["kv", "namespaces", "--ages"],
    ["kv", "list"],
    ["kv", "list", "--keys-only"],
    ["kv", "get", "prefs:owner:bumpers_default"],
    ["kv", "export", "sessions:"],
    ["kv", "delete", "nocolon", "--dry-run"],
    ["kv", "delete", "--prefix", "custom:", "--dry-run"],
    ["kv", "clear", "--dry-run"],
    ["memory", "search", "alice"],
    ["memory", "get", "user-name"],
    ["memory", "list", "-A"],
    ["memory", "history", "user-name"],
    ["memory", "stats"],
    ["memory", "reindex", "--dry-run"],
    ["memory", "purge", "--older-than", "1d", "--dry-run"],
    ["retention", "policies"],
    ["retention", "plan"],
    ["retention", "plan", "--list"],
    ["retention", "sweep", "--dry-run"],
    ["config", "history"],
    ["config", "show"],
    ["config", "diff"],
    ["config", "validate"],
    ["config", "snapshot", "--dry-run"],
    ["config", "import-backups", "--dry-run"],
    ["backup", "list"],
    ["backup", "prune", "--keep-last", "1", "--dry-run"],
    ["help", "kv", "list"],
]


@pytest.fixture
def stocked(cli: CliFn, gateway_db: Path, base_dir: Path) -> Path:
    (base_dir / "triggerfish.yaml").write_text("models:\n  primary: a\n", encoding="utf-8")
    assert cli("config", "snapshot").exit_code == 0
    (base_dir / "triggerfish.yaml").write_text("models:\n  primary: b\n", encoding="utf-8")
    return gateway_db


@pytest.mark.parametrize("args", DATA_COMMANDS, ids=[" ".join(a) for a in DATA_COMMANDS])
def test_format_json_in_every_position(cli: CliFn, stocked: Path, args: list[str]) -> None:
    group, rest = args[0], args[1:]
    placements = {
        "before the group": ["-f", "json", *args],
        "after the command": [*args, "-f", "json"],
        "between group and command": [group, "--format", "json", *rest],
        "long form at the end": [*args, "--format=json"],
    }
    for where, argv in placements.items():
        result = cli(*argv)
        assert result.exit_code == 0, (where, argv, result.stderr)
        json.loads(result.stdout)  # parseable, whatever the place
    from_env = cli(*args, env={"TRIGGERFISH_FORMAT": "json"})
    assert from_env.exit_code == 0, from_env.stderr
    json.loads(from_env.stdout)
    # the command's own option overrides the global one, which overrides the environment
    own = cli("-f", "csv", *args, "-f", "json", env={"TRIGGERFISH_FORMAT": "jsonl"})
    json.loads(own.stdout)


def test_results_on_stdout_messages_on_stderr(cli: CliFn, stocked: Path, base_dir: Path) -> None:
    dry = cli("kv", "delete", "--prefix", "custom:", "--dry-run")
    assert dry.exit_code == 0 and dry.stderr == ""
    assert dry.stdout.splitlines() == [
        "would delete 1 key(s) under 'custom:', e.g.:",
        "  custom:thing:1",
    ]
    done = cli("kv", "set", "ux:x", "1")
    assert (done.stdout, done.stderr) == ("set ux:x (1 bytes)\n", "")
    deleted = cli("kv", "delete", "ux:x", "--yes")
    assert (deleted.stdout, deleted.stderr) == ("deleted ux:x\n", "")
    (base_dir / "backups").mkdir(exist_ok=True)
    copy = base_dir / "backups" / "triggerfish.yaml.2099-02-16T14-30-45.123Z"
    copy.write_text("models:\n  primary: c\n", encoding="utf-8")
    imported = cli("config", "import-backups")
    assert imported.stderr == "", imported.stderr
    assert imported.stdout.splitlines()[-1].startswith("imported 1 copy from")
    purge = cli("memory", "purge", "--older-than", "1d", "--dry-run", "--taint", "PUBLIC")
    assert purge.stderr == "" and purge.stdout.startswith("would purge 1 record(s)")
    assert "memory:main-session:PUBLIC:old-fact" in purge.stdout


def test_csv_shapes(cli: CliFn, stocked: Path) -> None:
    lines = cli("kv", "namespaces", "-f", "csv").stdout.splitlines()
    assert lines[0] == "namespace,known,description,keys,bytes"
    assert any(",true," in line for line in lines) and any(",false," in line for line in lines)
    stats = cli("memory", "stats", "-f", "csv").stdout.splitlines()
    assert stats[0] == "agent,level,live,deleted,shadowed"
    assert stats[1].startswith("main-session,PUBLIC,") and len(stats) == 3
    history = cli("config", "history", "-f", "csv").stdout.splitlines()[0].split(",")
    assert "created_at" in history and "restored_from" in history


def test_one_duration_grammar_and_dates(cli: CliFn, stocked: Path, base_dir: Path) -> None:
    for duration in ("1y", "2w", "1d12h", "90s", "30m"):
        result = cli("memory", "purge", "--older-than", duration, "--dry-run", "-f", "json")
        assert result.exit_code == 0, (duration, result.stderr)
    bad = cli("memory", "purge", "--older-than", "1 fortnight", "--dry-run")
    assert bad.exit_code == 2 and "s, m, h, d, w or y" in bad.stderr
    (base_dir / "triggerfish.yaml").write_text(
        "models:\n  primary: b\nretention:\n  sessions: 1d12h\n  conv: 1y\n", encoding="utf-8"
    )
    policies = {row["namespace"]: row for row in cli("retention", "policies", "-f", "json").json()}  # type: ignore[union-attr]
    assert policies["sessions:"]["policy"] == "36h" and policies["conv:"]["policy"] == "1y"
    for moment in ("2027-01-01", "2027-01-01T00:00:00Z", "2027-01-01T02:00:00+02:00"):
        plan = cli("retention", "plan", "--as-of", moment, "-f", "json")
        assert plan.exit_code == 0, plan.stderr
    info = cli("retention", "plan", "--as-of", "2027-01-01").stderr
    assert "plan as of 2027-01-01T00:00:00.000Z" in info
    assert cli("retention", "plan", "--as-of", "2027-13-01").exit_code == 2
    made = cli("demo", "create", "--db", str(base_dir / "d.db"), "-r", "30", "--now", "2026-05-01")
    assert made.exit_code == 0, made.stderr


def test_exit_code_for_cron_alerts(cli: CliFn, stocked: Path) -> None:
    differs = cli("config", "diff", "--exit-code")
    assert differs.exit_code == 1 and "+  primary: b" in differs.stdout
    quiet = cli("-q", "config", "diff", "--exit-code")
    assert (quiet.exit_code, quiet.stdout) == (1, "")
    assert cli("config", "snapshot").exit_code == 0
    same = cli("config", "diff", "--exit-code")
    assert (same.exit_code, same.stdout) == (0, "")
    assert cli("config", "diff").exit_code == 0  # without it, differences are no failure
    work = cli("retention", "plan", "--exit-code", "--as-of", "2030-01-01", "-q")
    assert (work.exit_code, work.stdout) == (1, "")
    none = cli("retention", "plan", "--exit-code", "--as-of", "2026-01-01", "-f", "json")
    assert none.exit_code == 0 and json.loads(none.stdout)


def test_validate_columns_are_1_based_and_only_when_known(cli: CliFn, base_dir: Path) -> None:
    config = base_dir / "triggerfish.yaml"
    config.write_text("models: {}\nmodels: {}\nweird: 1\n", encoding="utf-8")
    lines = cli("config", "validate").stdout.splitlines()
    assert f"{config}:2:1: error: duplicate key 'models' (first at line 1)" in lines
    config.write_text("models:\n  a: [1\n", encoding="utf-8")
    broken = cli("config", "validate", "-f", "json").json()
    problem = broken["errors"][0]  # type: ignore[index]
    text = cli("config", "validate").stdout
    assert f":{problem['line']}:{problem['column']}: error:" in text and problem["column"] >= 1
    config.write_text("retention:\n  sessions: nonsense\n", encoding="utf-8")
    for line in cli("config", "validate").stdout.splitlines():
        assert ":0" not in line.split(": ")[0], line  # never a made-up column 0


def test_every_help_ends_with_real_examples(cli: CliFn) -> None:
    nodes = {node["path"]: node for node in walk(command_tree())}
    root_opts = {opt for p in nodes["triggerfish-admin"]["params"] for opt in p["opts"]}
    flags = {
        opt: bool(p.get("flag"))
        for node in nodes.values()
        for p in node["params"]
        if p["kind"] == "option"
        for opt in (*p["opts"], *p["secondary_opts"])
    }
    for path, node in nodes.items():
        if node["commands"] or path == "triggerfish-admin":
            continue
        examples = node["examples"]
        assert 1 <= len(examples) <= 2, path
        help_text = cli(*path.split()[1:], "--help").stdout.rstrip()
        assert help_text.splitlines()[-1].strip() == examples[-1], path
        assert help_text.splitlines()[-len(examples) - 2].strip() == "Examples:", path
        for line in examples:
            named = []
            for segment in line.split("|"):
                if "triggerfish-admin" not in segment:
                    continue
                segment = segment[segment.index("triggerfish-admin") :]
                words = shlex.split(segment.split(">")[0].split("<")[0])
                plain, skip = [], False
                for word in words:
                    if skip:
                        skip = False
                    elif word.startswith("-") and word != "-":
                        skip = "=" not in word and not flags.get(word, True)
                    else:
                        plain.append(word)
                command = " ".join(plain[:3])
                while command not in nodes:  # drop option values and arguments
                    command = command.rsplit(" ", 1)[0]
                named.append(command)
                node_opts = {
                    opt
                    for p in nodes[command]["params"]
                    for opt in (*p["opts"], *p["secondary_opts"])
                }
                for word in words:
                    if word.startswith("-") and word != "-":
                        assert word.split("=")[0] in node_opts | root_opts, (path, line, word)
            assert path in named, (path, line)
    man = (ROOT / "man" / "triggerfish-admin.1").read_text()
    assert "triggerfish\\-admin kv list sessions: \\-\\-limit 3" in man


@pytest.mark.slow
def test_man_page_installs_with_the_package(tmp_path: Path) -> None:
    if shutil.which("man") is None:
        unavailable("man is not installed")
    venv, source = tmp_path / "venv", tmp_path / "source"
    # build from a copy: a build in the checkout would leave build/ behind in it
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "tests", "bench", "__pycache__"
        ),
    )
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "-q", "--no-deps", str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    page = venv / "share" / "man" / "man1" / "triggerfish-admin.1"
    assert page.read_text() == (ROOT / "man" / "triggerfish-admin.1").read_text()
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MANPATH", None)
    found = subprocess.run(
        ["man", "-w", "triggerfish-admin"], capture_output=True, text=True, env=env, timeout=60
    )
    assert found.returncode == 0 and Path(found.stdout.strip()).resolve() == page.resolve()
