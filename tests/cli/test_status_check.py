"""``status --check`` (issue 20): thresholds with the Nagios/Icinga plugin's exit codes.

Each threshold crosses from OK to WARNING to CRITICAL on a store built for
it: backups made with a clock set back (their manifests say when), sweep
audit records written in the past, a WAL grown while a reader holds it,
memory rows written to kv without their index rows, config versions
snapshotted. Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; the worst finding
wins; ``--format json`` gives the same findings and the same code.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn
from tests.helpers.gateway import memory_record
from triggerfish_cli import audit
from triggerfish_cli.serialization import to_iso
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

#: Every check off but the one a test looks at (and the destination, always checked).
ALL_OFF = (
    "backup-age",
    "full-verify-age",
    "sweep-age",
    "wal-size",
    "index-drift",
    "config-versions",
)


@pytest.fixture
def db(base_dir: Path) -> Path:
    path = base_dir / "data" / "triggerfish.db"
    SqliteStorage(path, create=True).close()
    (base_dir / "backups" / "store").mkdir(parents=True)  # the default destination
    return path


def only(check: str, limit: str) -> list[str]:
    args = ["status", "--check"]
    for name in ALL_OFF:
        args += [f"--{name}", limit if name == check else "off"]
    return args


def finding(cli: CliFn, check: str, *args: str) -> tuple[int, dict[str, Any]]:
    """Run the check as JSON; the exit code and the finding of ``check``."""
    result = cli(*args, "--format", "json")
    document: Any = result.json()
    assert document["exit_code"] == result.exit_code
    (found,) = [f for f in document["findings"] if f["check"] == check]
    return result.exit_code, found


def ago(**delta: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(**delta)


def backup_made(
    cli: CliFn, monkeypatch: pytest.MonkeyPatch, when: datetime, *, verify: bool
) -> None:
    """A backup of the store whose manifest says it was made at ``when``."""
    import triggerfish_cli.backup.create as backup_create

    with monkeypatch.context() as patch:
        patch.setattr(backup_create, "now_iso", lambda: to_iso(when))
        assert cli("backup", "create", "-q").exit_code == 0
    if verify:
        result = cli("backup", "verify", "--latest", "-q")
        assert result.exit_code == 0, result.stderr


def sweep_recorded(db: Path, when: datetime, **details: Any) -> None:
    store = SqliteStorage(db)
    try:
        audit.record(store, "retention_sweep", counts={"deleted": 1}, details=details, now=when)
    finally:
        store.close()


# -- each threshold -------------------------------------------------------------------


def test_backup_age_crosses_ok_warning_critical(
    cli: CliFn, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = only("backup-age", "26h:50h")
    code, found = finding(cli, "backup_age", *args)
    assert (code, found["state"]) == (2, "CRITICAL")  # none at all
    assert "no backup of this store" in found["message"]

    backup_made(cli, monkeypatch, ago(hours=60), verify=True)
    code, found = finding(cli, "backup_age", *args)
    assert (code, found["state"]) == (2, "CRITICAL")
    assert 60 * 3600 <= found["value"] < 61 * 3600
    assert (found["warning"], found["critical"]) == (26 * 3600, 50 * 3600)

    backup_made(cli, monkeypatch, ago(hours=30), verify=True)
    code, found = finding(cli, "backup_age", *args)
    assert (code, found["state"]) == (1, "WARNING")

    backup_made(cli, monkeypatch, ago(hours=2), verify=False)  # newer, but not verified
    code, found = finding(cli, "backup_age", *args)
    assert (code, found["state"]) == (1, "WARNING") and found["value"] >= 30 * 3600

    assert cli("backup", "verify", "--latest", "-q").exit_code == 0
    code, found = finding(cli, "backup_age", *args)
    assert (code, found["state"]) == (0, "OK") and found["value"] < 3 * 3600

    result = cli(*args)  # the plugin's text
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("TRIGGERFISH OK - 2 checks OK | backup_age=")
    assert any(
        line.startswith("OK backup_age: newest verified backup 2h")
        and "(warn 26h, crit 50h)" in line
        for line in lines
    )


def test_backup_age_counts_only_this_stores_verified_backups(
    cli: CliFn, db: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = base_dir / "other.db"
    SqliteStorage(other, create=True).close()
    backup_made(cli, monkeypatch, ago(hours=60), verify=True)
    assert cli("--db", str(other), "backup", "create", "-q").exit_code == 0
    assert cli("--db", str(other), "backup", "verify", "--latest", "-q").exit_code == 0
    code, found = finding(cli, "backup_age", *only("backup-age", "26h:50h"))
    assert (code, found["state"]) == (2, "CRITICAL")  # the other store's fresh one is not ours

    backup_made(cli, monkeypatch, ago(hours=1), verify=False)
    code, found = finding(cli, "backup_age", *only("backup-age", "26h:50h"))
    assert code == 2 and found["value"] >= 60 * 3600


def test_sweep_age_crosses_ok_warning_critical(cli: CliFn, db: Path) -> None:
    args = only("sweep-age", "1d:3d")
    code, found = finding(cli, "sweep_age", *args)
    assert (code, found["state"]) == (2, "CRITICAL")
    assert found["message"].startswith("no successful sweep of this store recorded")

    sweep_recorded(db, ago(days=4))
    assert finding(cli, "sweep_age", *args)[0] == 2
    sweep_recorded(db, ago(days=2))
    code, found = finding(cli, "sweep_age", *args)
    assert (code, found["state"]) == (1, "WARNING")
    assert 2 * 86400 <= found["value"] < 2 * 86400 + 3600

    # newer sweeps that failed or were interrupted are not successes
    sweep_recorded(db, ago(hours=2), error="disk full")
    sweep_recorded(db, ago(hours=1), interrupted=True)
    assert finding(cli, "sweep_age", *args)[1]["state"] == "WARNING"

    sweep_recorded(db, ago(hours=3))
    code, found = finding(cli, "sweep_age", *args)
    assert (code, found["state"]) == (0, "OK")
    assert found["message"].startswith("last successful sweep 3h")


def test_a_real_sweep_counts(cli: CliFn, db: Path) -> None:
    assert cli("retention", "sweep", "--yes", "-q").exit_code == 0
    code, found = finding(cli, "sweep_age", *only("sweep-age", "1h:2h"))
    assert (code, found["state"]) == (0, "OK")


@contextlib.contextmanager
def wal_grown(db: Path, size: int) -> Iterator[None]:
    """Rows adding about ``size`` bytes to the WAL, which a held reader keeps from shrinking."""
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM kv").fetchone()  # a read snapshot: no checkpoint past it
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    try:
        rows = max(size // 4096, 1)  # a row of 4000 bytes fills about one page
        writer.execute("BEGIN")
        writer.executemany(
            "INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)",
            ((f"sessions:big-{n}", "x" * 4000) for n in range(rows)),
        )
        writer.execute("COMMIT")
        yield
    finally:
        writer.close()
        reader.close()


def test_wal_size_crosses_ok_warning_critical(cli: CliFn, db: Path) -> None:
    args = only("wal-size", "256KiB:2MiB")
    code, found = finding(cli, "wal_size", *args)
    assert (code, found["state"]) == (0, "OK")
    with wal_grown(db, 512 << 10):
        wal = Path(f"{db}-wal").stat().st_size
        code, found = finding(cli, "wal_size", *args)
        assert (code, found["state"]) == (1, "WARNING") and found["value"] == wal
        assert found["unit"] == "B" and found["warning"] == 256 << 10
    with wal_grown(db, 4 << 20):
        code, found = finding(cli, "wal_size", *args)
        assert (code, found["state"]) == (2, "CRITICAL") and found["value"] > 2 << 20


def test_index_drift_crosses_ok_warning_critical(cli: CliFn, db: Path) -> None:
    args = only("index-drift", "2:5")
    assert cli("memory", "save", "-t", "PUBLIC", "indexed", "saved the usual way").exit_code == 0
    assert cli("memory", "reindex", "-t", "RESTRICTED", "-q").exit_code == 0  # the index tables
    code, found = finding(cli, "index_drift", *args)
    assert (code, found["state"], found["value"]) == (0, "OK", 0)

    def unindexed(count: int) -> None:  # as a writer that skips the index would leave them
        store = SqliteStorage(db)
        try:
            for n in range(count):
                key = f"k{n}"
                store.set(
                    f"memory:main-session:PUBLIC:{key}", memory_record(key, "PUBLIC", f"c {n}")
                )
        finally:
            store.close()

    unindexed(3)
    code, found = finding(cli, "index_drift", *args)
    assert (code, found["state"], found["value"]) == (1, "WARNING", 3)
    assert "3 missing" in found["message"]
    unindexed(6)
    code, found = finding(cli, "index_drift", *args)
    assert (code, found["state"], found["value"]) == (2, "CRITICAL", 6)
    assert cli("memory", "reindex", "-t", "RESTRICTED", "-q").exit_code == 0
    assert finding(cli, "index_drift", *args)[0] == 0


def test_config_versions_cross_ok_warning_critical(cli: CliFn, db: Path, base_dir: Path) -> None:
    args = only("config-versions", "3:1")
    code, found = finding(cli, "config_versions", *args)
    assert (code, found["state"]) == (2, "CRITICAL")  # none held
    assert "no config version held" in found["message"]
    config = base_dir / "triggerfish.yaml"
    for n in range(3):
        config.write_text(f"models:\n  primary: model-{n}\n")
        assert cli("config", "snapshot", "-q").exit_code == 0
        code, found = finding(cli, "config_versions", *args)
        assert (code, found["state"], found["value"]) == (
            (1, "WARNING", 1) if n == 0 else (1, "WARNING", 2) if n == 1 else (0, "OK", 3)
        )


def test_an_unreachable_destination_is_critical(cli: CliFn, db: Path, tmp_path: Path) -> None:
    args = only("backup-age", "26h:50h")
    code, found = finding(cli, "backup_destination", *args, "--backups", str(tmp_path / "gone"))
    assert (code, found["state"]) == (2, "CRITICAL") and "does not exist" in found["message"]
    document: Any = cli(*args, "--backups", str(tmp_path / "gone"), "--format", "json").json()
    age = next(f for f in document["findings"] if f["check"] == "backup_age")
    assert age["state"] == "UNKNOWN"  # cannot be evaluated; the destination is the critical one

    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o500)
    try:
        if os.access(read_only, os.W_OK):  # root writes anywhere: take a file instead
            read_only = tmp_path / "a-file"
            read_only.write_text("")
        code, found = finding(cli, "backup_destination", *args, "--backups", str(read_only))
        assert (code, found["state"]) == (2, "CRITICAL")
    finally:
        (tmp_path / "ro").chmod(0o700)

    fine = tmp_path / "fine"
    fine.mkdir()
    code, found = finding(
        cli, "backup_destination", *only("backup-age", "off"), "--backups", str(fine)
    )
    assert (code, found["state"]) == (0, "OK")


def test_an_s3_destination_reachable_and_not(cli: CliFn, db: Path, s3: Any) -> None:
    bucket = s3.new_bucket()
    assert (
        cli(
            "backup",
            "create",
            "-q",
            "--to",
            f"s3://{bucket}/bk/",
            "--endpoint-url",
            s3.endpoint_url,
        ).exit_code
        == 0
    )
    assert (
        cli(
            "backup",
            "verify",
            "--latest",
            "-q",
            "--from",
            f"s3://{bucket}/bk/",
            "--endpoint-url",
            s3.endpoint_url,
        ).exit_code
        == 0
    )
    args = [*only("backup-age", "26h:50h"), "--backups", f"s3://{bucket}/bk/"]
    code, found = finding(cli, "backup_age", *args, "--endpoint-url", s3.endpoint_url)
    assert (code, found["state"]) == (0, "OK")
    code, found = finding(cli, "backup_destination", *args, "--endpoint-url", "http://127.0.0.1:9")
    assert (code, found["state"]) == (2, "CRITICAL") and "unreachable" in found["message"]
    missing = [*only("backup-age", "off"), "--backups", f"s3://{bucket}-gone/bk/"]
    code, found = finding(cli, "backup_destination", *missing, "--endpoint-url", s3.endpoint_url)
    assert (code, found["state"]) == (2, "CRITICAL")


# -- the whole check ------------------------------------------------------------------


def test_worst_finding_wins_and_json_matches_the_text(
    cli: CliFn, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backup_made(cli, monkeypatch, ago(hours=30), verify=True)  # WARNING
    sweep_recorded(db, ago(hours=1))  # OK
    text = cli("status", "--check", "--config-versions", "off")
    document: Any = cli("status", "--check", "--config-versions", "off", "--format", "json").json()
    assert text.exit_code == document["exit_code"] == 1 and document["state"] == "WARNING"
    lines = text.stdout.splitlines()
    assert lines[0].startswith("TRIGGERFISH WARNING - backup_age: newest verified backup 30h")
    assert lines[1:] == [f"{f['state']} {f['check']}: {f['message']}" for f in document["findings"]]
    assert [f["check"] for f in document["findings"]] == [
        "backup_destination",
        "backup_age",
        "full_verify_age",
        "sweep_age",
        "wal_size",
        "index_drift",
    ]
    assert document["store"]["location"] == str(db)

    sweep_recorded(db, ago(days=3), error="x")  # older failures change nothing
    backup_made(cli, monkeypatch, ago(days=5), verify=True)
    assert cli("status", "--check", "--config-versions", "off").exit_code == 1
    assert (
        cli("status", "--check", "--config-versions", "off", "--sweep-age", "10m:30m").exit_code
        == 2
    )


def test_defaults_check_everything(cli: CliFn, db: Path, base_dir: Path) -> None:
    """No flags: every check with its default limits (a store nobody looks after: CRITICAL)."""
    result = cli("status", "--check", "--format", "json")
    document: Any = result.json()
    assert result.exit_code == 2
    states = {f["check"]: (f["state"], f["warning"], f["critical"]) for f in document["findings"]}
    assert states == {
        "backup_destination": ("OK", None, None),
        "backup_age": ("CRITICAL", 26 * 3600, 50 * 3600),
        "full_verify_age": ("WARNING", 8 * 86400, None),
        "sweep_age": ("CRITICAL", 26 * 3600, 50 * 3600),
        "wal_size": ("OK", 64 << 20, 256 << 20),
        "index_drift": ("OK", 0, 100),
        "config_versions": ("WARNING", 1, None),
    }


def test_a_missing_store_is_unknown(cli: CliFn, base_dir: Path) -> None:
    result = cli("status", "--check")
    assert result.exit_code == 3
    (line,) = result.stdout.splitlines()[:1]
    assert line.startswith("TRIGGERFISH UNKNOWN - store: no Triggerfish store at ")
    document: Any = cli("status", "--check", "--format", "json").json()
    assert document["state"] == "UNKNOWN" and document["exit_code"] == 3
    assert cli("status", "--check", "--format", "json").exit_code == 3


def test_any_error_is_unknown_with_one_line(cli: CliFn, db: Path, base_dir: Path) -> None:
    bad = cli("status", "--check", "--backup-age", "yesterday")
    assert bad.exit_code == 3
    (line,) = bad.stdout.splitlines()
    assert line.startswith("TRIGGERFISH UNKNOWN - --backup-age: 'yesterday' is not a duration")
    document: Any = cli("status", "--check", "--backup-age", "1x", "--format", "json").json()
    assert document["state"] == "UNKNOWN" and document["exit_code"] == 3
    assert document["findings"][0]["message"].startswith("--backup-age: '1x' is not")
    assert cli("status", "--check", "--wal-size", "2MiB:1MiB").exit_code == 3  # CRIT below WARN
    (base_dir / "triggerfish.yaml").write_text("checks:\n  wal_sise: 1MiB\n")
    broken = cli("status", "--check")
    assert broken.exit_code == 3 and "checks.wal_sise: unknown setting" in broken.stdout
    (base_dir / "triggerfish.yaml").write_text("checks: [\n")
    assert cli("status", "--check").exit_code == 3
    # without --check the usual codes apply, and the limits need it
    assert cli("status", "--wal-size", "1MiB").exit_code == 2


def test_the_checks_section_is_honoured_and_flags_override_it(
    cli: CliFn, db: Path, base_dir: Path, tmp_path: Path
) -> None:
    elsewhere = base_dir / "elsewhere"
    elsewhere.mkdir()
    (base_dir / "triggerfish.yaml").write_text(
        "checks:\n"
        "  backup_age: off\n"
        "  full_verify_age: off\n"
        "  sweep_age: 'off'\n"
        "  index_drift: 5\n"
        "  config_versions: 0\n"
        "  wal_size: 1KiB:2KiB\n"
        "  backups: elsewhere\n"
    )
    assert cli("config", "validate").exit_code == 0
    with wal_grown(db, 64 << 10):
        document: Any = cli("status", "--check", "--format", "json").json()
        checks = {f["check"]: f for f in document["findings"]}
        assert set(checks) == {"backup_destination", "wal_size", "index_drift", "config_versions"}
        assert str(elsewhere) in checks["backup_destination"]["message"]
        assert checks["wal_size"]["state"] == "CRITICAL" and document["exit_code"] == 2
        assert checks["index_drift"]["warning"] == 5
        overridden: Any = cli(
            "status",
            "--check",
            "--format",
            "json",
            "--wal-size",
            "1GiB",
            "--backups",
            str(tmp_path / "none"),
            "--sweep-age",
            "1h",
        ).json()
    checks = {f["check"]: f for f in overridden["findings"]}
    assert checks["wal_size"]["state"] == "OK" and checks["wal_size"]["critical"] is None
    assert checks["backup_destination"]["state"] == "CRITICAL"
    assert checks["sweep_age"]["state"] == "WARNING"  # none recorded, no CRIT given
    (base_dir / "triggerfish.yaml").write_text("checks:\n  backup_age: soon\n")
    invalid = cli("config", "validate")
    assert invalid.exit_code == 8 and "checks.backup_age" in invalid.stdout + invalid.stderr


def test_the_check_writes_nothing(cli: CliFn, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backup_made(cli, monkeypatch, ago(hours=1), verify=True)
    sweep_recorded(db, ago(hours=1))
    before = SqliteStorage(db)
    rows = dict(before.scan())
    before.close()
    listing = sorted(p.name for p in (db.parent.parent / "backups" / "store").iterdir())
    assert cli("status", "--check").exit_code == 1  # config versions: none held
    after = SqliteStorage(db)
    assert dict(after.scan()) == rows
    after.close()
    assert sorted(p.name for p in (db.parent.parent / "backups" / "store").iterdir()) == listing


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0", 0),
        ("512", 512),
        ("64MiB", 64 << 20),
        ("64M", 64 << 20),
        ("1.5G", 3 << 29),
        ("500MB", 500_000_000),
        ("2kB", 2000),
        ("4 KiB", 4096),
    ],
)
def test_sizes_in_limits(text: str, size: int) -> None:
    from triggerfish_cli.timespec import parse_size

    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "MiB", "12 parsecs", "-1M", "1..5G"])
def test_sizes_that_are_not(text: str) -> None:
    from triggerfish_cli.timespec import parse_size

    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)
