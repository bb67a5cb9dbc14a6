"""Encrypted backups (age): round trips, keyless checks, every failure, the policy."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import GATEWAY_ROWS
from triggerfish_cli.backup.archive import read_manifest


def without_audit(rows: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in rows.items() if ":admin_backup_" not in key}


def kv_rows(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        return without_audit(dict(conn.execute("SELECT key, value FROM kv")))
    finally:
        conn.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def keygen(cli: CliFn, path: Path) -> str:
    run = cli("backup", "keygen", "-o", str(path))
    assert run.exit_code == 0, run.stderr
    return run.stdout.strip()


def ssh_keypair(directory: Path, name: str = "id_ed25519") -> tuple[Path, str]:
    """An unencrypted OpenSSH ed25519 key and its public line (no ssh-keygen needed)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    path = directory / name
    path.write_bytes(private)
    path.chmod(0o600)
    return path, public.decode() + " ops@backup-host"


def create(cli: CliFn, *args: str) -> tuple[Path, dict[str, Any]]:
    run = cli("backup", "create", "--format", "json", *args)
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    return Path(document["destination"]) / document["name"], document["manifest"]


@pytest.fixture
def age_key(cli: CliFn, tmp_path: Path) -> tuple[Path, str]:
    identity = tmp_path / "keys" / "backup.key"
    identity.parent.mkdir()
    return identity, keygen(cli, identity)


