"""Never work on the wrong store (issue 14): the gateway's store found exactly, never invented.

Through the installed console script: a store that is not there is exit 7
in one line naming the path and how it was chosen, and no file or directory
appears anywhere (the parent is listed before and after); the Docker rule
(``/data`` when ``TRIGGERFISH_DOCKER`` is ``true``/``1`` or ``/.dockerenv``
exists) runs in a root of its own (tests/helpers/fakeroot.py); bare words are
not store locations; a missing extra is exit 7 with the pip command.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import fakeroot
from tests.helpers.gateway import write_gateway_store

SCRIPT = Path(sys.executable).parent / "triggerfish-admin"


def run(
    *args: str, env: dict[str, str], cwd: Path | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        input=stdin,
        timeout=120,
    )


def tree(root: Path) -> list[str]:
    """Every path under ``root`` (the parent checked before and after)."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env.update(extra)
    return env


# -- a typo never makes a store -----------------------------------------------------

COMMANDS = [
    ["kv", "namespaces"],
    ["kv", "list"],
    ["kv", "get", "main-session-id"],
    ["kv", "set", "x", '"y"'],
    ["retention", "plan"],
    ["retention", "sweep", "--yes"],
    ["backup", "create"],
    ["memory", "search", "alice", "--taint", "RESTRICTED"],
    ["memory", "stats", "--taint", "RESTRICTED"],
    ["config", "history"],
    ["config", "snapshot"],
    ["status"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_typo_in_the_data_dir_is_exit_7_and_creates_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    parent = tmp_path / "x"
    parent.mkdir()
    (parent / "tf").mkdir()  # the real one, beside the typo
    before = tree(tmp_path)
    typo = parent / "tff"
    result = run(*command, env=clean_env(TRIGGERFISH_DATA_DIR=str(typo)))
    assert result.returncode == 7, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"error: no Triggerfish store at {typo}/data/triggerfish.db (from TRIGGERFISH_DATA_DIR); "
        "the gateway creates it on first start (check the path, or make a demo store with "
        "`triggerfish-admin demo create`)\n"
    )
    assert tree(tmp_path) == before


def test_kv_import_no_longer_creates_a_store(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"key": "a", "value": "1"}\n')
    before = tree(tmp_path)
    result = run("--db", str(tmp_path / "new.db"), "kv", "import", str(rows), env=clean_env())
    assert result.returncode == 7
    assert f"no Triggerfish store at {tmp_path}/new.db (from --db)" in result.stderr
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("flag", "from --db"),
        ("environment", "from TRIGGERFISH_DB"),
        ("section", "from storage.path in"),
        ("section-default", "from the storage: section of"),
    ],
)
def test_the_message_says_how_the_store_was_chosen(tmp_path: Path, how: str, expected: str) -> None:
    base = tmp_path / "base"
    base.mkdir()
    missing = tmp_path / "nowhere" / "store.db"
    env = clean_env(TRIGGERFISH_DATA_DIR=str(base))
    args = ["kv", "list"]
    if how == "flag":
        args = ["--db", str(missing), *args]
    elif how == "environment":
        env["TRIGGERFISH_DB"] = str(missing)
    elif how == "section":
        (base / "triggerfish.yaml").write_text(f"storage:\n  path: {missing}\n")
    else:
        (base / "triggerfish.yaml").write_text("storage:\n  backend: sqlite\n")
        missing = base / "data" / "triggerfish.db"
    before = tree(tmp_path)
    result = run(*args, env=env)
    assert result.returncode == 7
    assert result.stderr.startswith(f"error: no Triggerfish store at {missing} ({expected}")
    assert result.stderr.count("\n") == 1
    assert tree(tmp_path) == before


def test_only_the_creators_create(tmp_path: Path) -> None:
    """demo create and migrate into its target make a store; nothing else does."""
    demo = tmp_path / "demo" / "demo.db"
    made = run("--db", str(demo), "demo", "create", "--records", "200", env=clean_env())
    assert made.returncode == 0, made.stderr
    target = tmp_path / "copy" / "copy.db"
    moved = run("migrate", "--from", str(demo), "--to", str(target), env=clean_env())
    assert moved.returncode == 0, moved.stderr
    assert sqlite3.connect(target).execute("SELECT count(*) FROM kv").fetchone()[0] > 200
    journal = sqlite3.connect(target).execute("PRAGMA journal_mode").fetchone()[0]
    assert journal == "wal"  # made as the gateway makes its store


