"""Faults on the enterprise backends, through the commands an operator runs.

- An unreachable Postgres server or S3 endpoint: every command exits 7 with
  one line naming where and why, never a traceback or a hang (the connect
  timeout bounds it; the silent-server cases are in tests/storage/).
- The Postgres connection dropped in the middle of a sweep (terminated from
  another connection, as a failover or an admin would): exit 7, the batches
  committed before stay done, nothing else changed, and running the sweep
  again finishes the job.
"""

from __future__ import annotations

import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn, StoreHandle
from tests.helpers.records import conv
from tests.helpers.services import Postgres

AS_OF = "2026-07-01T00:00:00Z"
COMMANDS = [
    ["kv", "list"],
    ["kv", "namespaces"],
    ["kv", "get", "x"],
    ["kv", "set", "x", "1"],
    ["memory", "search", "tea"],
    ["memory", "stats"],
    ["memory", "reindex"],
    ["retention", "plan"],
    ["retention", "sweep", "--yes"],
    ["config", "snapshot"],
    ["config", "history"],
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unreachable_config(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> Path:
    port = free_port()
    if kind == "postgres":
        section = f'  backend: postgres\n  dsn: "postgresql://postgres@127.0.0.1:{port}/test"\n'
    else:
        request.getfixturevalue("s3")  # credentials and region for boto3
        section = f"  backend: s3\n  bucket: b1\n  endpoint_url: http://127.0.0.1:{port}\n"
    path = tmp_path / "triggerfish.yaml"
    path.write_text("logging:\n  level: normal\nstorage:\n" + section)
    return path


@pytest.mark.parametrize("kind", ["postgres", "s3"])
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_on_an_unreachable_backend_is_exit_7(
    cli: CliFn, tmp_path: Path, kind: str, command: list[str], request: pytest.FixtureRequest
) -> None:
    if kind == "postgres":
        pytest.importorskip("psycopg")
    config = unreachable_config(tmp_path, kind, request)
    result = cli("--config", str(config), *command)
    assert result.exit_code == 7, (result.exit_code, result.stderr)
    assert "127.0.0.1:" in result.stderr and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr


def old_conversations(count: int) -> dict[str, str]:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return dict(conv("s", seq, at) for seq in range(count))


def test_connection_dropped_mid_sweep_is_exit_7_and_a_rerun_finishes(
    cli: CliFn, base_dir: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    from tests.conftest import STORE_BACKENDS
    from triggerfish_cli.storage.postgres.backend import PostgresStorage

    store: StoreHandle = STORE_BACKENDS["postgres"](base_dir, request)
    postgres: Postgres = request.getfixturevalue("postgres")
    rows = old_conversations(300)
    rows["keep:me"] = "1"
    provider: Any = store.open()
    provider.set_many(rows.items())
    provider.close()
    real = PostgresStorage.delete_if_unchanged
    calls: list[int] = []

    def dropped_before_the_third_batch(self: PostgresStorage, items: Any, **kwargs: Any) -> int:
        items = list(items)
        calls.append(len(items))
        if len(calls) == 3:
            with postgres.connect() as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (self.backend_pid(),))
        return real(self, items, **kwargs)

    monkeypatch.setattr(PostgresStorage, "delete_if_unchanged", dropped_before_the_third_batch)
    failed = cli(
        *store.args, "retention", "sweep", "--yes", "--as-of", AS_OF, "--batch-size", "50",
        "--pause", "0",
    )  # fmt: skip
    assert failed.exit_code == 7, failed.stderr
    assert "connection to PostgreSQL lost" in failed.stderr and "Traceback" not in failed.stderr
    assert len([line for line in failed.stderr.splitlines() if line.startswith("error:")]) == 1
    left = {k: v for k, v in store.contents().items() if not k.startswith("audit:")}
    # Whole batches were deleted, the rest is exactly as it was.
    assert set(left) <= set(rows) and left == {k: rows[k] for k in left}
    gone = sorted(set(rows) - set(left))
    # The batch sizes adapt to the lock time (a loaded machine makes them smaller):
    # exactly the first two batches are gone, whatever their sizes.
    assert len(calls) == 3 and 0 < len(gone) == sum(calls[:2]) < 300
    assert gone == sorted(rows)[: len(gone)]

    monkeypatch.setattr(PostgresStorage, "delete_if_unchanged", real)
    finished = cli(*store.args, "retention", "sweep", "--yes", "--as-of", AS_OF, "-f", "json")
    assert finished.exit_code == 0, finished.stderr
    assert finished.json()["deleted"] == 300 - len(gone)  # type: ignore[index]
    assert {k: v for k, v in store.contents().items() if not k.startswith("audit:")} == {
        "keep:me": "1"
    }
