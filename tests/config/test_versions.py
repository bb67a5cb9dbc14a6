"""The config version store: records, numbering, the rolling window, backup names."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from triggerfish_cli.config import files as config_files
from triggerfish_cli.config import versions as cv
from triggerfish_cli.errors import (
    BusyError,
    InvalidDataError,
    NotFoundError,
    RefusedError,
    UsageError,
    VerificationError,
)
from triggerfish_cli.storage.in_memory import MemoryStorage


def store_texts(provider: MemoryStorage, count: int) -> None:
    for index in range(count):
        cv.store_version(provider, f"models: {{n: {index}}}\n", source="snapshot")


def test_version_arguments() -> None:
    assert cv.parse_version_arg("13") == 13
    assert cv.parse_version_arg("v13") == 13
    assert cv.parse_version_arg("V7") == 7
    for bad in ("0", "v0", "-1", "x", "v", "13a", "013", ""):
        with pytest.raises(UsageError):
            cv.parse_version_arg(bad)


def test_record_shape_is_compact_json_in_a_fixed_order() -> None:
    provider = MemoryStorage()
    version, evicted = cv.store_version(provider, "models: {}\n", source="snapshot", reason="r")
    assert evicted == []
    raw = provider.get("config:v1")
    assert raw is not None and " " not in raw.replace("models: {}", "")
    record = json.loads(raw)
    assert list(record) == [
        "version",
        "createdAt",
        "user",
        "reason",
        "source",
        "sha256",
        "bytes",
        "yaml",
    ]
    assert record["version"] == 1 and record["source"] == "snapshot"
    assert record["sha256"] == hashlib.sha256(b"models: {}\n").hexdigest()
    assert record["bytes"] == 11
    assert record["createdAt"].endswith("Z") and len(record["createdAt"]) == 24
    assert cv.Version.from_json(1, raw) == version


def test_rolling_window_keeps_ten_and_numbers_keep_growing() -> None:
    provider = MemoryStorage()
    store_texts(provider, 10)
    assert cv.version_numbers(provider) == list(range(1, 11))
    version, evicted = cv.store_version(provider, "models: {n: 10}\n", source="snapshot")
    assert version.number == 11 and evicted == [1]
    assert cv.version_numbers(provider) == list(range(2, 12))
    store_texts(provider, 3)
    assert cv.version_numbers(provider) == list(range(5, 15))
    audit = [json.loads(v) for k, v in provider.scan("audit:")]
    assert len(audit) == 14
    assert [record["version"] for record in audit] == list(range(1, 15))
    assert audit[10]["evicted"] == [1] and audit[10]["counts"] == {"stored": 1, "evicted": 1}
    assert audit[0]["hook"] == "admin_config_snapshot" and "evicted" not in audit[0]


def test_next_number_comes_from_the_highest_parsed_key_not_key_order() -> None:
    provider = MemoryStorage()
    for number in (9, 10):  # "config:v10" sorts before "config:v9"
        provider.set(
            f"config:v{number}",
            cv.Version(
                number,
                "2026-01-01T00:00:00.000Z",
                "u",
                "snapshot",
                config_files.sha256_text(""),
                "",
            ).to_json(),
        )
    provider.set("config:vx", "{}")  # not a version key: ignored
    provider.set("config:other", "{}")
    assert cv.version_numbers(provider) == [9, 10]
    version, _ = cv.store_version(provider, "a: 1\n", source="snapshot")
    assert version.number == 11


def test_the_store_refuses_text_that_still_holds_a_secret() -> None:
    provider = MemoryStorage()
    with pytest.raises(RefusedError):
        cv.store_version(provider, "a:\n  password: hunter2\n", source="snapshot")
    with pytest.raises(RefusedError, match="reason"):
        cv.store_version(
            provider,
            "a: 1\n",
            source="snapshot",
            reason="key was ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A",
        )
    assert provider.count() == 0


def test_damaged_records_are_reported_not_trusted() -> None:
    provider = MemoryStorage()
    store_texts(provider, 2)
    record = json.loads(provider.get("config:v1") or "")
    record["yaml"] = "models: {tampered: true}\n"
    provider.set("config:v1", json.dumps(record))
    provider.set("config:v3", "not json")
    listing = cv.list_versions(provider)
    assert [v.number for v in listing.versions] == [2]
    assert len(listing.problems) == 2 and "checksum mismatch" in listing.problems[0]
    with pytest.raises(VerificationError):
        cv.get_version(provider, 1)
    with pytest.raises(InvalidDataError):
        cv.get_version(provider, 3)


def test_missing_versions_say_what_is_stored() -> None:
    provider = MemoryStorage()
    with pytest.raises(NotFoundError, match="v4") as empty:
        cv.get_version(provider, 4)
    assert "config snapshot" in str(empty.value)
    store_texts(provider, 12)
    with pytest.raises(NotFoundError) as gone:
        cv.get_version(provider, 1)
    assert "v3..v12" in str(gone.value) and "10 newest" in str(gone.value)


def test_snapshot_reads_bytes_exactly(tmp_path: Path) -> None:
    provider = MemoryStorage()
    path = tmp_path / "triggerfish.yaml"
    text = '\ufeffmodels:\r\n  primary: {model: "é"}\r\n# no final newline'
    path.write_bytes(text.encode("utf-8"))
    result = cv.snapshot(provider, path)
    assert result.stored and result.version == 1
    assert cv.get_version(provider, 1).yaml == text
    again = cv.snapshot(provider, path)
    assert not again.stored and again.version == 1 and again.as_dict()["unchanged"]


def test_snapshot_refuses_files_that_are_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "triggerfish.yaml"
    path.write_bytes(b"models: {name: \xff}\n")
    with pytest.raises(InvalidDataError, match="UTF-8"):
        cv.snapshot(MemoryStorage(), path)


def test_the_lock_serialises_config_commands(tmp_path: Path) -> None:
    path = tmp_path / "triggerfish.yaml"
    with (
        config_files.config_lock(path),
        pytest.raises(BusyError),
        config_files.config_lock(path, timeout=0.1),
    ):
        pass  # a second holder (a separate open file description) must wait


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("triggerfish.yaml.2026-02-16T14-30-45.123Z", "2026-02-16T14:30:45.123Z"),
        ("triggerfish.yaml.2026-02-16T14-30-45Z", "2026-02-16T14:30:45.000Z"),
        ("triggerfish.yaml.2026-02-16T14:30:45.123Z", None),  # the gateway never writes ':'
        ("triggerfish.yaml.2026-02-16T14-30-45.123", None),
        ("triggerfish.yaml.bak", None),
        ("other.yaml.2026-02-16T14-30-45.123Z", None),
        ("triggerfish.yaml.2026-13-16T14-30-45.123Z", None),
    ],
)
def test_gateway_backup_names(name: str, expected: str | None) -> None:
    assert config_files.backup_time(name, "triggerfish.yaml") == expected


def test_backup_name_is_the_gateways_format() -> None:
    name = config_files.backup_name("triggerfish.yaml", "2026-02-16T14:30:45.123Z")
    assert name == "triggerfish.yaml.2026-02-16T14-30-45.123Z"
    assert config_files.backup_time(name, "triggerfish.yaml") == "2026-02-16T14:30:45.123Z"