# -- one documented form per kind of store ------------------------------------------


@pytest.mark.parametrize("word", ["memory", "sqlite", "postgres", "s3", "triggerfish"])
@pytest.mark.parametrize("role", ["--to", "--from"])
def test_a_bare_word_is_not_a_store_location(tmp_path: Path, word: str, role: str) -> None:
    source = write_gateway_store(tmp_path / "src.db")
    before = tree(tmp_path)
    args = (
        ["--from", str(source), "--to", word]
        if role == "--to"
        else ["--from", word, "--to", "x.db"]
    )
    result = run("migrate", *args, env=clean_env(), cwd=tmp_path)
    assert result.returncode == 2
    assert f"{role} {word}: not a store location" in result.stderr
    assert result.stderr.count("\n") == 1
    assert tree(tmp_path) == before  # no ./memory, no ./x.db


def test_sqlite_paths_keep_working(tmp_path: Path) -> None:
    write_gateway_store(tmp_path / "src.db", {"k:1": '"v"'})
    for spec in ("copy.db", "./plain"):
        result = run("migrate", "--from", "src.db", "--to", spec, env=clean_env(), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert (tmp_path / spec).is_file()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("memory", "--to memory: not a store location"),
        ("restored", "--to restored: not a store location"),
        ("postgresql://postgres@127.0.0.1/test", "backup restore --to takes a SQLite file"),
        ("s3://bucket/prefix", "backup restore --to takes a SQLite file"),
    ],
)
def test_backup_restore_to_takes_a_sqlite_path_in_migrates_form(
    tmp_path: Path, spec: str, message: str
) -> None:
    source = write_gateway_store(tmp_path / "src.db", {"k:1": '"v"'})
    made = run(
        "--db", str(source), "backup", "create", "--to", str(tmp_path / "b"), env=clean_env()
    )
    assert made.returncode == 0, made.stderr
    before = tree(tmp_path)
    result = run(
        "--db", str(source), "backup", "restore", "--latest", "--from", str(tmp_path / "b"),
        "--to", spec, "--yes", env=clean_env(), cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stderr.count("\n") == 1
    assert tree(tmp_path) == before  # no ./memory, ./restored, nothing restored anywhere
    # The same backup, named, restores into a path in migrate's form.
    (archive,) = (tmp_path / "b").iterdir()
    result = run(
        "backup", "restore", str(archive), "--to", "./restored.db", "--yes",
        env=clean_env(), cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    query = "SELECT key, value FROM kv WHERE key NOT LIKE 'audit:%' ORDER BY key"
    restored = sqlite3.connect(tmp_path / "restored.db").execute(query).fetchall()
    assert ("k:1", '"v"') in restored
    assert restored == sqlite3.connect(source).execute(query).fetchall()


# -- the Docker rule -------------------------------------------------------------------

needs_fakeroot = pytest.mark.skipif(
    fakeroot.available() is not None, reason=str(fakeroot.available())
)


def _inside(
    tmp_path: Path, *args: str, data: Path | None, dockerenv: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return fakeroot.run(
        [str(SCRIPT), *args], env=clean_env(HOME=str(home), **env), data=data, dockerenv=dockerenv
    )


@needs_fakeroot
@pytest.mark.parametrize(
    ("docker_env", "dockerenv", "expected"),
    [
        ("1", False, "docker"),
        ("true", False, "docker"),
        (None, True, "docker"),
        (None, False, "home"),
        ("false", False, "home"),
        ("yes", False, "home"),
    ],
)
def test_docker_rule_as_the_gateway(
    tmp_path: Path, docker_env: str | None, dockerenv: bool, expected: str
) -> None:
    data = tmp_path / "volume"
    write_gateway_store(data / "data" / "triggerfish.db", {"where": '"docker"'})
    write_gateway_store(
        tmp_path / "home" / ".triggerfish" / "data" / "triggerfish.db", {"where": '"home"'}
    )
    extra = {"TRIGGERFISH_DOCKER": docker_env} if docker_env is not None else {}
    result = _inside(
        tmp_path, "kv", "get", "where", "--raw", data=data, dockerenv=dockerenv, **extra
    )
    assert (result.returncode, result.stdout) == (0, f'"{expected}"'), result.stderr


@needs_fakeroot
def test_data_dir_wins_over_docker(tmp_path: Path) -> None:
    data = tmp_path / "volume"
    write_gateway_store(data / "data" / "triggerfish.db", {"where": '"docker"'})
    chosen = write_gateway_store(
        tmp_path / "chosen" / "data" / "triggerfish.db", {"where": '"dir"'}
    )
    result = _inside(
        tmp_path,
        "kv",
        "get",
        "where",
        "--raw",
        data=data,
        dockerenv=True,
        TRIGGERFISH_DOCKER="1",
        TRIGGERFISH_DATA_DIR=str(chosen.parent.parent),
    )
    assert (result.returncode, result.stdout) == (0, '"dir"'), result.stderr


@needs_fakeroot
def test_docker_without_a_store_in_data_is_exit_7_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "volume"  # the container's volume, before the gateway's first start
    data.mkdir()
    for command in (["kv", "namespaces"], ["backup", "create"], ["status"]):
        result = _inside(tmp_path, *command, data=data, TRIGGERFISH_DOCKER="1")
        assert result.returncode == 7, result.stderr
        assert result.stderr.startswith(
            "error: no Triggerfish store at /data/data/triggerfish.db "
            "(Docker's /data (TRIGGERFISH_DOCKER=1)); the gateway creates it on first start"
        )
        assert list(data.iterdir()) == []
    # no /data at all: nothing appears at the root either
    result = fakeroot.run(
        fakeroot.shell(f"{SCRIPT} kv list; echo rc=$?; ls -a /data 2>&1 || true"),
        env=clean_env(HOME=str(tmp_path), TRIGGERFISH_DOCKER="1"),
        data=None,
    )
    assert "rc=7" in result.stdout
    assert "No such file or directory" in result.stdout


@needs_fakeroot
def test_status_names_the_docker_rule(tmp_path: Path) -> None:
    data = tmp_path / "volume"
    write_gateway_store(data / "data" / "triggerfish.db")
    result = _inside(tmp_path, "status", "--format", "json", data=data, dockerenv=True)
    assert result.returncode == 0, result.stderr
    import json

    report = json.loads(result.stdout)
    assert report["location"] == "/data/data/triggerfish.db"
    assert report["chosen_by"] == "Docker's /data (/.dockerenv exists)"
    assert report["base_dir"] == {"path": "/data", "chosen_by": "docker:/.dockerenv exists"}


# -- missing extras --------------------------------------------------------------------


def _without(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment in which ``import <module>`` fails as on a plain install."""
    shadow = tmp_path / "shadow"
    for module in modules:
        package = shadow / module
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
        )
    return clean_env(PYTHONPATH=str(shadow), TRIGGERFISH_DATA_DIR=str(tmp_path / "base"))


POSTGRES_FIX = (
    "error: PostgreSQL support is not installed: pip install 'triggerfish-admin[postgres]'\n"
)
S3_FIX = "error: S3 support is not installed: pip install 'triggerfish-admin[s3]'\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "postgres", "kv", "list"], POSTGRES_FIX),
        (["migrate", "--from", "SRC", "--to", "postgresql://tf@localhost/x"], POSTGRES_FIX),
        (["--backend", "s3", "kv", "list"], S3_FIX),
        (["migrate", "--from", "SRC", "--to", "s3://bucket/prefix"], S3_FIX),
        (["--db", "SRC", "backup", "create", "--to", "s3://bucket/prefix"], S3_FIX),
        (["backup", "list", "--from", "s3://bucket/prefix"], S3_FIX),
    ],
)
def test_a_missing_extra_is_exit_7_with_the_fix(
    tmp_path: Path, args: list[str], message: str
) -> None:
    source = write_gateway_store(tmp_path / "src.db")
    env = _without(tmp_path, "psycopg", "boto3", "botocore")
    if "--backend" in args and "s3" in args:
        (tmp_path / "base").mkdir()
        (tmp_path / "base" / "triggerfish.yaml").write_text(
            "storage:\n  backend: s3\n  bucket: acme-tf\n"
        )
    result = run(*[str(source) if a == "SRC" else a for a in args], env=env, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (7, message)
