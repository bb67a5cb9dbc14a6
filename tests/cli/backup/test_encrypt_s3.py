"""Encrypted backups kept in S3 (moto), and S3 server-side encryption passed through."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn, StoreHandle
from tests.helpers.gateway import GATEWAY_ROWS
from tests.helpers.services import S3


def _keygen(cli: CliFn, path: Path) -> str:
    run = cli("backup", "keygen", "-o", str(path))
    assert run.exit_code == 0, run.stderr
    return run.stdout.strip()


def _rows(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        rows = dict(conn.execute("SELECT key, value FROM kv"))
    finally:
        conn.close()
    return {key: value for key, value in rows.items() if ":admin_backup_" not in key}


def test_encrypted_backups_in_s3_with_sse_round_trip(
    cli: CliFn, gateway_db: Path, s3: S3, tmp_path: Path
) -> None:
    identity = tmp_path / "backup.key"
    public = _keygen(cli, identity)
    bucket = s3.new_bucket()
    where = f"s3://{bucket}/enc/"
    endpoint = ["--endpoint-url", s3.endpoint_url]
    names = []
    for args in ([], ["--logical"]):
        run = cli(
            "backup", "create", "--to", where, *endpoint, "-r", public, "--sse", "AES256",
            "-f", "json", *args,
        )  # fmt: skip
        assert run.exit_code == 0, run.stderr
        document = run.json()
        assert isinstance(document, dict) and document["name"].endswith(".age")
        names.append(document["name"])
    client: Any = s3.client()
    for name in names:
        head = client.head_object(Bucket=bucket, Key=f"enc/{name}")
        assert head["ServerSideEncryption"] == "AES256"
        body = client.get_object(Bucket=bucket, Key=f"enc/{name}")["Body"].read()
        assert b"sessions:" not in body and str(gateway_db).encode() not in body

    listed = cli("backup", "list", "--from", where, *endpoint, "-f", "json").json()
    assert isinstance(listed, list)
    assert [row["encrypted"] for row in listed] == [True, True]
    assert [row["keys"] for row in listed] == [None, None]

    run = cli("backup", "verify", "--all", "--from", where, *endpoint)
    assert run.exit_code == 0 and run.stdout.count("contents not checked") == 2

    # with the identity: every check, the verdict kept beside each (server-side encrypted too)
    config = tmp_path / "triggerfish.yaml"
    config.write_text("backup:\n  sse: AES256\n")
    run = cli(
        "--config", str(config), "--db", str(gateway_db), "backup", "verify", "--all",
        "--from", where, *endpoint, "-i", str(identity),
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    assert "contents not checked" not in run.stdout
    for name in names:
        marker = client.head_object(Bucket=bucket, Key=f"enc/{name}.verified")
        assert marker["ServerSideEncryption"] == "AES256"

    target = tmp_path / "from-s3.db"
    for name in names:
        target.unlink(missing_ok=True)
        run = cli("backup", "restore", name, "--from", where, *endpoint, "--to", str(target))
        assert run.exit_code == 2 and "--identity" in run.stderr
        assert not target.exists()
        run = cli(
            "backup", "restore", name, "--from", where, *endpoint, "--to", str(target),
            "-i", str(identity), "--yes",
        )  # fmt: skip
        assert run.exit_code == 0, run.stderr
        assert _rows(target) == GATEWAY_ROWS


def test_sse_kms_from_the_settings_reaches_a_multipart_upload(
    cli: CliFn,
    gateway_db: Path,
    s3: S3,
    tmp_path: Path,
    base_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from triggerfish_cli.storage.s3 import destination as backup_s3

    monkeypatch.setattr(backup_s3, "MULTIPART", 5 << 20)  # S3's smallest part
    conn = sqlite3.connect(gateway_db)
    with conn:
        conn.executemany(
            "INSERT INTO kv VALUES (?, ?)",
            ((f"conv:bulk:{i:08d}", json.dumps({"pad": f"{i}" * 200})) for i in range(20_000)),
        )
    conn.close()
    key_id = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    public = _keygen(cli, tmp_path / "k")
    (base_dir / "triggerfish.yaml").write_text(
        f"backup:\n  recipients: [{public}]\n  sse: aws:kms\n  sse_kms_key_id: {key_id}\n"
    )
    bucket = s3.new_bucket()
    where = f"s3://{bucket}/kms/"
    run = cli(
        "backup", "create", "-c", "none", "--to", where, "--endpoint-url", s3.endpoint_url,
        "-f", "json",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    head: Any = s3.client().head_object(Bucket=bucket, Key=f"kms/{document['name']}")  # type: ignore[attr-defined]
    assert head["ContentLength"] > 5 << 20 and "-" in head["ETag"]  # multipart
    assert head["ServerSideEncryption"] == "aws:kms"
    assert head["SSEKMSKeyId"].endswith("1234abcd-12ab-34cd-56ef-1234567890ab")
    assert document["name"].endswith(".db.age")


def test_bad_sse_options_are_refused(cli: CliFn, gateway_db: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "b")
    run = cli("backup", "create", "--to", out, "--sse", "rot13")
    assert run.exit_code == 2
    run = cli("backup", "create", "--to", out, "--sse", "AES256", "--sse-kms-key-id", "k")
    assert run.exit_code == 2 and "aws:kms" in run.stderr


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_an_s3_store_writes_with_sse_and_its_safety_copy_is_encrypted(
    cli: CliFn, store: StoreHandle, s3: S3, tmp_path: Path, base_dir: Path
) -> None:
    config = base_dir / "triggerfish.yaml"
    identity = tmp_path / "k"
    public = _keygen(cli, identity)
    config.write_text(
        config.read_text() + '  sse: "AES256"\n' + f"backup:\n  recipients: [{public}]\n"
    )
    assert cli(*store.args, "config", "validate").exit_code == 0
    run = cli(*store.args, "kv", "set", "sessions:one", "1")
    assert run.exit_code == 0, run.stderr
    provider: Any = store.open()
    client = provider.client
    head = client.head_object(
        Bucket=provider.bucket, Key=provider.prefix + provider.codec.name("sessions:one")
    )
    assert head["ServerSideEncryption"] == "AES256"
    provider.close()

    run = cli(*store.args, "backup", "create", "--to", str(tmp_path / "b"), "-f", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict) and document["name"].endswith(".jsonl.zst.age")
    archive = tmp_path / "b" / document["name"]
    run = cli(*store.args, "kv", "set", "sessions:two", "2")
    assert run.exit_code == 0
    run = cli(
        *store.args, "backup", "restore", str(archive), "--replace", "--yes", "-i",
        str(identity), "-f", "json",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    restored = run.json()
    assert isinstance(restored, dict)
    kept = Path(restored["kept"])
    assert kept.name.endswith(".age")  # the pre-restore copy is encrypted to the same keys
    assert b"sessions:two" not in kept.read_bytes()
    run = cli("backup", "verify", str(kept), "-i", str(identity))
    assert run.exit_code == 0, run.stderr


def test_an_encrypted_logical_backup_of_every_backend_restores(
    cli: CliFn, store: StoreHandle, tmp_path: Path
) -> None:
    identity = tmp_path / "k"
    public = _keygen(cli, identity)
    rows = {"sessions:a": "1", "memory:agent:PUBLIC:x": json.dumps({"v": 1}), "plain": "2"}
    store.seed(rows)
    run = cli(
        *store.args, "backup", "create", "--logical", "-r", public, "--to",
        str(tmp_path / "b"), "-f", "json",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    archive = tmp_path / "b" / document["name"]
    assert archive.name.endswith(".jsonl.zst.age") and b"sessions:" not in archive.read_bytes()
    provider: Any = store.open()
    provider.clear()
    provider.close()
    run = cli(*store.args, "backup", "restore", str(archive), "--yes")
    assert run.exit_code == 2 and not store.contents()
    run = cli(*store.args, "backup", "restore", str(archive), "-i", str(identity), "--yes")
    assert run.exit_code == 0, run.stderr
    restored = {k: v for k, v in store.contents().items() if ":admin_backup_" not in k}
    assert restored == rows


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_backup_into_s3_takes_the_s3_store_s_own_sse(
    cli: CliFn, store: StoreHandle, s3: S3, base_dir: Path
) -> None:
    """No --sse and no backup: sse: the storage: section's, when the store is in S3."""
    key_id = "arn:aws:kms:us-east-1:123456789012:key/feedbeef-12ab-34cd-56ef-1234567890ab"
    config = base_dir / "triggerfish.yaml"
    config.write_text(config.read_text() + f"  sse: aws:kms\n  sse_kms_key_id: {key_id}\n")
    store.seed({"sessions:a": "1"})
    bucket = s3.new_bucket()
    run = cli(
        *store.args, "backup", "create", "--to", f"s3://{bucket}/b/", "--endpoint-url",
        s3.endpoint_url, "-f", "json",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    head: Any = s3.client().head_object(Bucket=bucket, Key=f"b/{document['name']}")  # type: ignore[attr-defined]
    assert head["ServerSideEncryption"] == "aws:kms"
    assert head["SSEKMSKeyId"].endswith("feedbeef-12ab-34cd-56ef-1234567890ab")