def test_keygen_writes_a_private_identity_and_never_overwrites_it(
    cli: CliFn, tmp_path: Path
) -> None:
    path = tmp_path / "id.txt"
    public = keygen(cli, path)
    assert public.startswith("age1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert f"# public key: {public}" in text and "AGE-SECRET-KEY-1" in text
    before = path.read_bytes()
    run = cli("backup", "keygen", "-o", str(path))
    assert run.exit_code == 4 and "never overwritten" in run.stderr
    assert path.read_bytes() == before


def test_encrypted_physical_backup_round_trip_and_what_stays_outside(
    cli: CliFn, gateway_db: Path, tmp_path: Path, age_key: tuple[Path, str]
) -> None:
    identity, public = age_key
    out = tmp_path / "b"
    archive, manifest = create(cli, "-r", public, "--to", str(out), "--label", "nightly-label")
    assert archive.name.endswith(".db.zst.age")
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert manifest["encrypted"] is True and manifest["keys"] == len(GATEWAY_ROWS)

    # outside: format, time, store id, the operator's label (for `backup list`), sizes,
    # sha256, recipients' fingerprints; nothing else
    outer = read_manifest(archive)
    assert outer.sealed and outer.encrypted
    document = outer.as_dict()
    assert set(document) == {
        "format",
        "format_version",
        "tool_version",
        "encrypted",
        "kind",
        "created",
        "store_id",
        "label",
        "compression",
        "recipients",
        "payload_bytes",
        "payload_sha256",
        "manifest_bytes",
        "manifest_sha256",
    }
    assert document["recipients"] == [manifest["recipients"][0]]
    assert document["label"] == "nightly-label"
    assert public not in archive.read_bytes().decode("latin-1")
    raw = archive.read_bytes()
    names = [name for name in manifest["namespaces"] if len(name) >= 5]  # none by chance
    assert len(names) >= 3
    for namespace in names:
        assert namespace.encode() not in raw, namespace
    for level in manifest["memories"]:
        assert f'"{level}"'.encode() not in raw
    for secret in (str(gateway_db).encode(), b'"keys"', b"namespaces"):
        assert secret not in raw
    sha = hashlib.sha256(raw[: outer.payload_bytes]).hexdigest()
    assert sha == outer.payload_sha256

    # list, with no key: encrypted, its keys unknown
    run = cli("backup", "list", "--from", str(out), "--format", "json")
    assert run.exit_code == 0, run.stderr
    (entry,) = run.json()  # type: ignore[misc]
    assert entry["encrypted"] is True and entry["keys"] is None and entry["source"] is None
    run = cli("backup", "list", "--from", str(out))
    assert run.exit_code == 0 and "physical, age" in run.stdout

    # a keyless verify checks what it can, says so in one line, records it as keyless
    run = cli("backup", "verify", str(archive))
    assert run.exit_code == 0, run.stderr
    assert "contents not checked" in run.stdout
    assert [line for line in run.stdout.splitlines() if "contents not checked" in line]
    keyless = json.loads((out / f"{archive.name}.verified").read_text())
    assert keyless["ok"] and keyless["contents_checked"] is False
    run = cli("backup", "list", "--from", str(out), "--format", "json")
    assert run.json()[0]["verified"] == "keyless"  # type: ignore[index]

    # with the identity: every check
    run = cli("backup", "verify", str(archive), "--identity", str(identity))
    assert run.exit_code == 0, run.stderr
    assert "SQLite integrity check: ok" in run.stdout and "contents not checked" not in run.stdout
    marker = json.loads((out / f"{archive.name}.verified").read_text())
    assert marker["ok"] and marker["sha256"] == outer.payload_sha256
    assert marker["contents_checked"] is True
    run = cli("backup", "list", "--from", str(out), "--format", "json")
    assert run.json()[0]["verified"] == "yes"  # type: ignore[index]

    # restore over the store: the same rows
    expected = kv_rows(gateway_db)
    conn = sqlite3.connect(gateway_db)
    with conn:
        conn.execute("DELETE FROM kv WHERE key LIKE 'sessions:%'")
    conn.close()
    run = cli("backup", "restore", str(archive), "--identity", str(identity), "--yes")
    assert run.exit_code == 0, run.stderr
    assert kv_rows(gateway_db) == expected


def test_encrypted_logical_backup_restores_into_a_fresh_store(
    cli: CliFn, gateway_db: Path, tmp_path: Path, age_key: tuple[Path, str]
) -> None:
    identity, public = age_key
    archive, manifest = create(cli, "--logical", "-r", public, "--to", str(tmp_path / "b"))
    assert archive.name.endswith(".jsonl.zst.age")
    raw = archive.read_bytes()
    for namespace in [name for name in manifest["namespaces"] if len(name) >= 5]:
        assert namespace.encode() not in raw
    target = tmp_path / "fresh.db"
    run = cli("backup", "restore", str(archive), "--to", str(target), "--identity", str(identity))
    assert run.exit_code == 0, run.stderr
    assert kv_rows(target) == kv_rows(gateway_db)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_every_compression_encrypts_and_restores(
    cli: CliFn, gateway_db: Path, tmp_path: Path, age_key: tuple[Path, str], compression: str
) -> None:
    identity, public = age_key
    archive, _ = create(cli, "-c", compression, "-r", public, "--to", str(tmp_path / "b"))
    assert archive.name.endswith(".age") and read_manifest(archive).sealed
    target = tmp_path / "copy.db"
    run = cli("backup", "restore", str(archive), "--to", str(target), "-i", str(identity))
    assert run.exit_code == 0, run.stderr
    assert kv_rows(target) == kv_rows(gateway_db)


def test_an_ssh_recipient_and_each_of_several_recipients_can_decrypt(
    cli: CliFn, gateway_db: Path, tmp_path: Path, age_key: tuple[Path, str]
) -> None:
    identity, public = age_key
    ssh_key, ssh_public = ssh_keypair(tmp_path)
    other = tmp_path / "other.key"
    other_public = keygen(cli, other)
    listed = tmp_path / "recipients.txt"
    listed.write_text(f"# the ops team\n{ssh_public}\n\n{other_public}\n")
    archive, manifest = create(cli, "-r", public, "-R", str(listed), "--to", str(tmp_path / "b"))
    assert len(manifest["recipients"]) == 3
    assert any(name.startswith("SHA256:") for name in manifest["recipients"])  # the SSH key
    assert b"ops@backup-host" not in archive.read_bytes()
    for key in (identity, ssh_key, other):
        run = cli("backup", "verify", str(archive), "--identity", str(key))
        assert run.exit_code == 0, (key, run.stderr)
        assert "contents not checked" not in run.stdout
    # an SSH key alone, restored from the environment variable naming the file
    only_ssh, _ = create(cli, "-r", ssh_public, "--to", str(tmp_path / "c"))
    target = tmp_path / "copy.db"
    run = cli(
        "backup",
        "restore",
        str(only_ssh),
        "--to",
        str(target),
        env={"TRIGGERFISH_BACKUP_IDENTITY_FILE": str(ssh_key)},
    )
    assert run.exit_code == 0, run.stderr
    assert kv_rows(target) == kv_rows(gateway_db)


def test_bad_recipients_are_usage_errors_and_write_nothing(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "b"
    for bad in ("age1notakey", "ssh-dss AAAAB3NzaC1kc3M=", "hunter2"):
        run = cli("backup", "create", "-r", bad, "--to", str(out))
        assert run.exit_code == 2, (bad, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1
    run = cli("backup", "create", "-R", str(tmp_path / "missing.txt"), "--to", str(out))
    assert run.exit_code == 3
    assert not out.exists() or not list(out.iterdir())


@pytest.fixture
def encrypted(
    cli: CliFn, gateway_db: Path, tmp_path: Path, age_key: tuple[Path, str]
) -> tuple[Path, Path]:
    identity, public = age_key
    archive, _ = create(cli, "-r", public, "--to", str(tmp_path / "b"))
    return archive, identity


def _store_untouched(gateway_db: Path, before: str) -> None:
    assert digest(gateway_db) == before
    assert not list(gateway_db.parent.glob("*.pre-restore-*"))


@pytest.mark.parametrize("kind", ["physical", "logical"])
def test_missing_and_wrong_identities_restore_nothing(
    cli: CliFn, gateway_db: Path, tmp_path: Path, age_key: tuple[Path, str], kind: str
) -> None:
    identity, public = age_key
    extra = ["--logical"] if kind == "logical" else []
    archive, _ = create(cli, *extra, "-r", public, "--to", str(tmp_path / "b"))
    wrong = tmp_path / "wrong.key"
    keygen(cli, wrong)
    before = digest(gateway_db)
    options = ["--replace"] if kind == "logical" else []

    run = cli("backup", "restore", str(archive), *options, "--yes")
    assert run.exit_code == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "--identity" in run.stderr
    _store_untouched(gateway_db, before)

    run = cli("backup", "restore", str(archive), *options, "--yes", "-i", str(wrong))
    assert run.exit_code == 4, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "opens it" in run.stderr
    _store_untouched(gateway_db, before)

    run = cli("backup", "verify", str(archive), "-i", str(wrong))
    assert run.exit_code == 4 and len(run.stderr.strip().splitlines()) == 1

    run = cli("backup", "restore", str(archive), "-i", str(tmp_path / "nope.key"), "--yes")
    assert run.exit_code == 3 and "no such identity file" in run.stderr
    _store_untouched(gateway_db, before)
    assert cli("backup", "verify", str(archive), "-i", str(identity)).exit_code == 0


@pytest.mark.parametrize("where", ["payload", "sealed manifest"])
def test_a_flipped_byte_fails_and_restores_nothing(
    cli: CliFn, gateway_db: Path, encrypted: tuple[Path, Path], where: str
) -> None:
    archive, identity = encrypted
    outer = read_manifest(archive)
    data = bytearray(archive.read_bytes())
    spot = outer.payload_bytes // 2 if where == "payload" else outer.payload_bytes + 100
    data[spot] ^= 0x01
    archive.write_bytes(bytes(data))
    before = digest(gateway_db)
    for args in ((), ("-i", str(identity))):
        run = cli("backup", "verify", str(archive), *args)
        assert run.exit_code == 5, (args, run.stdout, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1 and "damaged" in run.stderr
    run = cli("backup", "restore", str(archive), "-i", str(identity), "--yes")
    assert run.exit_code == 5, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    _store_untouched(gateway_db, before)


def test_a_truncated_archive_fails_and_restores_nothing(
    cli: CliFn, gateway_db: Path, encrypted: tuple[Path, Path]
) -> None:
    archive, identity = encrypted
    whole = archive.read_bytes()
    outer = read_manifest(archive)
    before = digest(gateway_db)
    # cut at the end: no manifest there any more (exit 8, as for any archive)
    archive.write_bytes(whole[: len(whole) // 2])
    for args in ((), ("-i", str(identity))):
        run = cli("backup", "verify", str(archive), *args)
        assert run.exit_code == 8, run.stderr
    run = cli("backup", "restore", str(archive), "-i", str(identity), "--yes")
    assert run.exit_code == 8 and len(run.stderr.strip().splitlines()) == 1
    _store_untouched(gateway_db, before)
    # the encrypted stream cut short, the manifest kept: the sha256 and age both see it
    trailer = whole[outer.payload_bytes :]
    archive.write_bytes(whole[: outer.payload_bytes - 70_000] + trailer)
    run = cli("backup", "restore", str(archive), "-i", str(identity), "--yes")
    assert run.exit_code in (5, 8), run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    _store_untouched(gateway_db, before)


def test_settings_recipients_encrypt_by_default_and_require_encryption(
    cli: CliFn, gateway_db: Path, base_dir: Path, tmp_path: Path, age_key: tuple[Path, str]
) -> None:
    _, public = age_key
    config = base_dir / "triggerfish.yaml"
    config.write_text(f"backup:\n  recipients:\n    - {public}\n")
    archive, manifest = create(cli, "--to", str(tmp_path / "b"))
    assert archive.name.endswith(".age") and manifest["encrypted"] is True
    run = cli("config", "validate")
    assert run.exit_code == 0, run.stderr

    # told otherwise: a plain archive
    plain, manifest = create(cli, "--no-encrypt", "--to", str(tmp_path / "b"))
    assert not plain.name.endswith(".age") and "encrypted" not in manifest
    run = cli("backup", "create", "--no-encrypt", "-r", public, "--to", str(tmp_path / "b"))
    assert run.exit_code == 2

    # required, with no recipient configured: refused, nothing written
    config.write_text("backup:\n  require_encryption: true\n")
    out = tmp_path / "c"
    run = cli("backup", "create", "--to", str(out))
    assert run.exit_code == 4 and "require_encryption" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert not out.exists() or not list(out.iterdir())
    archive, _ = create(cli, "-r", public, "--to", str(out))
    assert archive.name.endswith(".age")

    # and old plain archives still verify and restore
    run = cli("backup", "verify", str(plain))
    assert run.exit_code == 0 and "contents not checked" not in run.stdout
    run = cli("backup", "restore", str(plain), "--yes")
    assert run.exit_code == 0, run.stderr

    config.write_text("backup:\n  recipients:\n    - age1bogus\n")
    assert cli("config", "validate").exit_code == 8
    config.write_text("backup:\n  sse: rot13\n")
    assert cli("config", "validate").exit_code == 8


def test_create_verify_of_an_encrypted_backup(
    cli: CliFn, gateway_db: Path, tmp_path: Path, age_key: tuple[Path, str]
) -> None:
    identity, public = age_key
    out = tmp_path / "b"
    run = cli("backup", "create", "-r", public, "--to", str(out), "--verify")
    assert run.exit_code == 0, run.stderr
    assert "contents not checked" in run.stdout
    run = cli("backup", "create", "-r", public, "--to", str(out), "--verify", "-i", str(identity))
    assert run.exit_code == 0, run.stderr
    assert "contents not checked" not in run.stdout and ", verified" in run.stdout


def test_prune_and_list_need_no_key(
    cli: CliFn, gateway_db: Path, tmp_path: Path, age_key: tuple[Path, str]
) -> None:
    _, public = age_key
    out = tmp_path / "b"
    for _ in range(3):
        create(cli, "-r", public, "--to", str(out))
    run = cli("backup", "prune", "--from", str(out), "--keep-last", "1", "--yes")
    assert run.exit_code == 0, run.stderr
    assert len([p for p in out.iterdir() if p.name.endswith(".age")]) == 1


def test_the_age_stream_stops_when_the_payload_fails_part_way() -> None:
    """A failure while compressing (disk full, a damaged snapshot) must not leave the
    age thread waiting for input: abort returns, with age idle or busy."""
    import io

    import pyrage

    from triggerfish_cli.backup.crypt import Encryptor, parse_recipient

    identity = pyrage.x25519.Identity.generate()
    recipient = parse_recipient(str(identity.to_public()), "test")
    idle = Encryptor(io.BytesIO(), [recipient])
    idle.write(b"x" * 1000)
    idle.abort()
    busy = Encryptor(io.BytesIO(), [recipient])
    for _ in range(3):
        busy.write(b"y" * (4 << 20))
    busy.abort()
    out = io.BytesIO()
    whole = Encryptor(out, [recipient])
    whole.write(memoryview(b"payload"))
    whole.close()
    assert pyrage.decrypt(out.getvalue(), [identity]) == b"payload"


def test_the_decrypted_stream_is_whole_in_any_read_sizes_and_stops_at_damage() -> None:
    """The plaintext age hands over in blocks (DELIVER_SIZE) reads back byte for byte
    in reads of any size, across block edges; a flipped byte far into the stream is
    met as an error after the authenticated bytes before it, never as wrong bytes."""
    import io
    import os

    import pyrage

    from triggerfish_cli.backup.crypt import DELIVER_SIZE, Decryptor, Identities
    from triggerfish_cli.errors import VerificationError

    identity = pyrage.x25519.Identity.generate()
    keys = Identities(keys=[identity], files=["test"])
    payload = os.urandom(3 * DELIVER_SIZE + 12345)
    sealed = pyrage.encrypt(payload, [identity.to_public()])
    with Decryptor(io.BytesIO(sealed), keys, "test", []) as plain:
        got = [plain.read(size) for size in (1, 70_000, DELIVER_SIZE, 5, 2 * DELIVER_SIZE)]
        got.append(plain.read(-1))
        assert plain.read(10) == b""
    assert b"".join(got) == payload
    damaged = bytearray(sealed)
    damaged[len(sealed) - DELIVER_SIZE] ^= 0x01  # inside the last MiB of the stream
    with Decryptor(io.BytesIO(bytes(damaged)), keys, "test", []) as plain:
        before = plain.read(2 * DELIVER_SIZE)
        assert before == payload[: 2 * DELIVER_SIZE]
        with pytest.raises(VerificationError):
            plain.finish()
