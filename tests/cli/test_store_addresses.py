"""`--db` and TRIGGERFISH_DB take the store addresses `migrate` takes (issue 36).

Through the installed console script: a demo store migrated to a Postgres
schema or an S3 prefix is reached by ``--db ADDRESS`` (or TRIGGERFISH_DB)
with no YAML file, and ``status`` says which store that is; a password in
the address is refused and never printed; an unknown scheme or a malformed
address is exit 2 in one line, an unreachable server exit 7; a plain path,
relative or with a colon in it, stays a SQLite path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.gateway import write_gateway_store
from tests.helpers.services import S3, Postgres

SCRIPT = Path(sys.executable).parent / "triggerfish-admin"


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    environment["TRIGGERFISH_DATA_DIR"] = os.environ["TRIGGERFISH_DATA_DIR"]
    environment.update(env or {})
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=environment, cwd=cwd, timeout=300
    )


def namespaces(*args: str, env: dict[str, str] | None = None) -> dict[str, int]:
    """``kv namespaces`` of a store, without our own audit records (a migrate adds one)."""
    result = run(*args, "kv", "namespaces", "-f", "json", env=env)
    assert result.returncode == 0, result.stderr
    return {row["namespace"]: row["keys"] for row in json.loads(result.stdout)} | {"audit:": 0}


def status(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = run(*args, "status", "-f", "json", env=env)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    path = tmp_path / "demo.db"
    made = run("--db", str(path), "demo", "create", "--records", "300", "--seed", "3")
    assert made.returncode == 0, made.stderr
    return path


def migrated(demo: Path, address: str) -> None:
    moved = run("migrate", "--from", str(demo), "--to", address, "--yes")
    assert moved.returncode == 0, moved.stderr


def test_a_postgres_schema_is_reached_by_its_address(demo: Path, postgres: Postgres) -> None:
    schema = postgres.new_schema()
    address = f"{postgres.dsn}?schema={schema}"
    migrated(demo, address)
    expected = namespaces("--db", str(demo))
    assert namespaces("--db", address) == expected
    assert namespaces(env={"TRIGGERFISH_DB": address}) == expected
    for args, env, chosen in [
        (["--db", address], None, "from --db"),
        ([], {"TRIGGERFISH_DB": address}, "from TRIGGERFISH_DB"),
    ]:
        report = status(*args, env=env)
        assert report["backend"] == "postgres" and report["exists"] is True
        assert report["location"] == f"{postgres.dsn} schema {schema}"
        assert report["chosen_by"] == chosen
        assert report["keys"] == sum(expected.values()) + 2  # the demo's and migrate's audit
    table = run("--db", address, "status")
    assert f"postgres {postgres.dsn} schema {schema}" in table.stdout
    # A write goes to that store too, and reads back through the environment variable.
    assert run("--db", address, "kv", "set", "prefs:owner:i36", '"on"').returncode == 0
    got = run("kv", "get", "prefs:owner:i36", "--raw", env={"TRIGGERFISH_DB": address})
    assert got.stdout == '"on"'


def test_an_s3_prefix_is_reached_by_its_address(demo: Path, s3: S3) -> None:
    endpoint = {"AWS_ENDPOINT_URL": s3.endpoint_url}
    address = f"s3://{s3.new_bucket()}/migrated/tf"
    moved = run("migrate", "--from", str(demo), "--to", address, "--yes", env=endpoint)
    assert moved.returncode == 0, moved.stderr
    expected = namespaces("--db", str(demo))
    assert namespaces("--db", address, env=endpoint) == expected
    assert namespaces(env={**endpoint, "TRIGGERFISH_DB": address}) == expected
    report = status(env={**endpoint, "TRIGGERFISH_DB": address})
    assert (report["backend"], report["exists"]) == ("s3", True)
    assert report["location"] == f"{address}/" and report["chosen_by"] == "from TRIGGERFISH_DB"


def test_the_storage_section_of_the_same_backend_gives_the_endpoint(
    demo: Path, s3: S3, base_dir: Path
) -> None:
    """Settings other than the place (endpoint, region) come from storage: of that backend."""
    address = f"s3://{s3.new_bucket()}/tf"
    moved = run("migrate", "--from", str(demo), "--to", address, "--endpoint-url", s3.endpoint_url)
    assert moved.returncode == 0, moved.stderr
    (base_dir / "triggerfish.yaml").write_text(
        f"storage:\n  backend: s3\n  bucket: some-other-bucket\n"
        f"  endpoint_url: {s3.endpoint_url}\n  region: {s3.region}\n"
    )
    report = status("--db", address)
    assert report["location"] == f"{address}/ at {s3.endpoint_url}" and report["exists"]


@pytest.mark.parametrize(
    "address",
    [
        "postgresql://tf:hunter2@127.0.0.1:5432/test?schema=x",
        "postgres://tf@127.0.0.1/test?password=hunter2",
        "s3://AKIAEXAMPLE:hunter2@bucket/prefix",
    ],
)
def test_a_secret_in_the_address_is_refused_and_never_printed(
    address: str, tmp_path: Path
) -> None:
    for args, env in [
        (["--db", address], None),
        ([], {"TRIGGERFISH_DB": address}),
    ]:
        for command in (["kv", "namespaces"], ["status"], ["status", "-f", "json"]):
            result = run(*args, *command, env=env, cwd=tmp_path)
            assert result.returncode == 4, result.stderr
            assert "hunter2" not in result.stdout + result.stderr
            assert result.stderr.count("\n") == 1
            assert "PGPASSWORD" in result.stderr or "AWS" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("mysql://db/x", "--db: unknown kind of store mysql://"),
        ("file:///tmp/x.db", "--db: unknown kind of store file://"),
        ("postgresql:/db/x", "--db: postgresql: must be followed by //"),
        ("s3:bucket/prefix", "--db: s3: must be followed by //"),
        ("s3://", "expected s3://bucket/prefix"),
        ("s3://bucket/prefix?versionId=1", "takes no ?query"),
        ("s3://Not_A_Bucket!/x", "not a bucket name"),
        ("postgresql://db:port/x", "not a port number"),
        ("postgresql://db/x?schema=pg_toast", "reserved"),
    ],
)
def test_an_unknown_or_malformed_address_is_exit_2(
    address: str, message: str, tmp_path: Path
) -> None:
    for args, env, where in [
        (["--db", address], None, "--db"),
        ([], {"TRIGGERFISH_DB": address}, "TRIGGERFISH_DB"),
    ]:
        result = run(*args, "kv", "namespaces", env=env, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert message.replace("--db", where) in result.stderr
        assert result.stderr.startswith(f"error: {where}") and result.stderr.count("\n") == 1
        assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []  # not taken as a file name


def test_an_address_and_another_backend_is_exit_2(tmp_path: Path) -> None:
    result = run("--db", "s3://bucket/tf", "--backend", "postgres", "status")
    assert result.returncode == 2
    assert "--db names a s3 store; it cannot be used with --backend postgres" in result.stderr


def test_an_unreachable_server_is_exit_7() -> None:
    result = run("--db", "postgresql://postgres@127.0.0.1:1/test?schema=x", "kv", "namespaces")
    assert result.returncode == 7, result.stderr
    assert "cannot connect to PostgreSQL at 127.0.0.1:1" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("name", ["rel.db", "sub/a:b.db", "a:b.db", "x:y", "dir:1/plain"])
def test_a_plain_path_stays_a_sqlite_path(name: str, tmp_path: Path) -> None:
    """Relative, or with a colon that starts no known scheme: a SQLite file, as before."""
    write_gateway_store(tmp_path / name, {"sessions:1": "{}", "todos:main": "[]"})
    for args, env in [(["--db", name], None), ([], {"TRIGGERFISH_DB": name})]:
        result = run(*args, "kv", "namespaces", "-f", "json", env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert {row["namespace"] for row in json.loads(result.stdout)} == {"sessions:", "todos:"}
        report = run(*args, "status", "-f", "json", env=env, cwd=tmp_path)
        assert json.loads(report.stdout)["backend"] == "sqlite"
        assert json.loads(report.stdout)["sqlite"]["path"] == str(tmp_path / name)
    missing = run("--db", "no:such.db", "kv", "namespaces", cwd=tmp_path)
    assert missing.returncode == 7
    assert "no Triggerfish store at no:such.db (from --db)" in missing.stderr
