"""The root command: version, global options, store location, the error boundary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import write_gateway_store
from triggerfish_cli import __version__
from triggerfish_cli.errors import EXIT_CODES


def test_version(cli: CliFn) -> None:
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout == f"triggerfish-admin {__version__}\n"


def test_no_arguments_shows_help(cli: CliFn) -> None:
    result = cli()
    assert "kv" in result.stdout + result.stderr
    assert "demo" in result.stdout + result.stderr
    # the normal help, on stdout, exit 0: the same text as --help
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == cli("--help").stdout
    for group in ("kv", "memory", "config", "backup", "retention", "demo"):
        bare = cli(group)
        assert (bare.exit_code, bare.stderr) == (0, ""), group
        assert bare.stdout == cli(group, "--help").stdout and "Commands:" in bare.stdout


def test_global_options_after_the_command(cli: CliFn, gateway_db: Path, base_dir: Path) -> None:
    other = base_dir / "other.db"
    made = cli("demo", "create", "--db", str(other), "-r", "50", "--no-color", "-q")
    assert made.exit_code == 0, made.stderr
    assert other.exists()
    listed = cli("kv", "list", "--db", str(other), "--format", "json")
    assert listed.exit_code == 0 and len(listed.json()) >= 50  # type: ignore[arg-type]
    # a value after the command overrides one before it, which overrides the environment
    after = cli("--db", str(gateway_db), "kv", "list", "--db", str(other), "-f", "json")

    def unaudited(rows: object) -> list[object]:  # each raw listing of memory keys is audited
        return [row for row in rows if not row["key"].startswith("audit:")]  # type: ignore[attr-defined, index]

    assert unaudited(after.json()) == unaudited(listed.json())
    env = {"TRIGGERFISH_FORMAT": "csv"}
    assert cli("kv", "get", "prefs:owner:bumpers_default", env=env).stdout.startswith("key,value")
    assert cli("-f", "json", "kv", "get", "prefs:owner:bumpers_default", env=env).json() == {
        "key": "prefs:owner:bumpers_default",
        "value": "true",
    }
    raw = cli("-f", "json", "kv", "get", "prefs:owner:bumpers_default", "--raw")
    assert raw.stdout == "true"  # --raw: the exact bytes, whatever the format
    assert cli("kv", "export", "-f", "csv").stdout.startswith("key,value\n")
    assert cli("-f", "csv", "kv", "export").stdout.startswith("key,value\n")


def test_group_listing_matches_each_groups_help(cli: CliFn) -> None:
    import importlib

    from triggerfish_cli.cli.boundary import GROUPS

    for name, (target, listed) in GROUPS.items():
        module, _, attribute = target.partition(":")
        app = getattr(importlib.import_module(module), attribute or "app")
        assert app.info.name == name
        assert app.info.help.splitlines()[0] == listed
        assert name in cli("--help").stdout


def test_usage_error_is_one_line_exit_2(cli: CliFn) -> None:
    result = cli("kv", "list", "--no-such-option")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: triggerfish-admin kv list: No such option")


def test_unknown_command_exit_2(cli: CliFn) -> None:
    result = cli("nope")
    assert result.exit_code == 2
    assert "No such command" in result.stderr


def test_errors_are_never_read_as_markup(cli: CliFn, gateway_db: Path) -> None:
    result = cli("kv", "get", "[bold]x[/bold]")
    assert result.exit_code == 3
    assert result.stderr == "error: key not found: [bold]x[/bold]\n"


def test_a_created_store_has_the_gateway_schema(cli: CliFn, base_dir: Path) -> None:
    """Only a command that makes a store creates the default one (demo create here)."""
    assert cli("kv", "list").exit_code == 7
    assert not (base_dir / "data").exists()
    result = cli("demo", "create", "--records", "50")
    assert result.exit_code == 0, result.stderr
    import sqlite3

    db = base_dir / "data" / "triggerfish.db"
    sql = sqlite3.connect(db).execute("SELECT sql FROM sqlite_master WHERE name='kv'").fetchone()
    assert sql[0] == "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


def test_explicit_missing_db_is_exit_7_and_creates_nothing(cli: CliFn, tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    result = cli("--db", str(missing), "kv", "list")
    assert result.exit_code == 7
    assert f"no Triggerfish store at {missing} (from --db)" in result.stderr
    assert not missing.exists()


def test_not_a_database_is_exit_8(cli: CliFn, tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    path.write_bytes(b"\x00\x01garbage" * 100)
    result = cli("--db", str(path), "kv", "namespaces")
    assert result.exit_code == 8
    assert result.stderr.count("\n") == 1


def test_store_location_precedence(
    cli: CliFn, tmp_path: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = write_gateway_store(tmp_path / "a.db", {"from:a": "1"})
    b = write_gateway_store(tmp_path / "b.db", {"from:b": "1"})
    c = write_gateway_store(tmp_path / "c.db", {"from:c": "1"})
    write_gateway_store(base_dir / "data" / "triggerfish.db", {"from:default": "1"})
    assert cli("kv", "list", "-k").stdout == "from:default\n"
    (base_dir / "triggerfish.yaml").write_text(f"storage:\n  backend: sqlite\n  path: {c}\n")
    assert cli("kv", "list", "-k").stdout == "from:c\n"
    monkeypatch.setenv("TRIGGERFISH_DB", str(b))
    assert cli("kv", "list", "-k").stdout == "from:b\n"
    assert cli("--db", str(a), "kv", "list", "-k").stdout == "from:a\n"


def test_home_default_without_data_dir(
    cli: CliFn, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from triggerfish_cli import paths

    monkeypatch.delenv("TRIGGERFISH_DATA_DIR")
    monkeypatch.delenv("TRIGGERFISH_DOCKER", raising=False)
    # not in Docker (this machine may be a container: tests/cli/test_store_resolution.py
    # runs the console script in a root of its own for the Docker rule itself)
    monkeypatch.setattr(paths, "DOCKERENV", tmp_path / "no-dockerenv")
    home = Path(os.environ["HOME"])
    write_gateway_store(home / ".triggerfish" / "data" / "triggerfish.db", {"home:1": "x"})
    assert cli("kv", "list", "-k").stdout == "home:1\n"


def test_relative_storage_path_is_relative_to_the_config(cli: CliFn, tmp_path: Path) -> None:
    conf_dir = tmp_path / "conf"
    write_gateway_store(conf_dir / "stores" / "x.db", {"rel:1": "x"})
    config = conf_dir / "triggerfish.yaml"
    config.write_text("storage:\n  path: stores/x.db\n")
    assert cli("--config", str(config), "kv", "list", "-k").stdout == "rel:1\n"


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("storage:\n  backend: oracle\n", "unknown backend 'oracle'"),
        ("storage:\n  backend: sqlite\n  pth: x.db\n", "storage.pth: unknown setting"),
        ("storage:\n  busy_timeout_ms: -5\n", "busy_timeout_ms: must be a positive"),
        ("storage: [1, 2]\n", "storage: must be a mapping"),
        ("storage:\n  backend: memory\n  path: x\n", "storage.path: unknown setting"),
        ("storage:\n  backend: sqlite\n path: x\n", "invalid YAML: line 3, column"),
        ("- just\n- a list\n", None),
    ],
)
def test_invalid_storage_section_is_exit_8(
    cli: CliFn, base_dir: Path, yaml_text: str, message: str | None
) -> None:
    (base_dir / "triggerfish.yaml").write_text(yaml_text)
    result = cli("kv", "list")
    if message is None:  # no storage section can be found in a list: not ours to judge
        assert result.exit_code == 7  # the default store, which does not exist here
        assert "no Triggerfish store at" in result.stderr
        return
    assert result.exit_code == 8, result.stderr
    assert message in result.stderr
    assert result.stderr.count("\n") == 1
    assert not (base_dir / "data").exists()  # nothing created on a config error


def test_gateway_config_sections_are_left_alone(
    cli: CliFn, base_dir: Path, gateway_db: Path
) -> None:
    (base_dir / "triggerfish.yaml").write_text(
        "models:\n  primary: claude\nchannels:\n  telegram:\n"
        "    botToken: secret:channel:telegram:botToken\n"
    )
    assert cli("kv", "get", "prefs:owner:bumpers_default", "--raw").stdout == "true"


def test_explicit_missing_config_is_not_found(cli: CliFn, tmp_path: Path) -> None:
    result = cli("--config", str(tmp_path / "nope.yaml"), "kv", "list")
    assert result.exit_code == 3
    assert "config file not found" in result.stderr


def test_backend_memory_and_db_conflict(cli: CliFn, tmp_path: Path) -> None:
    result = cli("--backend", "memory", "--db", str(tmp_path / "x.db"), "kv", "list")
    assert result.exit_code == 2
    result = cli("--backend", "nosuch", "kv", "list")
    assert result.exit_code == 2 and "unknown backend" in result.stderr
    result = cli("--backend", "memory", "kv", "namespaces", "-f", "json")
    assert result.exit_code == 0 and result.json() == []


def test_exit_code_table_is_documented() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for code, meaning in EXIT_CODES.items():
        assert f"| {code} | {meaning} |" in readme


def test_unexpected_errors_are_one_line_exit_1(
    cli: CliFn, gateway_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.kv import keys

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(keys, "namespace_report", boom)
    result = cli("kv", "namespaces")
    assert result.exit_code == 1
    assert result.stderr == (
        "error: unexpected error: RuntimeError: kaboom (rerun with --debug for details)\n"
    )
    result = cli("--debug", "kv", "namespaces")
    assert result.exit_code == 1 and "Traceback" in result.stderr


def test_interrupt_is_exit_130(
    cli: CliFn, gateway_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.kv import keys

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(keys, "namespace_report", interrupted)
    result = cli("kv", "namespaces")
    assert result.exit_code == 130
    assert result.stderr == "error: interrupted\n"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)


def test_installed_script_and_python_m(gateway_db: Path) -> None:
    env = dict(os.environ)
    script = Path(sys.executable).parent / "triggerfish-admin"
    result = _run(str(script), "kv", "get", "prefs:owner:bumpers_default", "--raw", env=env)
    assert (result.returncode, result.stdout, result.stderr) == (0, "true", "")
    result = _run(sys.executable, "-m", "triggerfish_cli", "kv", "get", "missing", env=env)
    assert result.returncode == 3
    assert result.stderr == "error: key not found: missing\n"
    result = _run(sys.executable, "-m", "triggerfish_cli", "--version", env=env)
    assert result.stdout.strip() == f"triggerfish-admin {__version__}"


def test_broken_pipe_is_quiet(gateway_db: Path) -> None:
    script = Path(sys.executable).parent / "triggerfish-admin"
    result = subprocess.run(
        f"'{script}' kv export | head -c 10", shell=True, capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in result.stderr
    assert len(result.stdout) == 10
    # a closed pipe is not a failure: status 0, so `set -o pipefail` scripts go on
    for command in ("kv export", "kv list --keys-only", "kv list"):
        piped = subprocess.run(
            ["bash", "-o", "pipefail", "-c", f"'{script}' {command} | head -1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (piped.returncode, piped.stderr) == (0, ""), (command, piped.stderr)
