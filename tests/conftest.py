"""Shared fixtures: a hermetic environment, the CLI runner, gateway-shaped stores."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.helpers.gateway import write_gateway_store
from tests.helpers.services import S3, Postgres, postgres, s3, s3_server  # noqa: F401 - fixtures
from triggerfish_cli.storage.sqlite import gate_modes

_OUR_ENV = (
    "TRIGGERFISH_DATA_DIR",
    "TRIGGERFISH_DB",
    "TRIGGERFISH_CONFIG",
    "TRIGGERFISH_BACKEND",
    "TRIGGERFISH_FORMAT",
    "TRIGGERFISH_QUIET",
    "TRIGGERFISH_DEBUG",
    "TRIGGERFISH_TAINT",
    "TRIGGERFISH_DOCKER",
    "TRIGGERFISH_LIVE_WRITERS",
    "TRIGGERFISH_BACKUP_IDENTITY_FILE",
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
    # The operator's --live-writers choice lasts for the process (one command in real
    # use); a command run in this process must not leave it to the tests after it.
    monkeypatch.setattr(gate_modes, "_chosen", None)
    return base


@pytest.fixture(autouse=True)
def errors_name_options_of_their_command(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every error a command raises in a test names only options that command has, or
    options of the command it names in backticks (issue 36: no error may suggest an
    option the command lacks; tests/helpers/option_mentions.py)."""
    from typer.core import TyperCommand

    from tests.helpers.option_mentions import foreign
    from triggerfish_cli.errors import TriggerfishError

    wrong: list[str] = []
    invoke = TyperCommand.invoke

    def checked(self: TyperCommand, ctx: Any) -> Any:
        try:
            return invoke(self, ctx)
        except TriggerfishError as exc:
            chain, at = [], ctx
            while at is not None:
                chain.insert(0, at.command)
                at = at.parent
            wrong.extend(f"{ctx.command_path}: {exc}: {w}" for w in foreign(str(exc), chain))
            raise

    checked.checks_option_mentions = True  # type: ignore[attr-defined]
    monkeypatch.setattr(TyperCommand, "invoke", checked)
    yield
    assert not wrong, "an error names an option its command lacks: " + "; ".join(wrong)


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

    def seed(self, rows: dict[str, str]) -> None:
        """Write ``rows`` straight through the backend (as the gateway would)."""
        provider: Any = self.open()
        try:
            provider.set_many(rows.items())
        finally:
            provider.close()

    def contents(self) -> dict[str, str]:
        """Every key and value the backend holds."""
        provider: Any = self.open()
        try:
            return dict(provider.scan())
        finally:
            provider.close()


def _sqlite_store(base: Path, request: pytest.FixtureRequest) -> StoreHandle:
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    path = base / "data" / "triggerfish.db"
    SqliteStorage(path, create=True).close()
    return StoreHandle("sqlite", ["--db", str(path)], lambda: SqliteStorage(path))


def _write_storage_config(base: Path, settings: dict[str, str]) -> Path:
    """``<base>/triggerfish.yaml`` with a ``storage:`` section (JSON strings are YAML)."""
    import json

    path = base / "triggerfish.yaml"
    lines = ["storage:"] + [f"  {key}: {json.dumps(value)}" for key, value in settings.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _postgres_store(base: Path, request: pytest.FixtureRequest) -> StoreHandle:
    """A fresh schema on the test server, named in the config's storage: section."""
    from triggerfish_cli.storage.postgres.backend import PostgresStorage

    server: Postgres = request.getfixturevalue("postgres")
    schema = server.new_schema()
    request.addfinalizer(lambda: server.drop_schema(schema))
    PostgresStorage(server.dsn, schema=schema, create=True).close()
    config = _write_storage_config(
        base, {"backend": "postgres", "dsn": server.dsn, "schema": schema}
    )
    return StoreHandle(
        "postgres",
        ["--config", str(config)],
        lambda: PostgresStorage(server.dsn, schema=schema),
    )


def _s3_store(base: Path, request: pytest.FixtureRequest) -> StoreHandle:
    """A fresh bucket on the moto server, named in the config's storage: section."""
    from triggerfish_cli.storage.s3.backend import S3Storage

    server: S3 = request.getfixturevalue("s3")
    bucket = server.new_bucket()
    S3Storage(
        bucket, "triggerfish/", endpoint_url=server.endpoint_url, region=server.region, create=True
    ).close()
    config = _write_storage_config(
        base,
        {
            "backend": "s3",
            "bucket": bucket,
            "prefix": "triggerfish/",
            "endpoint_url": server.endpoint_url,
            "region": server.region,
        },
    )
    return StoreHandle(
        "s3",
        ["--config", str(config)],
        lambda: S3Storage(
            bucket, "triggerfish/", endpoint_url=server.endpoint_url, region=server.region
        ),
    )


#: Backends that persist across CLI invocations; command tests run on each.
STORE_BACKENDS: dict[str, Callable[[Path, pytest.FixtureRequest], StoreHandle]] = {
    "sqlite": _sqlite_store,
    "postgres": _postgres_store,
    "s3": _s3_store,
}


@pytest.fixture(params=sorted(STORE_BACKENDS))
def store(request: pytest.FixtureRequest, base_dir: Path) -> Iterator[StoreHandle]:
    yield STORE_BACKENDS[request.param](base_dir, request)
