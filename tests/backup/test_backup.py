"""`backup` on the gateway's SQLite store: archives, manifests, verify, restore, undo, prune."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import GATEWAY_ROWS, dump_tables
from triggerfish_cli.backup.archive import (
    MAGIC,
    TRAILER,
    ZSTD_SKIPPABLE,
    is_archive_name,
    read_manifest,
)
from triggerfish_cli.cli import output


def create(cli: CliFn, *args: str) -> Path:
    run = cli("backup", "create", "--format", "json", *args)
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    return Path(document["destination"]) / document["name"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def kv_rows(db: Path) -> dict[str, str]:
    """The kv rows, without the audit records of our restores."""
    conn = sqlite3.connect(db)
    try:
        return without_audit(dict(conn.execute("SELECT key, value FROM kv")))
    finally:
        conn.close()


def without_audit(rows: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in rows.items() if ":admin_backup_" not in key}


def test_create_writes_one_private_archive_with_its_manifest(
    cli: CliFn, gateway_db: Path, base_dir: Path
) -> None:
    run = cli("backup", "create", "--label", "nightly", "--format", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    archive = base_dir / "backups" / "store" / document["name"]
    assert is_archive_name(archive.name) and archive.name.endswith(".db.zst")
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert sorted(p.name for p in archive.parent.iterdir()) == [archive.name]  # no temp left
    manifest = document["manifest"]
    assert manifest == read_manifest(archive).as_dict()
    assert manifest["kind"] == "physical" and manifest["label"] == "nightly"
    assert manifest["backend"] == "sqlite" and manifest["source"] == f"sqlite:{gateway_db}"
    assert manifest["sqlite_version"] == sqlite3.sqlite_version
    assert manifest["created"].endswith("Z") and manifest["page_count"] > 0
    assert manifest["keys"] == len(GATEWAY_ROWS)
    assert manifest["namespaces"]["sessions:"] == sum(
        1 for key in GATEWAY_ROWS if key.startswith("sessions:")
    )
    assert sum(manifest["namespaces"].values()) == len(GATEWAY_ROWS)
    memories = [key for key in GATEWAY_ROWS if key.startswith("memory:")]
    assert sum(manifest["memories"].values()) == len(memories)
    # the payload is a standard zstd stream: plain zstd decompresses the archive as it is
    import zstandard

    data = archive.read_bytes()
    payload = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    assert payload.startswith(b"SQLite format 3\x00")
    assert (
        hashlib.sha256(data[: manifest["payload_bytes"]]).hexdigest()
        == (manifest["payload_sha256"])
    )


@pytest.mark.parametrize("compression", ["zstd", "gzip", "none"])
@pytest.mark.parametrize("logical", [False, True])
def test_every_kind_and_compression_verifies_and_restores(
    cli: CliFn, gateway_db: Path, tmp_path: Path, compression: str, logical: bool
) -> None:
    archive = create(cli, "-c", compression, *(["--logical"] if logical else []))
    assert archive.name.endswith(
        (".jsonl" if logical else ".db") + {"zstd": ".zst", "gzip": ".gz", "none": ""}[compression]
    )
    run = cli("backup", "verify", str(archive))
    assert run.exit_code == 0, run.stderr
    assert "sha256" in run.stdout
    target = tmp_path / "restored.db"
    run = cli("backup", "restore", str(archive), "--to", str(target), "--yes")
    assert run.exit_code == 0, run.stderr
    assert kv_rows(target) == GATEWAY_ROWS
    if not logical:  # the whole file: the memory index too
        restored, original = dump_tables(target), dump_tables(gateway_db)
        for tables in (restored, original):  # the audit records of this backup and restore
            tables["kv"] = [row for row in tables["kv"] if ":admin_backup_" not in str(row[0])]
        assert restored == original


def test_list_shows_time_size_label_and_verified_state(cli: CliFn, gateway_db: Path) -> None:
    first = create(cli, "--label", "one")
    create(cli, "--logical")
    assert cli("backup", "verify", str(first)).exit_code == 0
    rows = cli("backup", "list", "--format", "json").json()
    assert isinstance(rows, list) and len(rows) == 2
    assert [row["label"] for row in rows] == ["one", None]
    assert [row["verified"] for row in rows] == ["yes", "no"]
    assert [row["kind"] for row in rows] == ["physical", "logical"]
    assert all(row["size"] > 0 and row["created"].endswith("Z") for row in rows)
    table = cli("backup", "list")
    assert "one" in table.stdout and "yes" in table.stdout


def test_verify_latest_and_all(cli: CliFn, gateway_db: Path) -> None:
    assert cli("backup", "verify", "--latest").exit_code == 3  # no backups yet
    create(cli)
    create(cli, "--logical")
    run = cli("backup", "verify", "--all", "--format", "json")
    assert run.exit_code == 0, run.stderr
    results = run.json()
    assert isinstance(results, list) and [r["ok"] for r in results] == [True, True]
    assert cli("backup", "verify", "--latest").exit_code == 0
    assert cli("backup", "verify").exit_code == 2


# -- damaged archives ---------------------------------------------------------------------


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _rewrite_manifest(path: Path, change: dict[str, object]) -> None:
    data = path.read_bytes()
    length, magic = TRAILER.unpack(data[-TRAILER.size :])
    assert magic == MAGIC
    body = json.loads(data[-TRAILER.size - length : -TRAILER.size])
    body.update(change)
    new = json.dumps(body).encode()
    head = data[: -TRAILER.size - length - ZSTD_SKIPPABLE.size]
    framing = ZSTD_SKIPPABLE.pack(0x184D2A5E, len(new) + TRAILER.size)
    path.write_bytes(head + framing + new + TRAILER.pack(len(new), MAGIC))


def _damage(kind: str, archive: Path) -> Path:
    if kind == "flipped byte":
        _flip(archive, read_manifest(archive).payload_bytes // 2)
    elif kind == "truncated":
        archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    elif kind == "wrong counts":
        manifest = read_manifest(archive)
        namespaces = dict(manifest.namespaces)
        namespaces["sessions:"] += 1
        _rewrite_manifest(archive, {"namespaces": namespaces, "keys": manifest.keys + 1})
    elif kind == "wrong checksum":
        _rewrite_manifest(archive, {"payload_sha256": "0" * 64})
    elif kind == "manifest not json":
        _flip(archive, archive.stat().st_size - TRAILER.size - 3)
    elif kind == "not a backup":
        archive.write_bytes(os.urandom(50_000))
    elif kind == "a plain database":
        archive.write_bytes(Path(str(archive) + ".src").read_bytes())
    elif kind == "missing":
        archive.unlink()
    return archive


DAMAGES = {
    "flipped byte": 5,
    "truncated": 8,
    "wrong counts": 5,
    "wrong checksum": 5,
    "manifest not json": 8,
    "not a backup": 8,
    "missing": 3,
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_archive_is_detected_and_never_restored(
    cli: CliFn, gateway_db: Path, damage: str
) -> None:
    archive = _damage(damage, create(cli))
    before = digest(gateway_db)
    run = cli("backup", "verify", str(archive))
    assert run.exit_code == DAMAGES[damage], run.stderr
    assert run.stderr.startswith("error:") and len(run.stderr.strip().splitlines()) == 1
    if damage not in ("missing", "not a backup", "truncated", "manifest not json"):
        assert "verification failed" in run.stderr
    run = cli("backup", "restore", str(archive), "--yes")
    assert run.exit_code == DAMAGES[damage], run.stderr
    assert digest(gateway_db) == before
    leftovers = [p.name for p in gateway_db.parent.iterdir() if p.name != gateway_db.name]
    assert not [name for name in leftovers if "pre-restore" in name or name.endswith(".tmp")]


def test_a_damaged_logical_archive_is_never_loaded(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    archive = create(cli, "--logical", "-c", "none")
    _flip(archive, 40)  # inside the first line
    target = tmp_path / "fresh.db"
    run = cli("backup", "restore", str(archive), "--to", str(target), "--yes")
    assert run.exit_code == 5
    assert not target.exists() or kv_rows(target) == {}


def test_verify_records_a_failure_for_list(cli: CliFn, gateway_db: Path) -> None:
    archive = _damage("flipped byte", create(cli))
    assert cli("backup", "verify", "--all").exit_code == 5
    rows = cli("backup", "list", "--format", "json").json()
    assert isinstance(rows, list) and rows[0]["verified"] == "FAILED"
    assert archive.exists()


def test_a_backup_of_a_store_whose_key_index_is_damaged_fails_verification(
    cli: CliFn, gateway_db: Path
) -> None:
    """The archive is intact (its sha256 matches): the SQLite check inside it finds the damage."""
    conn = sqlite3.connect(gateway_db)
    (key,) = conn.execute("SELECT key FROM kv ORDER BY key LIMIT 1 OFFSET 3").fetchone()
    (page,) = conn.execute(
        "SELECT pageno FROM dbstat WHERE name = 'sqlite_autoindex_kv_1' AND pagetype = 'leaf'"
    ).fetchone()
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(gateway_db.read_bytes())
    at = data.find(key.encode(), (page - 1) * page_size, page * page_size)
    assert at > 0
    data[at + len(key) - 1] ^= 0x01  # the entry now names a key its row does not hold
    gateway_db.write_bytes(bytes(data))
    archive = create(cli)
    run = cli("backup", "verify", str(archive))
    assert run.exit_code == 5
    assert "integrity check:" in run.stdout + run.stderr
    assert "sha256" in run.stdout  # the bytes were what create wrote
    rows = cli("backup", "list", "--format", "json").json()
    assert isinstance(rows, list) and rows[0]["verified"] == "FAILED"


# -- restore ----------------------------------------------------------------------------


def test_restore_keeps_the_old_store_and_undo_puts_it_back(cli: CliFn, gateway_db: Path) -> None:
    archive = create(cli)
    conn = sqlite3.connect(gateway_db)
    conn.execute("INSERT INTO kv VALUES ('sessions:after-backup', '{}')")
    conn.commit()
    conn.close()
    changed = kv_rows(gateway_db)

    run = cli("backup", "restore", str(archive), "--dry-run")
    assert run.exit_code == 0 and "would restore" in run.stdout
    assert kv_rows(gateway_db) == changed
    assert cli("backup", "restore", str(archive)).exit_code == 4  # no TTY, no --yes
    assert kv_rows(gateway_db) == changed

    run = cli("backup", "restore", str(archive), "--yes", "--format", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    assert kv_rows(gateway_db) == GATEWAY_ROWS
    kept = Path(document["kept"])
    assert kept.name.startswith("triggerfish.db.pre-restore-") and kv_rows(kept) == changed
    conn = sqlite3.connect(gateway_db)
    audits = [
        json.loads(value)
        for key, value in conn.execute("SELECT key, value FROM kv WHERE key LIKE 'audit:%'")
        if key.endswith(":admin_backup_restore")
    ]
    conn.close()
    assert len(audits) == 1 and audits[0]["target"] == archive.name
    assert audits[0]["kept"] == document["kept"] and audits[0]["counts"]["keys"] > 0
    rows = sqlite3.connect(gateway_db).execute("PRAGMA integrity_check").fetchall()
    assert rows == [("ok",)]
    assert sqlite3.connect(gateway_db).execute("PRAGMA journal_mode").fetchone() == ("wal",)

    assert cli("backup", "restore", "--undo", "--dry-run").exit_code == 0
    assert kv_rows(gateway_db) == GATEWAY_ROWS
    run = cli("backup", "restore", "--undo", "--yes")
    assert run.exit_code == 0, run.stderr
    assert kv_rows(gateway_db) == changed
    assert not kept.exists()
    assert cli("backup", "restore", "--undo", "--yes").exit_code == 3  # nothing left to undo


def test_restore_asks_on_a_tty(
    cli: CliFn, gateway_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = create(cli)
    monkeypatch.setattr(output.Output, "stdin_is_tty", property(lambda self: True))
    before = digest(gateway_db)
    run = cli("backup", "restore", str(archive), input="n\n")
    assert run.exit_code == 4 and digest(gateway_db) == before
    run = cli("backup", "restore", str(archive), input="y\n")
    assert run.exit_code == 0, run.stderr


HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("SELECT count(*) FROM kv").fetchone()
print("open", flush=True)
sys.stdin.read()
"""


