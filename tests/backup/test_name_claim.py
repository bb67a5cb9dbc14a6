"""Issue 35: two `backup create` runs in the same millisecond pick the same name; the
later one silently replaced the earlier. A name is claimed atomically, never replaced.

The race is made certain, not hoped for: the clock is frozen, and each run is told
the name is free (as both would be told when both look before either publishes).
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_planted_links import Victim, plant
from tests.conftest import CliFn
from tests.helpers.services import S3

CREATED = "2026-12-01T02:00:00.000Z"


def race(monkeypatch: pytest.MonkeyPatch, destination: type[Any]) -> None:
    """Every run starts in the same millisecond and finds its name free."""
    from triggerfish_cli.backup import create

    monkeypatch.setattr(create, "now_iso", lambda: CREATED)
    monkeypatch.setattr(destination, "exists", lambda self, name: False)


def made(cli: CliFn, *args: str) -> str:
    run = cli("backup", "create", "-f", "json", *args)
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    return str(document["name"])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("kind", [[], ["--logical"]], ids=["physical", "logical"])
def test_two_creates_in_one_millisecond_keep_both_archives(
    cli: CliFn,
    gateway_db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: list[str],
) -> None:
    from triggerfish_cli.backup.dest import LocalDestination

    race(monkeypatch, LocalDestination)
    backups = tmp_path / "backups"
    first = made(cli, "--to", str(backups), *kind)
    kept = sha256((backups / first).read_bytes())
    conn = sqlite3.connect(gateway_db)
    with conn:
        conn.execute("INSERT INTO kv VALUES ('sessions:later', 'x')")  # a different archive
    conn.close()
    second = made(cli, "--to", str(backups), *kind)
    assert first.startswith("triggerfish-2026-12-01T02-00-00.000Z.")
    assert second.startswith("triggerfish-2026-12-01T02-00-00.000Z-1.")
    assert sha256((backups / first).read_bytes()) == kept
    assert sorted(p.name for p in backups.iterdir()) == sorted([first, second])
    verified = cli("backup", "verify", "--all", "--from", str(backups))
    assert verified.exit_code == 0, verified.stderr


def test_an_archive_is_never_published_through_a_planted_link(
    cli: CliFn, gateway_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.backup.dest import LocalDestination

    race(monkeypatch, LocalDestination)
    backups = tmp_path / "backups"
    victim = Victim(tmp_path)
    link = plant(backups / "triggerfish-2026-12-01T02-00-00.000Z.db.zst", victim)
    name = made(cli, "--to", str(backups))
    assert name == "triggerfish-2026-12-01T02-00-00.000Z-1.db.zst"
    assert victim.unchanged() and link.is_symlink()


@pytest.mark.parametrize("parts", [1, 3], ids=["one-part", "multipart"])
def test_two_creates_in_one_millisecond_keep_both_archives_in_s3(
    cli: CliFn,
    gateway_db: Path,
    s3: S3,
    monkeypatch: pytest.MonkeyPatch,
    parts: int,
) -> None:
    """A conditional put (If-None-Match: *), of one part or on completing several."""
    from triggerfish_cli.storage.s3 import destination

    race(monkeypatch, destination.S3Destination)
    if parts > 1:
        monkeypatch.setattr(destination, "MULTIPART", 5 << 20)  # S3's smallest part
        conn = sqlite3.connect(gateway_db)
        with conn:
            conn.executemany(
                "INSERT INTO kv VALUES (?, ?)",
                ((f"conv:big:{i:012d}", "x" * 600) for i in range(20_000)),
            )
        conn.close()
    bucket = s3.new_bucket()
    where = ["--to", f"s3://{bucket}/nightly/", "--endpoint-url", s3.endpoint_url, "-c", "none"]
    client: Any = s3.client()
    first = made(cli, *where)
    head = client.head_object(Bucket=bucket, Key=f"nightly/{first}")
    second = made(cli, *where)
    assert (first, second) == (
        "triggerfish-2026-12-01T02-00-00.000Z.db",
        "triggerfish-2026-12-01T02-00-00.000Z-1.db",
    )
    again = client.head_object(Bucket=bucket, Key=f"nightly/{first}")
    assert again["ETag"] == head["ETag"] and again["Metadata"] == head["Metadata"]
    if parts > 1:
        assert head["ETag"].strip('"').endswith(("-2", "-3"))  # it was a multipart upload
    keys = [item["Key"] for item in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(keys) == sorted([f"nightly/{first}", f"nightly/{second}"])
