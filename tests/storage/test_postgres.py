"""The Postgres backend against the real server: what the contract suite cannot show."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn
from tests.helpers.services import Postgres
from triggerfish_cli.errors import (
    BackendUnavailableError,
    InvalidDataError,
    RefusedError,
)
from triggerfish_cli.storage.postgres.backend import PostgresStorage
from triggerfish_cli.storage.remote_settings import dsn_has_password


@pytest.fixture
def schema(postgres: Postgres) -> Iterator[str]:
    name = postgres.new_schema()
    yield name
    postgres.drop_schema(name)


@pytest.fixture
def store(postgres: Postgres, schema: str) -> Iterator[PostgresStorage]:
    provider = PostgresStorage(postgres.dsn, schema=schema, create=True)
    yield provider
    provider.close()


def test_table_is_binary_ordered_and_prefixes_are_index_range_scans(
    postgres: Postgres, store: PostgresStorage, schema: str
) -> None:
    with postgres.connect() as conn:
        collation = conn.execute(
            "SELECT collation_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'kv' AND column_name = 'key'",
            (schema,),
        ).fetchone()
        assert collation == ("C",)
        store.set_many((f"sessions:{i:05d}", "{}") for i in range(2000))
        conn.execute(f'ANALYZE "{schema}".kv')
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                f"EXPLAIN SELECT key FROM \"{schema}\".kv WHERE key >= 'sessions:0001' "
                "AND key < 'sessions:0002' ORDER BY key"
            )
        )
    assert "Index" in plan and "Seq Scan" not in plan


def test_missing_store_is_not_created_unless_asked(postgres: Postgres, schema: str) -> None:
    with pytest.raises(BackendUnavailableError, match="no Triggerfish store in schema"):
        PostgresStorage(postgres.dsn, schema=schema)
    with postgres.connect() as conn:
        assert (
            conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
            is None
        )
    PostgresStorage(postgres.dsn, schema=schema, create=True).close()
    PostgresStorage(postgres.dsn, schema=schema).close()


def test_a_table_in_another_collation_is_refused(postgres: Postgres, schema: str) -> None:
    with postgres.connect() as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".kv (key text PRIMARY KEY, value text)')
        conn.execute(f'ALTER TABLE "{schema}".kv ALTER COLUMN key TYPE text COLLATE "und-x-icu"')
    with pytest.raises(InvalidDataError, match='not "C"'):
        PostgresStorage(postgres.dsn, schema=schema)
    with postgres.connect() as conn:  # ucs_basic is byte order too: accepted
        conn.execute(f'ALTER TABLE "{schema}".kv ALTER COLUMN key TYPE text COLLATE "ucs_basic"')
    PostgresStorage(postgres.dsn, schema=schema).close()


def test_bulk_writes_copy_into_an_empty_range_and_upsert_otherwise(
    store: PostgresStorage,
) -> None:
    fresh = [(f"a:{i:03d}", "1") for i in range(200)]
    assert store.set_many(fresh) == 200
    overlapping = [(f"a:{i:03d}", "2") for i in range(100, 300)] + [("a:150", "3")]
    assert store.set_many(overlapping) == 200
    values = dict(store.scan())
    assert len(values) == 300
    assert values["a:099"] == "1" and values["a:100"] == "2" and values["a:150"] == "3"


def test_a_write_racing_the_copy_falls_back_to_upsert(
    store: PostgresStorage, postgres: Postgres, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer inserts a key of the batch between the range check and the COPY."""
    real_copy = store._copy
    raced = []

    def copy_after_a_race(table: str, rows: Any) -> None:
        if not raced and "tfadmin_stage" not in table:
            raced.append(True)
            with postgres.connect() as other:
                other.execute(f'INSERT INTO "{schema}".kv VALUES (%s, %s)', ("b:050", "theirs"))
        real_copy(table, rows)

    monkeypatch.setattr(store, "_copy", copy_after_a_race)
    assert store.set_many((f"b:{i:03d}", "ours") for i in range(100)) == 100
    assert raced and store.count("b:") == 100 and store.get("b:050") == "ours"


