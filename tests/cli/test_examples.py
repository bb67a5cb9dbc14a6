"""Every ``Examples:`` line of every command's --help runs as written (issue 36).

The lines are taken from the command tree (what --help prints) and run by
bash, pipes and all, through the installed console script, each in a fresh
copy of one prepared home: a demo store where the gateway keeps it, the
gateway's triggerfish.yaml with twelve stored versions, a backup, and the
input files the examples name (``conv.jsonl``, ``x.txt``, ``new.yaml``,
``old.db``, ``scratch.db``, backups ``A.db.zst`` and ``B.jsonl.zst``). Nothing
in a line is substituted. Lines naming ``s3://`` run against the moto server
(bucket ``bucket``), ``pg.yaml`` names the test Postgres; locally they skip
when the server is missing, under CI they run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.services import S3, Postgres
from triggerfish_cli.cli.command_tree import command_tree, walk

BIN = Path(sys.executable).parent
SCRIPT = str(BIN / "triggerfish-admin")

#: The gateway's own triggerfish.yaml, as a fresh install has it.
GATEWAY_CONFIG = """\
# Triggerfish, the owner's gateway
models:
  primary:
    provider: anthropic
    model: claude-sonnet-4-5
channels:
  telegram:
    ownerId: 123456789
    classification: INTERNAL
"""

#: Lines whose documented outcome is not exit 0: ``--exit-code`` says 1 when they differ.
EXITS = {
    "triggerfish-admin backup diff A.db.zst B.jsonl.zst --keys --exit-code": (0, 1),
}

def example_lines() -> Iterator[tuple[str, str]]:
    """``(command path, line)`` for every Examples line, as --help prints them."""
    for node in walk(command_tree()):
        for line in node["examples"]:
            yield node["path"], line


def params() -> list[object]:
    found: list[object] = []
    for path, line in example_lines():
        found.append(pytest.param(path, line, id=line[18:70]))
    return found


class Home:
    """A prepared home: ``root/home`` (data dir ``~/.triggerfish``) and ``root/work``."""

    def __init__(self, root: Path, extra_env: dict[str, str] | None = None) -> None:
        self.root = root
        self.extra_env = extra_env or {}

    @property
    def base(self) -> Path:
        return self.root / "home" / ".triggerfish"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIGGERFISH_", "AWS_"))}
        env.update(self.extra_env)
        env["HOME"] = str(self.root / "home")
        # The default base, named: a machine with /.dockerenv would take /data instead.
        env["TRIGGERFISH_DATA_DIR"] = str(self.base)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        env["COLUMNS"], env["NO_COLOR"] = "100", "1"
        return env

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-o", "pipefail", "-c", line],
            cwd=self.root / "work",
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )

    def ok(self, line: str) -> None:
        done = self.run(line)
        assert done.returncode == 0, f"{line}: {done.stderr}"

    def copy(self, where: Path) -> Home:
        shutil.copytree(self.root, where, symlinks=True)
        return Home(where, self.extra_env)


def prepare(home: Home) -> None:
    (home.root / "work").mkdir(parents=True)
    home.base.mkdir(parents=True)
    home.ok("triggerfish-admin demo create --now 2026-05-01 -q")
    config = home.base / "triggerfish.yaml"
    for version in range(1, 13):
        config.write_text(GATEWAY_CONFIG + f"# edit {version}\n")
        home.ok("triggerfish-admin config snapshot -q")
    config.write_text(GATEWAY_CONFIG + "# edited since\n")
    work = home.root / "work"
    shutil.copy(config, work / "new.yaml")
    (work / "x.txt").write_text("a note\n")
    home.ok("triggerfish-admin kv export conv: > conv.jsonl")
    home.ok("triggerfish-admin --db old.db demo create -r 300 -q")
    home.ok("triggerfish-admin --db scratch.db demo create -r 300 -q")
    home.ok("triggerfish-admin backup create -q")
    home.ok("triggerfish-admin backup create --to ab -q")
    home.ok("triggerfish-admin backup create --logical --to ab -q")
    backups = home.base / "backups" / "store"
    for made in (work / "ab").iterdir():
        name = "A.db.zst" if made.name.endswith(".db.zst") else "B.jsonl.zst"
        shutil.copy(made, backups / name)
    shutil.rmtree(work / "ab")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Home:
    home = Home(tmp_path_factory.mktemp("examples") / "template")
    prepare(home)
    return home


def with_servers(home: Home, line: str, request: pytest.FixtureRequest) -> Home:
    """``home`` with what the line's servers need: the moto server and its bucket for
    ``s3://``, ``pg.yaml`` naming a fresh schema of the test Postgres."""
    if "s3://" in line:
        server: S3 = request.getfixturevalue("s3")  # with credentials in the AWS chain
        client = server.client()
        if "bucket" not in {b["Name"] for b in client.list_buckets()["Buckets"]}:  # type: ignore[attr-defined]
            client.create_bucket(Bucket="bucket")  # type: ignore[attr-defined]
        home.extra_env.update(
            AWS_ENDPOINT_URL=server.endpoint_url,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION=server.region,
            AWS_EC2_METADATA_DISABLED="true",
        )
        if "backup list" in line:
            home.ok("triggerfish-admin backup create --to s3://bucket/tf/ -q")
    if "pg.yaml" in line:
        pg: Postgres = request.getfixturevalue("postgres")
        schema = pg.new_schema()
        request.addfinalizer(lambda: pg.drop_schema(schema))
        (home.root / "work" / "pg.yaml").write_text(
            f'storage:\n  backend: postgres\n  dsn: "{pg.dsn}"\n  schema: "{schema}"\n'
        )
    return home


@pytest.mark.parametrize(("path", "line"), params())
def test_every_help_example_runs_as_written(
    prepared: Home, tmp_path: Path, request: pytest.FixtureRequest, path: str, line: str
) -> None:
    home = with_servers(prepared.copy(tmp_path / "home"), line, request)
    if path == "triggerfish-admin demo create":  # a fresh path: no store yet
        for suffix in ("", "-wal", "-shm"):
            (home.base / "data" / f"triggerfish.db{suffix}").unlink(missing_ok=True)
    done = home.run(line)
    assert done.returncode in EXITS.get(line, (0,)), f"{line}\n{done.stderr}"
    if "||" in line:  # the exit the line tests: 0, or 1 for "there is a difference"
        left = home.run(line.split("||")[0])
        assert left.returncode in (0, 1), f"{line}\n{left.stderr}"


def test_the_walk_finds_every_command_s_examples() -> None:
    lines = [line for _, line in example_lines()]
    assert len(lines) == len(set(lines)) > 50
    assert any("kv import --create" in line for line in lines)
