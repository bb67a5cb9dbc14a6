"""The migrate core: locations, the checksum, the side-by-side comparison, refusals."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triggerfish_cli import checksums, locations
from triggerfish_cli.errors import InvalidDataError, RefusedError, UsageError
from triggerfish_cli.migrate import planning, run
from triggerfish_cli.storage.in_memory import MemoryStorage


def test_locations(tmp_path: Path) -> None:
    sqlite = locations.parse_location(str(tmp_path / "a.db"), "from")
    assert (sqlite.backend, sqlite.path) == ("sqlite", tmp_path / "a.db")
    pg = locations.parse_location(
        "postgresql://tf@db.internal:5433/prod?schema=tf2&sslmode=require", "to"
    )
    assert pg.backend == "postgres"
    assert pg.options == {
        "dsn": "postgresql://tf@db.internal:5433/prod?sslmode=require",
        "schema": "tf2",
    }
    s3 = locations.parse_location("s3://acme-tf/prod/eu", "to")
    assert (s3.backend, s3.options) == ("s3", {"bucket": "acme-tf", "prefix": "prod/eu/"})
    assert locations.parse_location("s3://acme-tf", "to").options["prefix"] == ""


def test_yaml_locations(tmp_path: Path, base_dir: Path) -> None:
    yaml = tmp_path / "minio.yaml"
    yaml.write_text(
        "models: {primary: x}\nstorage:\n  backend: s3\n  bucket: tf\n"
        "  endpoint_url: http://127.0.0.1:9000\n"
    )
    config = locations.parse_location(str(yaml), "to")
    assert config.backend == "s3" and config.options["endpoint_url"] == "http://127.0.0.1:9000"
    local = tmp_path / "local.yml"
    local.write_text("storage:\n  backend: sqlite\n  path: stores/x.db\n")
    assert locations.parse_location(str(local), "from").path == tmp_path / "stores" / "x.db"
    default = tmp_path / "default.yaml"
    default.write_text("storage:\n  backend: sqlite\n")
    assert (
        locations.parse_location(str(default), "from").path == base_dir / "data" / "triggerfish.db"
    )
    (tmp_path / "none.yaml").write_text("models: {}\n")
    with pytest.raises(InvalidDataError, match="no storage: section"):
        locations.parse_location(str(tmp_path / "none.yaml"), "from")
    (tmp_path / "mem.yaml").write_text("storage:\n  backend: memory\n")
    with pytest.raises(UsageError, match="memory"):
        locations.parse_location(str(tmp_path / "mem.yaml"), "to")


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("postgresql://tf:hunter2@db/prod", RefusedError, "PGPASSWORD"),
        ("postgres://tf@db/prod?password=hunter2", RefusedError, "password"),
        ("mysql://db/x", UsageError, "unknown kind of store"),
        ("s3://", UsageError, "s3://bucket/prefix"),
        ("s3://key:hunter2@bucket/x", RefusedError, "credentials"),
        ("postgresql://db/x?schema=pg_toast", UsageError, "reserved"),
        ("postgresql:/db/x", UsageError, "must be followed by //"),
        ("", UsageError, "empty"),
    ],
)
def test_bad_locations(spec: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        locations.parse_location(spec, "to")
    assert "hunter2" not in str(caught.value)


def test_checksum_is_order_independent_and_sensitive_to_every_byte() -> None:
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(50)]
    shuffled = records[:]
    random.Random(1).shuffle(shuffled)

    def total(items: list[tuple[bytes, bytes]]) -> str:
        sums = checksums.Sums()
        for key, value in items:
            sums.add(key, value)
        return sums.hex

    assert total(records) == total(shuffled)
    assert total([(b"ab", b"c")]) != total([(b"a", b"bc")])
    assert total([(b"k", b"v")]) != total([(b"k", b"w")])
    assert total([(b"a", b"1"), (b"b", b"2")]) != total([(b"a", b"2"), (b"b", b"1")])
    sums = checksums.Sums()
    sums.add(b"a", b"1")
    sums.add(b"b", b"2")
    sums.remove(b"b", b"2")
    assert sums.same(checksums.Sums(1, int(total([(b"a", b"1")]), 16)))


def test_compare_counts_missing_different_and_extra() -> None:
    source = MemoryStorage({"sessions:1": "a", "sessions:2": "b", "conv:x:1": "c", "plain": "d"})
    target = MemoryStorage(
        {
            "sessions:1": "a",
            "sessions:2": "B",
            "plain": "d",
            "zzz:1": "e",
            planning.PROGRESS_KEY: "{}",
        }
    )
    checks = checksums.compare(source, target, ignore=[planning.PROGRESS_KEY], batch_size=2)
    rows = {name: check.as_dict(merge=False) for name, check in checks.items()}
    assert rows["sessions:"]["different"] == 1 and rows["sessions:"]["source_keys"] == 2
    assert rows["sessions:"]["source_checksum"] != rows["sessions:"]["target_checksum"]
    assert rows["conv:"]["missing"] == 1 and rows["conv:"]["target_keys"] == 0
    assert rows["zzz:"]["extra"] == 1 and not rows["zzz:"]["ok"]
    assert checks["zzz:"].ok(merge=True)
    assert rows[""]["ok"] and rows[""]["source_checksum"] == rows[""]["target_checksum"]
    assert "tfadmin:" not in rows  # our own progress record is not compared
    # verify: checksums first, then only the namespaces that differ are walked
    fast = run.verify(source, target, merge=False)
    assert {name: c.as_dict(False) for name, c in fast.items()} == rows


def test_every_backend_computes_the_same_checksums(tmp_path: Path) -> None:
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    rows = {"sessions:1": "a", "é:日本": "ü", "plain": "", "main-session-id": "x", "x:y:z": "1"}
    memory = MemoryStorage(rows)
    sqlite = SqliteStorage(tmp_path / "s.db", create=True)
    sqlite.set_many(rows.items())
    expected = {k: (v.count, v.hex) for k, v in checksums.namespace_sums(memory).items()}
    assert {k: (v.count, v.hex) for k, v in checksums.namespace_sums(sqlite).items()} == expected
    assert set(expected) == {"sessions:", "é:", "", "main-session-id", "x:"}


def test_plan_refusals() -> None:
    source = MemoryStorage({"a": "1"})
    assert planning.plan(source, MemoryStorage(), merge=False).target_state == "empty"
    with pytest.raises(RefusedError, match="not empty"):
        planning.plan(source, MemoryStorage({"x": "1"}), merge=False)
    assert planning.plan(source, MemoryStorage({"x": "1"}), merge=True).target_state == "non-empty"
    other = planning.Progress("sqlite:/elsewhere.db", False, "2026-01-01T00:00:00.000Z", "a", 1)
    with pytest.raises(RefusedError, match=r"unfinished migration from sqlite:/elsewhere\.db"):
        planning.plan(source, MemoryStorage({planning.PROGRESS_KEY: other.dump()}), merge=True)
    with pytest.raises(RefusedError, match="unfinished migration into it"):
        planning.plan(MemoryStorage({planning.PROGRESS_KEY: "{}"}), MemoryStorage(), merge=False)
    with pytest.raises(InvalidDataError, match="not a migration progress record"):
        planning.plan(source, MemoryStorage({planning.PROGRESS_KEY: "[]"}), merge=False)


def test_the_same_store_under_two_names_is_refused() -> None:
    """The source sees the progress record written to the target: one store."""
    shared = {"a": "1"}
    source, target = MemoryStorage(), MemoryStorage()
    source._data = target._data = shared  # two providers on one store
    the_plan = planning.plan(source, target, merge=True)
    with pytest.raises(UsageError, match="same store"):
        run.copy(source, target, the_plan)
    assert shared == {"a": "1"}


@settings(max_examples=100, deadline=None)
@given(
    rows=st.dictionaries(
        st.lists(
            st.sampled_from(["sessions:", "main-session-id", "conv", ":", "x", "é", "-"]),
            max_size=4,
        ).map("".join),
        st.text(max_size=3),
        max_size=30,
    )
)
def test_the_fast_accumulator_matches_the_definition(rows: dict[str, str]) -> None:
    from triggerfish_cli import namespaces

    expected: dict[str, checksums.Sums] = {}
    for key, value in rows.items():
        expected.setdefault(namespaces.group_of(key), checksums.Sums()).add(
            key.encode(), value.encode()
        )
    accumulator = checksums.Accumulator()
    accumulator.add(sorted(rows.items()))
    got = accumulator.sums
    assert {g: (s.count, s.hex) for g, s in got.items()} == {
        g: (s.count, s.hex) for g, s in expected.items()
    }