def test_nul_is_refused_and_nothing_of_the_batch_is_written(
    cli: CliFn, store: PostgresStorage, tmp_path: Path, postgres: Postgres, schema: str
) -> None:
    lines = [f'{{"key":"k{i}","value":"v"}}' for i in range(100)] + [
        '{"key":"bad","value":"a\\u0000b"}'
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    yaml = tmp_path / "pg.yaml"
    yaml.write_text(f'storage:\n  backend: postgres\n  dsn: "{postgres.dsn}"\n  schema: {schema}\n')
    result = cli("--config", str(yaml), "kv", "import", str(source))
    assert result.exit_code == 8 and "NUL" in result.stderr
    assert store.count() == 0


def test_a_restore_load_is_one_transaction_all_or_nothing(store: PostgresStorage) -> None:
    store.set_many([("a:1", "old"), ("a:2", "old"), ("b:1", "old")])
    rows = [(f"a:{i}", "new") for i in range(3, 7000)]
    batches: list[int] = []
    assert store.load_at_once(iter(rows), replace=True, only=["a:"], on_batch=batches.append) == (
        6997,
        2,
    )
    assert batches == [5000, 1997]
    assert store.get("a:1") is None and store.get("b:1") == "old" and store.count("a:") == 6997
    assert store.load_at_once(iter([("c:1", "x")]), replace=True) == (1, 6998)
    assert store.list() == ["c:1"]
    broken = [(f"d:{i:05d}", "v") for i in range(6000)] + [("d:bad", "a\x00b")]
    with pytest.raises(InvalidDataError, match="NUL"):  # a merge that fails part way
        store.load_at_once(iter(broken), replace=False)
    assert store.list() == ["c:1"]  # its first batch went back with the rest


def test_read_only_session_refuses_writes(postgres: Postgres, store: PostgresStorage) -> None:
    store.set("a", "1")
    reader = PostgresStorage(postgres.dsn, schema=store.schema, read_only=True)
    try:
        assert reader.get("a") == "1"
        with pytest.raises(RefusedError, match="read-only"):
            reader.set("a", "2")
        with pytest.raises(RefusedError, match="read-only"):
            reader.delete_many(["a"])
    finally:
        reader.close()
    assert store.get("a") == "1"


def test_dropped_connection_mid_delete_is_exit_7_and_a_rerun_finishes(
    cli: CliFn,
    postgres: Postgres,
    store: PostgresStorage,
    schema: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server ends our session between two batches of `kv delete --prefix`."""
    store.set_many((f"conv:{i:05d}", "x") for i in range(2500))
    store.set("keep", "1")
    yaml = tmp_path / "pg.yaml"
    yaml.write_text(f'storage:\n  backend: postgres\n  dsn: "{postgres.dsn}"\n  schema: {schema}\n')
    real = PostgresStorage._batched
    calls = []

    def terminate_after_first_batch(self: PostgresStorage, *args: Any, **kwargs: Any) -> int:
        statement, batches, pause, on_batch = args

        def batches_then_drop() -> Iterator[Any]:
            for number, params in enumerate(batches):
                if number == 1:
                    with postgres.connect() as admin:
                        admin.execute("SELECT pg_terminate_backend(%s)", (self.backend_pid(),))
                calls.append(number)
                yield params

        return real(self, statement, batches_then_drop(), pause, on_batch)

    monkeypatch.setattr(PostgresStorage, "_batched", terminate_after_first_batch)
    result = cli("--config", str(yaml), "kv", "delete", "--prefix", "conv:", "--yes")
    assert result.exit_code == 7, result.stderr
    assert "connection to PostgreSQL lost" in result.stderr and "rerun" in result.stderr
    assert "Traceback" not in result.stderr
    left = store.count("conv:")
    assert left == 1500  # the first batch of 1000 committed, nothing of the second
    monkeypatch.setattr(PostgresStorage, "_batched", real)
    again = cli("--config", str(yaml), "kv", "delete", "--prefix", "conv:", "--yes", "-f", "json")
    assert again.exit_code == 0 and again.json()["deleted"] == 1500  # type: ignore[index]
    assert store.count("conv:") == 0 and store.get("keep") == "1"


# -- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "has"),
    [
        ("postgresql://u:secret@h/db", True),
        ("postgres://u@h/db?password=secret", True),
        ("host=h user=u password=secret", True),
        ("host=h password = 'x y'", True),
        ("postgresql://u@h:5432/db", False),
        ("postgresql://h/db?sslmode=require", False),
        ("host=h user=u passfile=/x/pgpass", False),
        ("", False),
    ],
)
def test_dsn_password_detection(dsn: str, has: bool) -> None:
    assert dsn_has_password(dsn) is has


def pg_config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "pg.yaml"
    path.write_text("storage:\n  backend: postgres\n" + body, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ('  dsn: "postgresql://u:hunter2@h/db"\n', 4, "PGPASSWORD"),
        ("  dsn: host=h password=hunter2\n", 4, "~/.pgpass"),
        ("  password: hunter2\n", 4, "never go in triggerfish.yaml"),
        ("  schema: pg_catalog\n", 8, "reserved"),
        ("  schema: ''\n", 8, "schema name"),
        ("  dsn: 5\n", 8, "connection string"),
        ("  colour: red\n", 8, "unknown setting"),
        ("  connect_timeout: 0\n", 8, "positive"),
    ],
)
def test_settings_are_checked(
    cli: CliFn, tmp_path: Path, body: str, code: int, message: str
) -> None:
    config = pg_config(tmp_path, body)
    result = cli("--config", config, "kv", "list")
    assert result.exit_code == code, result.stderr
    assert message in result.stderr and config in result.stderr
    assert "hunter2" not in result.stderr


def test_backend_postgres_uses_the_libpq_environment(
    cli: CliFn, postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGHOST", "127.0.0.1")
    monkeypatch.setenv("PGPORT", "5432")
    monkeypatch.setenv("PGUSER", "postgres")
    monkeypatch.setenv("PGDATABASE", "test")
    result = cli("--backend", "postgres", "kv", "list")
    # The default schema "triggerfish" is not created by reading it.
    assert result.exit_code == 7
    assert result.stderr.startswith(
        "error: no Triggerfish store in schema 'triggerfish' of postgres@127.0.0.1:5432/test "
        "(it has no kv table) (from --backend postgres)"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_server_is_exit_7_with_host_and_reason(cli: CliFn, tmp_path: Path) -> None:
    port = free_port()
    yaml = pg_config(tmp_path, f'  dsn: "postgresql://postgres@127.0.0.1:{port}/test"\n')
    result = cli("--config", yaml, "kv", "list")
    assert result.exit_code == 7
    assert f"127.0.0.1:{port}" in result.stderr and "refused" in result.stderr.lower()
    assert result.stderr.count("\n") == 1


def test_silent_server_times_out_with_exit_7(tmp_path: Path) -> None:
    """A server that accepts the connection and never answers: a timeout, not a hang."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        yaml = pg_config(
            tmp_path,
            f'  dsn: "postgresql://postgres@127.0.0.1:{port}/test"\n  connect_timeout: 1\n',
        )
        run = subprocess.run(
            [sys.executable, "-m", "triggerfish_cli", "--config", yaml, "kv", "list"],
            capture_output=True,
            text=True,
            timeout=60,  # a guard against a hang, not a timing assertion
        )
    assert run.returncode == 7, run.stderr
    assert f"127.0.0.1:{port}" in run.stderr and "timeout" in run.stderr.lower()
    assert "Traceback" not in run.stderr


def test_server_side_checksums_equal_the_python_ones(store: PostgresStorage) -> None:
    from triggerfish_cli.checksums import namespace_sums
    from triggerfish_cli.storage.in_memory import MemoryStorage

    rows = {
        "sessions:1": "a",
        "sessions:2": '{"x":"日本"}',
        "é:日本": "ü",
        "plain": "",
        "": "empty key",
        "main-session-id": "x",
        "main-session-idx:1": "y",
        "x:y:z": "1" * 5000,
        "zz": "tail",
        "\U0010ffff": "last",
    }
    store.set_many(rows.items())
    native = {k: (v.count, v.hex) for k, v in namespace_sums(store).items()}
    python = {k: (v.count, v.hex) for k, v in namespace_sums(MemoryStorage(rows)).items()}
    assert native == python
    assert native["sessions:"][0] == 2 and native[""][0] == 4


def test_the_lock_is_server_side_names_its_holder_and_dies_with_its_connection(
    postgres: Postgres, store: PostgresStorage
) -> None:
    from triggerfish_cli.errors import BusyError
    from triggerfish_cli.storage.postgres.lock import lock_key

    other = store.reopen(read_only=False)
    try:
        with store.lock("retention-sweep"):
            with pytest.raises(BusyError) as info, other.lock("retention-sweep"):
                pass
            assert info.value.exit_code == 6 and "server pid" in str(info.value)
            with postgres.connect() as admin:
                holders = admin.execute(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND ((classid::bigint << 32) | objid::bigint) = %s",
                    (lock_key(store.schema, "retention-sweep"),),
                ).fetchall()
                assert len(holders) == 1
                # The holder's connection dies (a crashed or killed job): the lock goes with it.
                admin.execute("SELECT pg_terminate_backend(%s)", (holders[0][0],))
            with other.lock("retention-sweep", wait=10):
                pass
    finally:
        other.close()
