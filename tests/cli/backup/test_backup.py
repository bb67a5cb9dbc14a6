"""`backup` (logical) on every backend, and backups kept in S3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn, StoreHandle
from tests.helpers.gateway import GATEWAY_ROWS
from tests.helpers.services import S3

TRICKY = {
    "a/b%c": "1",
    "é:日本": "2",
    "trailing ": "3",
    "sep\u2028line": json.dumps({"x": "\u2028"}),
}
ROWS = {**GATEWAY_ROWS, **TRICKY}


def contents(store: StoreHandle) -> dict[str, str]:
    """The store's rows without the audit records of our backups and restores."""
    return {k: v for k, v in store.contents().items() if ":admin_backup_" not in k}


def create(cli: CliFn, store: StoreHandle, *args: str) -> tuple[Path, dict[str, Any]]:
    run = cli(*store.args, "backup", "create", "--format", "json", *args)
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    return Path(document["destination"]) / document["name"], document["manifest"]


@pytest.fixture
def rows() -> dict[str, str]:
    return dict(ROWS)


def test_logical_backup_of_every_backend_restores_into_an_empty_store(
    cli: CliFn, store: StoreHandle, tmp_path: Path, rows: dict[str, str]
) -> None:
    store.seed(rows)
    archive, manifest = create(cli, store, "--to", str(tmp_path / "backups"))
    assert manifest["kind"] == ("physical" if store.backend == "sqlite" else "logical")
    archive, manifest = create(cli, store, "--logical", "--to", str(tmp_path / "backups"))
    assert manifest["kind"] == "logical" and manifest["backend"] == store.backend
    assert manifest["keys"] == len(rows) + 1  # and the audit record of the first backup
    assert archive.name.endswith(".jsonl.zst")
    assert cli("backup", "verify", str(archive)).exit_code == 0

    # into the same backend, emptied
    provider: Any = store.open()
    provider.clear()
    provider.close()
    run = cli(*store.args, "backup", "restore", str(archive), "--format", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict) and document["mode"] == "empty"
    assert document["written"] == len(rows) + 1  # with the first backup's audit record
    assert contents(store) == rows

    # and across: into a fresh SQLite file
    target = tmp_path / "moved.db"
    run = cli("backup", "restore", str(archive), "--to", str(target), "--yes")
    assert run.exit_code == 0, run.stderr
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    moved = SqliteStorage(target)
    assert {k: v for k, v in moved.scan() if ":admin_backup_" not in k} == rows
    moved.close()


def test_logical_restore_into_a_non_empty_store_needs_replace_or_merge(
    cli: CliFn, store: StoreHandle, tmp_path: Path, rows: dict[str, str]
) -> None:
    store.seed(rows)
    archive, _ = create(cli, store, "--logical", "--to", str(tmp_path / "b"))
    provider: Any = store.open()
    provider.set("extra:key", "1")
    provider.set("sessions:changed", "new")
    provider.delete("a/b%c")
    provider.close()
    changed = contents(store)

    run = cli(*store.args, "backup", "restore", str(archive), "--yes")
    assert run.exit_code == 4 and "--replace" in run.stderr
    assert contents(store) == changed
    assert (
        cli(*store.args, "backup", "restore", str(archive), "--replace", "--merge").exit_code == 2
    )
    run = cli(*store.args, "backup", "restore", str(archive), "--replace")
    assert run.exit_code == 4  # no --yes off a TTY
    run = cli(*store.args, "backup", "restore", str(archive), "--merge", "--dry-run")
    assert run.exit_code == 0 and contents(store) == changed

    run = cli(*store.args, "backup", "restore", str(archive), "--merge", "--yes")
    assert run.exit_code == 0, run.stderr
    assert contents(store) == {**rows, "extra:key": "1", "sessions:changed": "new"}

    run = cli(*store.args, "backup", "restore", str(archive), "--replace", "--yes", "-f", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict) and document["mode"] == "replace"
    assert contents(store) == rows
    if store.backend == "s3":  # no transactions: the keys as they were are kept aside first
        assert document["kept"] and Path(document["kept"]).exists()
        assert cli("backup", "verify", document["kept"]).exit_code == 0
    else:
        assert document["kept"] is None


