"""`triggerfish-admin migrate` between every pair of backends, with interruptions and faults."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import GATEWAY_ROWS, dump_tables, write_gateway_store
from tests.helpers.services import S3, Postgres
from triggerfish_cli.migrate.planning import PROGRESS_KEY
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

#: Keys every backend must carry across: unicode, '/', '%', spaces, the empty key, a long key.
TRICKY = {
    "a/b%c": "1",
    "é:日本": "2",
    "trailing ": "3",
    "": "the empty key",
    "memory:main-session:PUBLIC:" + "長" * 500: json.dumps({"content": "long key"}),
}
ROWS = {**GATEWAY_ROWS, **TRICKY}


@dataclass
class Spot:
    """One store: the --from/--to argument naming it, and a writable provider on it."""

    kind: str
    spec: str
    opener: Callable[[], BaseStorage]

    def open(self) -> BaseStorage:
        return self.opener()

    def contents(self) -> dict[str, str]:
        provider = self.open()
        try:
            return dict(provider.scan())
        finally:
            provider.close()


def make_spot(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Spot:
    name = uuid.uuid4().hex[:8]
    if kind == "sqlite":
        path = tmp_path / f"{name}.db"
        return Spot(kind, str(path), lambda: SqliteStorage(path, create=True))
    if kind == "postgres":
        from triggerfish_cli.storage.postgres.backend import PostgresStorage

        pg: Postgres = request.getfixturevalue("postgres")
        schema = pg.new_schema()
        request.addfinalizer(lambda: pg.drop_schema(schema))
        return Spot(
            kind,
            f"{pg.dsn}?schema={schema}",
            lambda: PostgresStorage(pg.dsn, schema=schema, create=True),
        )
    from triggerfish_cli.storage.s3.backend import S3Storage

    s3: S3 = request.getfixturevalue("s3")
    bucket = s3.new_bucket()
    yaml = tmp_path / f"{name}.yaml"
    yaml.write_text(
        f"storage:\n  backend: s3\n  bucket: {bucket}\n  prefix: tf\n"
        f"  endpoint_url: {s3.endpoint_url}\n  region: {s3.region}\n"
    )
    return Spot(
        kind,
        str(yaml),
        lambda: S3Storage(
            bucket, "tf", endpoint_url=s3.endpoint_url, region=s3.region, create=True
        ),
    )


@pytest.fixture
def spot(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str], Spot]:
    return lambda kind: make_spot(kind, tmp_path, request)


def seeded(spot: Spot, rows: dict[str, str]) -> Spot:
    provider = spot.open()
    provider.set_many(rows.items())
    provider.close()
    return spot


def without_audit(rows: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in rows.items() if not k.startswith("audit:")}


def audits(rows: dict[str, str]) -> list[dict[str, Any]]:
    return [json.loads(v) for k, v in sorted(rows.items()) if k.startswith("audit:")]


def run(cli: CliFn, source: Spot, target: Spot, *extra: str) -> Any:
    return cli("migrate", "--from", source.spec, "--to", target.spec, "-f", "json", *extra)


def file_state(path: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.parent.iterdir())
        if p.name.startswith(path.name)
    }


# -- copying ------------------------------------------------------------------------------


def test_a_store_travels_sqlite_postgres_s3_and_back(
    cli: CliFn, spot: Callable[[str], Spot], tmp_path: Path
) -> None:
    source = Spot("sqlite", str(tmp_path / "gw.db"), lambda: SqliteStorage(tmp_path / "gw.db"))
    write_gateway_store(tmp_path / "gw.db", ROWS)
    before = file_state(tmp_path / "gw.db")
    hops = [source, spot("postgres"), spot("s3"), spot("sqlite")]
    for origin, destination in itertools.pairwise(hops):
        result = run(cli, origin, destination)
        assert result.exit_code == 0, result.stderr
        report = result.json()
        assert report["verified"] is True and report["copied"] == report["source_keys"]
        assert all(row["ok"] for row in report["namespaces"])
        if destination.kind == "sqlite":  # the gateway's own index, rebuilt from the copy
            assert "memory search index (sqlite-fts5)" in result.stderr
        else:
            assert "memory reindex" in result.stderr
        rows = destination.contents()
        assert PROGRESS_KEY not in rows
        [record] = [a for a in audits(rows) if a["action"] == "migrate"][-1:]
        assert record["source"] == origin.open().describe()
        assert record["counts"]["copied"] == report["copied"]
    final = hops[-1].contents()
    assert without_audit(final) == ROWS
    indexed = {
        f"memory:{agent}:{level}:{key}"
        for agent, level, key in sqlite3.connect(hops[-1].spec).execute(
            "SELECT agent_id, classification, key FROM memory_fts"
        )
    }
    from triggerfish_cli.memory.record import MemoryRecord, parse_record

    records = {k: parse_record(k, v) for k, v in ROWS.items() if k.startswith("memory:")}
    live = {k for k, r in records.items() if isinstance(r, MemoryRecord) and r.live}
    assert indexed == live and live
    assert len(audits(final)) == 3  # one per hop: each copy carries the earlier records
    assert file_state(tmp_path / "gw.db") == before  # the source file is byte-identical


def test_json_shape(cli: CliFn, spot: Callable[[str], Spot]) -> None:
    source = seeded(spot("sqlite"), {"sessions:1": "{}", "x": "1"})
    result = run(cli, source, spot("sqlite"))
    report = result.json()
    assert set(report) == {
        "source", "target", "source_keys", "target_state", "merge", "resume_after",
        "to_copy", "dry_run", "copied", "seconds", "copy_seconds", "verified", "namespaces",
        "notes",
    }  # fmt: skip
    assert report["target_state"] == "missing" and report["notes"] == []  # it was created
    assert report["namespaces"][0] == {
        "namespace": "",
        "source_keys": 1,
        "target_keys": 1,
        "missing": 0,
        "different": 0,
        "extra": 0,
        "source_checksum": report["namespaces"][0]["target_checksum"],
        "target_checksum": report["namespaces"][0]["source_checksum"],
        "ok": True,
    }
    table = cli("migrate", "--from", source.spec, "--to", spot("sqlite").spec)
    assert "sessions:" in table.stdout and "verified" in table.stdout


def test_s3_urls_with_the_endpoint_from_the_option_or_the_environment(
    cli: CliFn, spot: Callable[[str], Spot], s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = seeded(spot("sqlite"), TRICKY)
    bucket = s3.new_bucket()
    to = f"s3://{bucket}/copy"
    result = cli("migrate", "--from", source.spec, "--to", to, "--endpoint-url", s3.endpoint_url)
    assert result.exit_code == 0, result.stderr
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    back = spot("sqlite")
    result = cli("migrate", "--from", to, "--to", back.spec, "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["source"] == f"s3://{bucket}/copy/"
    assert (
        without_audit(back.contents())
        == {k: v for k, v in without_audit(source.contents()).items()} | {}
    )
    assert len(audits(back.contents())) == 2


# -- refusals --------------------------------------------------------------------------------


def test_a_non_empty_target_needs_merge(cli: CliFn, spot: Callable[[str], Spot]) -> None:
    source = seeded(spot("sqlite"), {"sessions:1": "new", "a": "1"})
    target = seeded(spot("sqlite"), {"sessions:1": "old", "theirs": "2"})
    before = dump_tables(Path(target.spec))
    refused = run(cli, source, target)
    assert refused.exit_code == 4 and "--merge" in refused.stderr
    unconfirmed = run(cli, source, target, "--merge")
    assert unconfirmed.exit_code == 4 and "--yes" in unconfirmed.stderr
    assert dump_tables(Path(target.spec)) == before
    merged = run(cli, source, target, "--merge", "--yes")
    assert merged.exit_code == 0, merged.stderr
    rows = {r["namespace"]: r for r in merged.json()["namespaces"]}
    assert rows[""]["extra"] == 1 and rows[""]["ok"]
    assert without_audit(target.contents()) == {"sessions:1": "new", "a": "1", "theirs": "2"}


def test_dry_run_changes_nothing(
    cli: CliFn, spot: Callable[[str], Spot], postgres: Postgres
) -> None:
    source = seeded(spot("sqlite"), {"a": "1", "b": "2"})
    sqlite_target, pg_target = spot("sqlite"), spot("postgres")
    for target in (sqlite_target, pg_target):
        result = run(cli, source, target, "--dry-run")
        assert result.exit_code == 0, result.stderr
        assert result.json() == {
            "source": source.open().describe(),
            "target": result.json()["target"],
            "source_keys": 2,
            "target_state": "missing",
            "merge": False,
            "resume_after": None,
            "to_copy": 2,
            "dry_run": True,
        }
    assert not Path(sqlite_target.spec).exists()
    schema = pg_target.spec.rpartition("schema=")[2]
    with postgres.connect() as conn:
        assert (
            conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
            is None
        )
    text = cli("migrate", "--from", source.spec, "--to", sqlite_target.spec, "--dry-run")
    assert "would copy 2 key(s)" in text.stdout


def test_a_refused_migration_creates_no_target(
    cli: CliFn, spot: Callable[[str], Spot], postgres: Postgres
) -> None:
    source = seeded(spot("sqlite"), {"a": "1", PROGRESS_KEY: "{}"})  # half a migration itself
    sqlite_target, pg_target = spot("sqlite"), spot("postgres")
    for target in (sqlite_target, pg_target):
        refused = run(cli, source, target)
        assert refused.exit_code == 4 and "unfinished migration into it" in refused.stderr
    assert not Path(sqlite_target.spec).exists()
    schema = pg_target.spec.rpartition("schema=")[2]
    with postgres.connect() as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        assert found.fetchone() is None


def test_the_same_store_is_refused(cli: CliFn, spot: Callable[[str], Spot]) -> None:
    sqlite = seeded(spot("sqlite"), {"a": "1"})
    assert run(cli, sqlite, sqlite).exit_code == 2
    pg = seeded(spot("postgres"), {"a": "1"})
    result = run(cli, pg, pg, "--merge", "--yes")
    assert result.exit_code == 2 and "same store" in result.stderr
    assert pg.contents() == {"a": "1"}


def test_passwords_are_refused_on_the_command_line(cli: CliFn, spot: Callable[[str], Spot]) -> None:
    source = seeded(spot("sqlite"), {"a": "1"})
    result = cli("migrate", "--from", source.spec, "--to", "postgresql://tf:hunter2@127.0.0.1/test")
    assert (
        result.exit_code == 4 and "PGPASSWORD" in result.stderr and "hunter2" not in result.stderr
    )


def test_an_unreachable_target_is_exit_7(cli: CliFn, spot: Callable[[str], Spot]) -> None:
    source = seeded(spot("sqlite"), {"a": "1"})
    result = cli("migrate", "--from", source.spec, "--to", "postgresql://postgres@127.0.0.1:1/test")
    assert result.exit_code == 7 and "127.0.0.1:1" in result.stderr


# -- interruptions and faults ------------------------------------------------------------------


def numbered(count: int) -> dict[str, str]:
    return {f"conv:s:{i:04d}": f'{{"n":{i}}}' for i in range(count)}


def assert_consistent(target: Spot, source_rows: dict[str, str]) -> str:
    """Every source key up to the recorded one is in the target, with its value."""
    rows = target.contents()
    progress = json.loads(rows[PROGRESS_KEY])
    last = progress["lastKey"]
    assert last is not None
    copied = {k: v for k, v in source_rows.items() if k <= last}
    assert {k: rows[k] for k in copied} == copied
    assert progress["copied"] == len(copied)
    return str(last)


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "s3"])
def test_an_interrupted_migration_resumes(
    cli: CliFn, spot: Callable[[str], Spot], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = numbered(45)
    source, target = seeded(spot("sqlite"), rows), spot(kind)
    provider_class = type(target.open())
    real = provider_class.set_batched
    calls = []

    def interrupted_on_the_third_batch(self: Any, items: Any) -> int:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, items)

    monkeypatch.setattr(provider_class, "set_batched", interrupted_on_the_third_batch)
    stopped = run(cli, source, target, "--batch-size", "10")
    assert stopped.exit_code == 130
    assert "run the same command again" in stopped.stderr
    last = assert_consistent(target, rows)
    assert last == "conv:s:0019"
    monkeypatch.setattr(provider_class, "set_batched", real)
    finished = run(cli, source, target, "--batch-size", "10")
    assert finished.exit_code == 0, finished.stderr
    report = finished.json()
    assert report["resume_after"] == last and report["target_state"] == "resumable"
    assert report["copied"] == 25 and report["verified"]
    assert without_audit(target.contents()) == rows


def terminate(postgres: Postgres, pid: int) -> None:
    """End the backend ``pid`` and wait until it is gone (it was: the caller slept 0.5 s,
    or not at all, which a loaded machine's backend could outlive)."""
    with postgres.connect() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        hang = time.monotonic() + 60  # a guard against a hang, not a measure
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < hang, "the backend outlived pg_terminate_backend"
            time.sleep(0.01)


def test_target_connection_dropped_mid_migrate(
    cli: CliFn, spot: Callable[[str], Spot], postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.storage.postgres.backend import PostgresStorage

    rows = numbered(60)
    source, target = seeded(spot("sqlite"), rows), spot("postgres")
    real = PostgresStorage.set_many
    calls = []

    def dropped_before_the_third_batch(self: PostgresStorage, items: Any) -> int:
        calls.append(1)
        if len(calls) == 3:
            terminate(postgres, self.backend_pid())
        return real(self, items)

    monkeypatch.setattr(PostgresStorage, "set_many", dropped_before_the_third_batch)
    failed = run(cli, source, target, "--batch-size", "10")
    assert failed.exit_code == 7, failed.stderr
    assert "connection to PostgreSQL lost" in failed.stderr
    assert "run the same command again" in failed.stderr and "Traceback" not in failed.stderr
    assert assert_consistent(target, rows) == "conv:s:0019"
    monkeypatch.setattr(PostgresStorage, "set_many", real)
    finished = run(cli, source, target, "--batch-size", "10")
    assert finished.exit_code == 0 and finished.json()["verified"], finished.stderr
    assert without_audit(target.contents()) == rows


def test_target_backend_terminated_mid_copy_is_one_stderr_line(
    cli: CliFn, spot: Callable[[str], Spot], postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15: libpq's three-line message and psycopg's ``terminating <psycopg.Copy
    [BAD] at 0x...>`` became one line, exit 7; the rerun finishes."""
    import psycopg

    from triggerfish_cli.storage.postgres.backend import PostgresStorage

    rows = numbered(600)
    source, target = seeded(spot("sqlite"), rows), spot("postgres")
    real_write_row = psycopg.Copy.write_row
    written: list[int] = []
    opened: list[PostgresStorage] = []
    real_init = PostgresStorage.__init__

    def remember(self: PostgresStorage, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        opened.append(self)

    def terminated_mid_copy(self: Any, row: Any) -> None:
        written.append(1)
        if len(written) == 150:  # inside the second batch's COPY
            terminate(postgres, opened[-1].backend_pid())  # gone before the COPY sends more
        real_write_row(self, row)

    monkeypatch.setattr(PostgresStorage, "__init__", remember)
    monkeypatch.setattr(psycopg.Copy, "write_row", terminated_mid_copy)
    # As outside pytest (whose log capture sits on the root logger): a psycopg
    # warning with no handler of ours would reach stderr through logging's last resort.
    monkeypatch.setattr(logging.getLogger("psycopg"), "propagate", False)
    failed = run(cli, source, target, "--batch-size", "100")
    assert failed.exit_code == 7, failed.stderr
    lines = failed.stderr.splitlines()
    assert len(lines) == 1, failed.stderr
    assert lines[0].startswith("error:") and "connection to PostgreSQL lost" in lines[0]
    assert "psycopg.Copy" not in failed.stderr and "0x" not in failed.stderr
    monkeypatch.setattr(psycopg.Copy, "write_row", real_write_row)
    finished = run(cli, source, target, "--batch-size", "100")
    assert finished.exit_code == 0 and finished.json()["verified"], finished.stderr
    assert without_audit(target.contents()) == rows


def test_a_server_error_with_detail_is_one_line(
    cli: CliFn, spot: Callable[[str], Spot], postgres: Postgres
) -> None:
    """A constraint violation (message, DETAIL, HINT from the server) is one line, exit 1-9."""
    rows = numbered(80)
    source, target = seeded(spot("sqlite"), rows), spot("postgres")
    target.open().close()  # the kv table, empty
    schema = target.spec.split("?schema=")[1]
    with postgres.connect() as admin:  # a constraint of the operator's: values shorter than 8
        admin.execute(f"ALTER TABLE {schema}.kv ADD CONSTRAINT short CHECK (length(value) < 8)")
    failed = run(cli, source, target)
    assert 1 <= failed.exit_code <= 9, failed.stderr
    lines = failed.stderr.splitlines()
    assert len(lines) == 1, failed.stderr
    assert 'violates check constraint "short"' in lines[0] and "detail: Failing row" in lines[0]


def test_source_connection_dropped_mid_migrate(
    cli: CliFn, spot: Callable[[str], Spot], postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.storage.postgres.backend import PostgresStorage

    rows = numbered(60)
    source, target = seeded(spot("postgres"), rows), spot("sqlite")
    real = PostgresStorage._paged
    pages = []

    def dropped_on_the_third_page(self: PostgresStorage, *args: Any) -> Iterator[Any]:
        for number, row in enumerate(real(self, *args)):
            if number and number % 10 == 0:
                pages.append(1)
                if len(pages) == 2 and self.read_only:
                    terminate(postgres, self.backend_pid())
            yield row

    monkeypatch.setattr(PostgresStorage, "_paged", dropped_on_the_third_page)
    failed = run(cli, source, target, "--batch-size", "10")
    assert failed.exit_code == 7 and "connection to PostgreSQL lost" in failed.stderr
    assert_consistent(target, rows)
    monkeypatch.setattr(PostgresStorage, "_paged", real)
    finished = run(cli, source, target, "--batch-size", "10")
    assert finished.exit_code == 0 and finished.json()["verified"], finished.stderr
    assert without_audit(target.contents()) == rows
    assert source.contents() == rows  # nothing written to the source, not even an audit


def test_a_source_changed_during_the_copy_fails_verification(
    cli: CliFn, spot: Callable[[str], Spot], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway rewrites a copied key and adds one behind the copy: SQLite's
    data_version shows it, the source is read again, and the difference is found."""
    source = seeded(spot("sqlite"), {"sessions:1": "a", "sessions:2": "b", "sessions:3": "c"})
    target = spot("sqlite")
    real = SqliteStorage.set_batched
    calls = []

    def gateway_writes_meanwhile(self: Any, items: Any) -> int:
        written = real(self, items)
        calls.append(1)
        if len(calls) == 1:
            seeded(source, {"sessions:1": "changed", "sessions:0": "new"})
        return written

    monkeypatch.setattr(SqliteStorage, "set_batched", gateway_writes_meanwhile)
    failed = run(cli, source, target, "--batch-size", "1")
    assert failed.exit_code == 5 and "sessions:" in failed.stderr and "--merge" in failed.stderr
    [row] = failed.json()["namespaces"]
    assert (row["different"], row["missing"], row["ok"]) == (1, 1, False)
    assert failed.json()["verified"] is False
    assert PROGRESS_KEY not in target.contents() and audits(target.contents()) == []
    monkeypatch.setattr(SqliteStorage, "set_batched", real)
    fixed = run(cli, source, target, "--merge", "--yes")
    assert fixed.exit_code == 0 and fixed.json()["verified"], fixed.stderr
    assert without_audit(target.contents()) == source.contents()


def test_a_damaged_target_fails_verification(
    cli: CliFn, spot: Callable[[str], Spot], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write the target lost (or garbled) is caught by the checksums."""
    from triggerfish_cli.storage.postgres.backend import PostgresStorage

    rows = numbered(30)
    source, target = seeded(spot("sqlite"), rows), spot("postgres")
    real = PostgresStorage.set_many

    def lossy(self: Any, items: Any) -> int:
        items = list(items)
        written = real(self, items)
        if any(key == "conv:s:0012" for key, _ in items):
            self.delete("conv:s:0012")
            self.set("conv:s:0013", "garbled")
        return written

    monkeypatch.setattr(PostgresStorage, "set_many", lossy)
    failed = run(cli, source, target, "--batch-size", "10")
    assert failed.exit_code == 5
    [row] = [r for r in failed.json()["namespaces"] if r["namespace"] == "conv:"]
    assert (row["missing"], row["different"], row["source_keys"], row["target_keys"]) == (
        1,
        1,
        30,
        29,
    )


def test_a_target_holding_another_migration_is_refused(
    cli: CliFn, spot: Callable[[str], Spot], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = seeded(spot("sqlite"), numbered(30)), seeded(spot("sqlite"), {"b": "2"})
    target = spot("sqlite")
    real = SqliteStorage.set_batched
    monkeypatch.setattr(
        SqliteStorage, "set_batched", lambda self, items: (_ for _ in ()).throw(KeyboardInterrupt)
    )
    assert run(cli, first, target, "--batch-size", "10").exit_code == 130
    monkeypatch.setattr(SqliteStorage, "set_batched", real)
    refused = run(cli, second, target, "--merge", "--yes")
    assert refused.exit_code == 4 and "unfinished migration from" in refused.stderr
    assert run(cli, first, target).exit_code == 0
    onwards = run(cli, target, spot("sqlite"))
    assert onwards.exit_code == 0
