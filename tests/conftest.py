"""Shared fixtures: a hermetic environment, the CLI runner, gateway-shaped stores."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.gateway import write_gateway_store
from tests.helpers.services import postgres, s3, s3_server  # noqa: F401 - fixtures

_OUR_ENV = (
    "TRIGGERFISH_DATA_DIR",
    "TRIGGERFISH_DB",
    "TRIGGERFISH_CONFIG",
    "TRIGGERFISH_BACKEND",
    "TRIGGERFISH_FORMAT",
    "TRIGGERFISH_QUIET",
    "TRIGGERFISH_DEBUG",
    "TRIGGERFISH_TAINT",
)


@pytest.fixture(autouse=True)
def hermetic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp base directory and home per test; nothing touches the real home."""
    for name in _OUR_ENV:
        monkeypatch.delenv(name, raising=False)
    root = tmp_path_factory.mktemp("env")
    base = root / "base"
    base.mkdir()
    home = root / "home"
    home.mkdir()
    monkeypatch.setenv("TRIGGERFISH_DATA_DIR", str(base))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")
    return base


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> object:
        import json

        return json.loads(self.stdout)


CliFn = Callable[..., Run]


@pytest.fixture
def cli() -> CliFn:
    """Run the CLI in-process: ``cli("kv", "list", input=...)``."""
    from triggerfish_cli.cli.app import app

    runner = CliRunner()

    def run(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> Run:
        argv = list(args)
        if len(argv) == 1 and " " in argv[0]:
            argv = shlex.split(argv[0])
        result = runner.invoke(app, argv, input=input, env=env, catch_exceptions=False)
        return Run(result.exit_code, result.stdout, result.stderr)

    return run


@pytest.fixture
def base_dir(hermetic: Path) -> Path:
    return hermetic


@pytest.fixture
def gateway_db(base_dir: Path) -> Path:
    """The default store, written by hand exactly as the gateway writes it."""
    return write_gateway_store(base_dir / "data" / "triggerfish.db")


@dataclass
class StoreHandle:
    """A store of one backend, for tests that run on every backend."""

    backend: str
    args: list[str]
    opener: Callable[[], object]

    def open(self) -> object:
        return self.opener()


def _sqlite_store(base: Path) -> StoreHandle:
    from triggerfish_cli.storage.sqlite import SqliteStorage

    path = base / "data" / "triggerfish.db"
    SqliteStorage(path, create=True).close()
    return StoreHandle("sqlite", ["--db", str(path)], lambda: SqliteStorage(path))


#: Backends that persist across CLI invocations; command tests run on each.
STORE_BACKENDS: dict[str, Callable[[Path], StoreHandle]] = {"sqlite": _sqlite_store}


@pytest.fixture(params=sorted(STORE_BACKENDS))
def store(request: pytest.FixtureRequest, base_dir: Path) -> Iterator[StoreHandle]:
    yield STORE_BACKENDS[request.param](base_dir)