def test_a_damaged_logical_backup_leaves_every_backend_untouched(
    cli: CliFn, store: StoreHandle, tmp_path: Path, rows: dict[str, str]
) -> None:
    store.seed(rows)
    archive, manifest = create(cli, store, "--logical", "-c", "gzip", "--to", str(tmp_path / "b"))
    data = bytearray(archive.read_bytes())
    data[manifest["payload_bytes"] - 20] ^= 0x55
    archive.write_bytes(bytes(data))
    provider: Any = store.open()
    provider.set("extra:key", "1")
    provider.close()
    before = contents(store)
    run = cli(*store.args, "backup", "restore", str(archive), "--replace", "--yes")
    assert run.exit_code == 5, run.stderr
    assert contents(store) == before


def test_a_physical_backup_restores_into_every_backend(
    cli: CliFn, store: StoreHandle, gateway_db: Path, tmp_path: Path
) -> None:
    run = cli("--db", str(gateway_db), "backup", "create", "--to", str(tmp_path), "-f", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict) and document["manifest"]["kind"] == "physical"
    archive = tmp_path / document["name"]
    if store.backend == "sqlite":  # the fixture's store is the gateway's file here: emptied
        provider: Any = store.open()
        provider.clear()
        provider.close()
    run = cli(*store.args, "backup", "restore", str(archive), "--yes")
    assert run.exit_code == 0, run.stderr
    assert contents(store) == GATEWAY_ROWS


# -- backups kept in S3 ------------------------------------------------------------------


def test_backups_in_s3_create_list_verify_restore_prune(
    cli: CliFn, gateway_db: Path, s3: S3, tmp_path: Path
) -> None:
    bucket = s3.new_bucket()
    where = f"s3://{bucket}/nightly/"
    endpoint = ["--endpoint-url", s3.endpoint_url]
    names = []
    for args in ([], ["--logical", "-c", "gzip"], ["--label", "last"]):
        run = cli("backup", "create", "--to", where, *endpoint, "--format", "json", *args)
        assert run.exit_code == 0, run.stderr
        document = run.json()
        assert isinstance(document, dict)
        names.append(document["name"])
    client: Any = s3.client()
    head = client.head_object(Bucket=bucket, Key=f"nightly/{names[0]}")
    assert len(head["Metadata"]["sha256"]) == 64

    run = cli("backup", "list", "--from", where, *endpoint, "--format", "json")
    assert run.exit_code == 0, run.stderr
    listed = run.json()
    assert isinstance(listed, list) and [row["name"] for row in listed] == names
    assert listed[2]["label"] == "last" and {row["verified"] for row in listed} == {"no"}

    run = cli("backup", "verify", "--all", "--from", where, *endpoint)
    assert run.exit_code == 0, run.stderr
    listed = cli("backup", "list", "--from", where, *endpoint, "-f", "json").json()
    assert isinstance(listed, list) and {row["verified"] for row in listed} == {"yes"}

    target = tmp_path / "from-s3.db"
    for name in (names[0], names[1]):
        target.unlink(missing_ok=True)
        run = cli(
            "backup", "restore", name, "--from", where, *endpoint, "--to", str(target), "--yes"
        )
        assert run.exit_code == 0, run.stderr
        from triggerfish_cli.storage.sqlite.backend import SqliteStorage

        restored = SqliteStorage(target)
        assert {k: v for k, v in restored.scan() if ":admin_backup_" not in k} == GATEWAY_ROWS
        restored.close()

    run = cli("backup", "prune", "--from", where, *endpoint, "--keep-last", "1", "--yes")
    assert run.exit_code == 0, run.stderr
    listed = cli("backup", "list", "--from", where, *endpoint, "-f", "json").json()
    assert isinstance(listed, list)
    # the newest, and the newest verified one (all three were: the newest is both)
    assert [row["name"] for row in listed] == [names[2]]
    keys = [item["Key"] for item in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(keys) == sorted([f"nightly/{names[2]}", f"nightly/{names[2]}.verified"])


def test_a_damaged_backup_in_s3_fails_verification(cli: CliFn, gateway_db: Path, s3: S3) -> None:
    bucket = s3.new_bucket()
    where = f"s3://{bucket}/b"
    endpoint = ["--endpoint-url", s3.endpoint_url]
    run = cli("backup", "create", "--to", where, *endpoint, "-f", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    key = f"b/{document['name']}"
    client: Any = s3.client()
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[100] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))  # no sha256 metadata now
    run = cli("backup", "verify", "--latest", "--from", where, *endpoint)
    assert run.exit_code == 5, run.stderr
    assert "checksum" in run.stderr
    assert cli("backup", "verify", "nope", "--from", where, *endpoint).exit_code == 3