def test_restore_refuses_while_another_process_has_the_store_open(
    cli: CliFn, gateway_db: Path
) -> None:
    archive = create(cli)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(gateway_db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"open\n"
        before = digest(gateway_db)
        run = cli("backup", "restore", str(archive), "--yes")
        assert run.exit_code == 6, run.stderr
        assert str(holder.pid) in run.stderr and "--force" in run.stderr
        assert digest(gateway_db) == before
        assert cli("backup", "restore", "--undo", "--yes").exit_code == 3
        run = cli("backup", "restore", str(archive), "--yes", "--force")
        assert run.exit_code == 0, run.stderr
    finally:
        holder.communicate(b"", timeout=30)


WAL_WRITER = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("INSERT INTO kv VALUES ('sessions:only-in-the-wal', '{}')")
os._exit(0)  # no close: the committed row stays in the WAL only
"""


def test_committed_rows_still_in_the_wal_are_kept_by_the_restore(
    cli: CliFn, gateway_db: Path
) -> None:
    archive = create(cli)
    subprocess.run([sys.executable, "-c", WAL_WRITER, str(gateway_db)], check=True)
    wal = Path(str(gateway_db) + "-wal")
    assert wal.exists() and wal.stat().st_size > 0
    run = cli("backup", "restore", str(archive), "--yes", "--format", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    assert "sessions:only-in-the-wal" in kv_rows(Path(document["kept"]))
    assert "sessions:only-in-the-wal" not in kv_rows(gateway_db)


def test_restore_into_a_missing_store_creates_it(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    archive = create(cli)
    target = tmp_path / "new" / "triggerfish.db"
    run = cli("backup", "restore", str(archive), "--to", str(target), "--yes")
    assert run.exit_code == 0, run.stderr
    assert kv_rows(target) == GATEWAY_ROWS
    assert not list(target.parent.glob("*pre-restore*"))


def test_restore_by_name_from_a_directory(cli: CliFn, gateway_db: Path, tmp_path: Path) -> None:
    archive = create(cli, "--to", str(tmp_path / "elsewhere"))
    target = tmp_path / "t.db"
    run = cli(
        "backup",
        "restore",
        archive.name,
        "--from",
        str(archive.parent),
        "--to",
        str(target),
        "--yes",
    )
    assert run.exit_code == 0, run.stderr
    assert (
        cli("backup", "restore", "nope.db.zst", "--from", str(archive.parent), "--yes").exit_code
        == 3
    )


# -- prune -------------------------------------------------------------------------------


def test_prune_refuses_an_empty_policy_and_needs_yes(cli: CliFn, gateway_db: Path) -> None:
    for _ in range(3):
        create(cli)
    assert cli("backup", "prune").exit_code == 2
    assert cli("backup", "prune", "--keep-last", "1").exit_code == 4
    run = cli("backup", "prune", "--keep-last", "1", "--dry-run", "--format", "json")
    assert run.exit_code == 0
    plan = run.json()
    assert isinstance(plan, dict) and plan["delete"] == 2 and plan["dry_run"] is True
    assert len(cli("backup", "list", "--format", "json").json()) == 3  # type: ignore[arg-type]


def test_prune_never_deletes_the_newest_verified_backup(cli: CliFn, gateway_db: Path) -> None:
    oldest = create(cli)
    assert cli("backup", "verify", str(oldest)).exit_code == 0
    create(cli)
    newest = create(cli)
    run = cli("backup", "prune", "--keep-last", "1", "--yes", "--format", "json")
    assert run.exit_code == 0, run.stderr
    plan = run.json()
    assert isinstance(plan, dict)
    reasons = {row["name"]: row["reasons"] for row in plan["backups"]}
    assert reasons[oldest.name] == ["newest verified"]
    assert reasons[newest.name] == ["last 1"]
    left = sorted(p.name for p in newest.parent.iterdir())
    assert left == sorted([oldest.name, oldest.name + ".verified", newest.name])


def test_prune_leaves_files_it_cannot_read(cli: CliFn, gateway_db: Path) -> None:
    create(cli)
    keep = create(cli)
    stranger = keep.parent / "triggerfish-2020-01-01T00-00-00.000Z.db.zst"
    stranger.write_bytes(b"not mine")
    run = cli("backup", "prune", "--keep-last", "1", "--yes")
    assert run.exit_code == 0, run.stderr
    assert stranger.exists() and keep.exists()
    assert len(list(keep.parent.iterdir())) == 2


def test_restore_over_a_damaged_store(cli: CliFn, gateway_db: Path) -> None:
    archive = create(cli)
    junk = b"SQLite format 3\x00" + os.urandom(8192)
    gateway_db.write_bytes(junk)
    run = cli("backup", "restore", str(archive), "--yes", "-f", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    assert kv_rows(gateway_db) == GATEWAY_ROWS
    assert Path(document["kept"]).read_bytes() == junk


def test_an_empty_store_backs_up_and_restores(cli: CliFn, tmp_path: Path) -> None:
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    for args in ([], ["--logical"], ["--logical", "-c", "gzip"], ["--logical", "-c", "none"]):
        empty = tmp_path / f"empty{len(args)}{args[-1] if args else ''}.db"
        SqliteStorage(empty, create=True).close()  # a backup leaves its audit record: a new one
        run = cli("--db", str(empty), "backup", "create", "-f", "json", *args)
        assert run.exit_code == 0, run.stderr
        document = run.json()
        assert isinstance(document, dict) and document["manifest"]["keys"] == 0
        archive = Path(document["destination"]) / document["name"]
        assert cli("backup", "verify", str(archive)).exit_code == 0
        target = tmp_path / f"t{len(args)}{args[-1] if args else ''}.db"
        run = cli("backup", "restore", str(archive), "--to", str(target), "--yes")
        assert run.exit_code == 0, run.stderr
        assert kv_rows(target) == {}


def test_restore_through_a_symlink_swaps_the_real_file(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    archive = create(cli)
    link = tmp_path / "link.db"
    link.symlink_to(gateway_db)
    conn = sqlite3.connect(gateway_db)
    conn.execute("DELETE FROM kv WHERE key LIKE 'sessions:%'")
    conn.commit()
    conn.close()
    run = cli("--db", str(link), "backup", "restore", str(archive), "--yes")
    assert run.exit_code == 0, run.stderr
    assert link.is_symlink() and kv_rows(gateway_db) == GATEWAY_ROWS
    assert list(gateway_db.parent.glob("triggerfish.db.pre-restore-*"))


def test_a_backup_changed_after_its_verification_is_no_longer_verified(
    cli: CliFn, gateway_db: Path
) -> None:
    archive = create(cli)
    assert cli("backup", "verify", str(archive)).exit_code == 0
    archive.write_bytes(archive.read_bytes()[:100] + archive.read_bytes())  # grew at the front
    rows = cli("backup", "list", "--format", "json").json()
    assert isinstance(rows, list) and rows[0]["verified"] == "no"


def test_the_restore_target_is_the_local_file_of_to_or_of_the_store(tmp_path: Path) -> None:
    from triggerfish_cli.backup.restore import restore_target
    from triggerfish_cli.errors import UsageError
    from triggerfish_cli.settings import StorageConfig

    real = tmp_path / "real.db"
    real.touch()
    (tmp_path / "link.db").symlink_to(real)

    def unused() -> StorageConfig:
        raise AssertionError("--to given: the store of the command is not resolved")

    assert restore_target(str(tmp_path / "link.db"), unused) == real
    assert restore_target(None, lambda: StorageConfig("sqlite", path=tmp_path / "link.db")) == real
    assert restore_target(None, lambda: StorageConfig("postgres", options={"dsn": ""})) is None
    for spec in ("postgresql://tf@localhost/x", "s3://bucket/prefix"):
        with pytest.raises(UsageError, match="takes a SQLite file"):
            restore_target(spec, unused)
    with pytest.raises(UsageError, match="bare word"):
        restore_target("memory", unused)