def test_a_large_backup_goes_to_s3_in_parts_and_verifies(
    cli: CliFn, gateway_db: Path, s3: S3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sqlite3

    from triggerfish_cli.storage.s3 import destination as backup_s3

    monkeypatch.setattr(backup_s3, "MULTIPART", 5 << 20)  # S3's smallest part
    conn = sqlite3.connect(gateway_db)
    with conn:
        conn.executemany(
            "INSERT INTO kv VALUES (?, ?)",
            ((f"conv:big:{i:012d}", "x" * 600) for i in range(20_000)),
        )
    conn.close()
    bucket = s3.new_bucket()
    where = f"s3://{bucket}/big"
    endpoint = ["--endpoint-url", s3.endpoint_url]
    run = cli("backup", "create", "-c", "none", "--to", where, *endpoint, "-f", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict) and document["manifest"]["payload_bytes"] > 10 << 20
    client: Any = s3.client()
    head = client.head_object(Bucket=bucket, Key=f"big/{document['name']}")
    assert head["ETag"].strip('"').endswith(("-2", "-3"))  # a multipart upload
    run = cli("backup", "verify", "--latest", "--from", where, *endpoint)
    assert run.exit_code == 0, run.stderr


def test_an_upload_s3_stored_differently_is_deleted_and_fails(
    cli: CliFn, gateway_db: Path, s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.storage.s3 import destination as backup_s3

    real = backup_s3._digests
    monkeypatch.setattr(backup_s3, "_digests", lambda path, size: (real(path, size)[0], "AAAA"))
    bucket = s3.new_bucket()
    run = cli("backup", "create", "--to", f"s3://{bucket}/x", "--endpoint-url", s3.endpoint_url)
    assert run.exit_code == 5, run.stderr
    assert "does not match" in run.stderr
    client: Any = s3.client()
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_a_logical_restore_brings_the_memory_search_index_in_line(
    cli: CliFn, store: StoreHandle, tmp_path: Path
) -> None:
    """Rows loaded behind the gateway's back are in its own search index afterwards."""
    import sqlite3

    from tests.helpers.gateway import write_gateway_store

    saved = cli(*store.args, "memory", "save", "deploy-notes", "zebra crossing at dawn",
                "--taint", "INTERNAL")  # fmt: skip
    assert saved.exit_code == 0, saved.stderr
    archive, _ = create(cli, store, "--logical", "--to", str(tmp_path / "b"))

    # a gateway store that already has its memory_fts tables, and other rows
    target = write_gateway_store(tmp_path / "gateway.db")
    run = cli("backup", "restore", str(archive), "--to", str(target), "--merge", "--yes")
    assert run.exit_code == 4 and "is a backup of another store" in run.stderr
    run = cli(
        "backup", "restore", str(archive), "--to", str(target), "--merge", "--yes", "--other-store"
    )
    assert run.exit_code == 0, run.stderr
    assert "memory search index" in run.stderr + run.stdout
    with sqlite3.connect(target) as conn:  # what the gateway's own search reads
        hits = conn.execute(
            "SELECT key, classification FROM memory_fts WHERE memory_fts MATCH 'zebra'"
        ).fetchall()
    assert hits == [("deploy-notes", "INTERNAL")]
    found = cli("--db", str(target), "memory", "search", "zebra", "--taint", "INTERNAL",
                "-f", "json")  # fmt: skip
    assert found.exit_code == 0, found.stderr
    assert [hit["key"] for hit in found.json()] == ["deploy-notes"]  # type: ignore[union-attr]
    hidden = cli("--db", str(target), "memory", "search", "zebra", "-f", "json")  # PUBLIC
    assert hidden.exit_code == 0 and hidden.json() == []
