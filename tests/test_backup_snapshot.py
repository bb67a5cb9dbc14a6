"""The streamed physical snapshot (backup_snapshot) and the framed zstd payload."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CliFn
from triggerfish_cli import backup_snapshot
from triggerfish_cli.backup_archive import (
    HashingWriter,
    LimitedHashingReader,
    Manifest,
    ZstdFrames,
    compress_stream,
    decompress_chunks,
    read_manifest,
)
from triggerfish_cli.backup_create import KeyCounter, count_rows, memory_level
from triggerfish_cli.errors import InvalidDataError, TriggerfishError, VerificationError
from triggerfish_cli.memory import split_key
from triggerfish_cli.storage.sqlite import SqliteStorage


@pytest.fixture
def gateway_open(gateway_db: Path) -> Iterator[Path]:
    """The store held open by another connection, as the running gateway does.

    Without it, the last connection to close checkpoints and removes the WAL.
    """
    holder = sqlite3.connect(gateway_db)
    holder.execute("SELECT count(*) FROM kv").fetchone()
    try:
        yield gateway_db
    finally:
        holder.close()


def _grow(db: Path, count: int, *, checkpoint: bool, tag: str = "grow") -> None:
    """Rows committed by another connection; left in the WAL unless ``checkpoint``."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    for start in range(0, count, 500):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO kv VALUES (?, ?)",
            (
                (f"conv:{tag}:{i:08d}", json.dumps({"n": i, "pad": "y" * 300}))
                for i in range(start, min(count, start + 500))
            ),
        )
        conn.execute("COMMIT")
    if checkpoint:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since ``before`` that are still running."""
    return [thread for thread in threading.enumerate() if thread not in before]


def _stream(db: Path, target: Path, consume: Any, **options: Any) -> tuple[Any, Any]:
    """``stream_snapshot`` of the store at ``db`` through a provider of its own."""
    provider = SqliteStorage(db)
    try:
        return backup_snapshot.stream_snapshot(provider, target, consume, **options)
    finally:
        provider.close()


def _collect(chunks: Iterator[bytes | memoryview]) -> bytes:
    return b"".join(bytes(chunk) for chunk in chunks)


def _reference_copy(db: Path, target: Path) -> bytes:
    """The same snapshot taken the plain way: the backup API into a file, read afterwards."""
    source, copy = sqlite3.connect(db), sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        copy.close()
        source.close()
    return target.read_bytes()


@pytest.mark.parametrize("in_wal", [False, True], ids=["checkpointed", "page-1-in-the-wal"])
def test_the_streamed_bytes_are_the_finished_copy(
    gateway_open: Path, tmp_path: Path, in_wal: bool
) -> None:
    before = set(threading.enumerate())
    gateway_db = gateway_open
    _grow(gateway_db, 3000, checkpoint=not in_wal)
    page_size = 4096
    wal_page = backup_snapshot._wal_first_page(Path(f"{gateway_db}-wal"), page_size)
    assert (wal_page is not None) == in_wal  # the case under test is really there
    calls: list[int] = []

    def consume(chunks: Iterator[bytes | memoryview]) -> bytes:
        calls.append(threading.get_ident())
        return _collect(chunks)

    streamed, snapshot = _stream(gateway_db, tmp_path / "copy.db", consume)
    copy = (tmp_path / "copy.db").read_bytes()
    assert snapshot.streamed and len(calls) == 1
    assert calls[0] != threading.get_ident()  # it ran beside the copy, on a thread
    assert streamed == copy
    assert snapshot.page_count * snapshot.page_size == len(copy)
    # byte for byte what the backup API gives when nothing is streamed
    assert copy == _reference_copy(gateway_db, tmp_path / "reference.db")
    assert not _new_threads(before)


def test_mapped_chunks_stay_valid_while_held_and_the_copy_can_go(
    gateway_open: Path, tmp_path: Path
) -> None:
    """With ``mapped``, chunks are whole frames of the file, kept by the consumer
    (as the compression pool does), still right after the copy is unlinked."""
    before = set(threading.enumerate())
    gateway_db = gateway_open
    _grow(gateway_db, 3000, checkpoint=False)
    target = tmp_path / "copy.db"
    frame = 64 << 10
    final: list[bytes] = []

    def copied() -> None:
        final.append(target.read_bytes())
        target.unlink()  # what a scratch copy does: its readers keep it alive

    # ``list`` keeps every chunk, as the compression pool holds frames
    chunks, snapshot = _stream(gateway_db, target, list, on_copied=copied, mapped=frame)
    assert snapshot.streamed and not target.exists()
    sizes = [len(chunk) for chunk in chunks]
    assert sizes[0] == 4096 and sizes[1] == frame - 4096  # page 1, then up to a frame
    assert all(size == frame for size in sizes[2:-1]) and 0 < sizes[-1] <= frame
    assert b"".join(bytes(chunk) for chunk in chunks) == final[0]
    del chunks
    assert not _new_threads(before)


def test_a_wrong_first_page_guess_streams_again_from_the_finished_copy(
    gateway_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        backup_snapshot, "predict_first_page", lambda path, size, count: b"\x00" * size
    )
    firsts: list[bytes] = []

    def consume(chunks: Iterator[bytes | memoryview]) -> bytes:
        firsts.append(bytes(next(chunks)))
        return firsts[-1] + _collect(chunks)

    streamed, snapshot = _stream(gateway_db, tmp_path / "copy.db", consume)
    copy = (tmp_path / "copy.db").read_bytes()
    # the first attempt began with the guess (and may have been stopped at once);
    # the second read the finished copy
    assert not snapshot.streamed and len(firsts) == 2
    assert firsts[0] == b"\x00" * 4096 and firsts[1] == copy[: len(firsts[1])]
    assert streamed == copy and copy.startswith(b"SQLite format 3\x00")


def test_a_failing_consumer_ends_the_snapshot_with_its_error(
    gateway_db: Path, tmp_path: Path
) -> None:
    before = set(threading.enumerate())
    provider = SqliteStorage(gateway_db)

    def consume(chunks: Iterator[bytes | memoryview]) -> None:
        next(chunks)
        raise OSError(28, "No space left on device")

    try:
        with pytest.raises(OSError, match="No space left"):
            backup_snapshot.stream_snapshot(provider, tmp_path / "copy.db", consume)
        # the read transaction is over: the tool's connection is usable and writable
        assert not provider.connection.in_transaction
        provider.connection.execute("INSERT INTO kv VALUES ('todos:after', '{}')")
    finally:
        provider.close()
    assert not _new_threads(before)


def test_a_failing_copy_stops_the_follower(
    gateway_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(threading.enumerate())
    seen: list[int] = []

    def consume(chunks: Iterator[bytes | memoryview]) -> None:
        for chunk in chunks:
            seen.append(len(chunk))

    provider = SqliteStorage(gateway_db)
    target = tmp_path / "missing-dir" / "copy.db"  # SQLite cannot create it
    try:
        with pytest.raises(TriggerfishError, match=r"backup: .*unable to open"):
            backup_snapshot.stream_snapshot(provider, target, consume)
        assert not provider.connection.in_transaction
    finally:
        provider.close()
    assert not _new_threads(before)


def test_the_first_page_prediction_matches_a_copy_of_a_growing_wal_store(
    gateway_open: Path, tmp_path: Path
) -> None:
    """With writes still in the WAL (page 1 among them), the guess is exact."""
    gateway_db = gateway_open
    for round in range(3):
        _grow(gateway_db, 700, checkpoint=False, tag=f"round{round}")
    conn = sqlite3.connect(gateway_db, isolation_level=None)
    try:
        conn.execute("BEGIN")
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        count = conn.execute("PRAGMA page_count").fetchone()[0]
        guess = backup_snapshot.predict_first_page(gateway_db, size, count)
        copy = sqlite3.connect(tmp_path / "copy.db")
        conn.backup(copy)
        copy.close()
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert backup_snapshot._wal_first_page(Path(f"{gateway_db}-wal"), size) is not None
    assert guess == (tmp_path / "copy.db").read_bytes()[:size]


def test_a_backup_of_a_growing_store_verifies(cli: CliFn, gateway_open: Path) -> None:
    gateway_db = gateway_open
    _grow(gateway_db, 4000, checkpoint=False)
    run = cli("backup", "create", "-c", "none", "--format", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    archive = Path(document["destination"]) / document["name"]
    assert cli("backup", "verify", str(archive)).exit_code == 0
    payload = archive.read_bytes()[: document["manifest"]["payload_bytes"]]
    assert hashlib.sha256(payload).hexdigest() == document["manifest"]["payload_sha256"]


# -- framed zstd --------------------------------------------------------------------


def _payload(size: int) -> bytes:
    lines = (json.dumps({"key": f"conv:{i:08d}", "n": i * 7919 % 10007}) for i in range(size))
    return "\n".join(lines).encode()[:size]


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("piece", [50_000, 64 << 10], ids=["gathered", "whole-frames"])
def test_zstd_frames_decompress_as_one_stream_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int, piece: int
) -> None:
    monkeypatch.setattr(ZstdFrames, "FRAME", 64 << 10)
    content = _payload(1_000_000)
    out = tmp_path / "payload.zst"
    with out.open("wb") as handle:
        sink = HashingWriter(handle)
        pieces = (memoryview(content)[i : i + piece] for i in range(0, len(content), piece))
        done = compress_stream(pieces, sink, "zstd", threads=threads, stable=True)
    data = out.read_bytes()
    assert done.read == len(content) and done.frames is not None
    assert len(done.frames) == -(-len(content) // (64 << 10)) and sum(done.frames) == len(data)
    assert sink.sha.hexdigest() == hashlib.sha256(data).hexdigest()
    # any decoder reads across the frames ...
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    assert reader.read() == content
    if shutil.which("zstd"):
        assert subprocess.run(["zstd", "-dc", str(out)], capture_output=True).stdout == content
    # ... and ours, frame by frame in parallel, or as one stream
    for frames in (done.frames, None):
        with out.open("rb") as handle:
            source = LimitedHashingReader(handle, len(data))
            chunks = decompress_chunks(source, "zstd", frames)
            assert b"".join(bytes(chunk) for chunk in chunks) == content
            assert source.sha.hexdigest() == sink.sha.hexdigest()


def test_an_empty_zstd_stream_is_one_empty_frame(tmp_path: Path) -> None:
    out = tmp_path / "empty.zst"
    with out.open("wb") as handle:
        done = compress_stream(iter(()), HashingWriter(handle), "zstd", threads=2)
    assert done.read == 0 and done.frames is not None and len(done.frames) == 1
    assert zstandard.ZstdDecompressor().decompress(out.read_bytes()) == b""


def test_a_damaged_frame_is_a_verification_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(threading.enumerate())
    monkeypatch.setattr(ZstdFrames, "FRAME", 64 << 10)
    content = _payload(400_000)
    out = tmp_path / "payload.zst"
    with out.open("wb") as handle:
        done = compress_stream([content], HashingWriter(handle), "zstd", threads=2)
    assert done.frames is not None
    data = bytearray(out.read_bytes())
    data[done.frames[0] + done.frames[1] // 2] ^= 0xFF  # inside the second frame
    out.write_bytes(bytes(data))
    with out.open("rb") as handle, pytest.raises(VerificationError, match="zstd"):
        for _ in decompress_chunks(LimitedHashingReader(handle, len(data)), "zstd", done.frames):
            pass
    assert not _new_threads(before)


def _manifest(**changes: object) -> dict[str, object]:
    document = Manifest(
        kind="physical",
        created="2026-11-30T00:00:00.000Z",
        source="sqlite:/x",
        backend="sqlite",
        compression="zstd",
        payload_bytes=30,
        payload_sha256="0" * 64,
        frames=[10, 20],
    ).as_dict()
    document.update(changes)
    return document


def test_the_manifest_lists_the_frames_and_refuses_a_wrong_list() -> None:
    assert Manifest.from_dict(_manifest(), "m").frames == [10, 20]
    assert Manifest.from_dict({**_manifest(), "frames": None}, "m").frames is None
    for bad in ([10, 19], [10, 0, 20], [10, "20"], "10,20", [10.0, 20]):
        with pytest.raises(InvalidDataError, match="'frames'"):
            Manifest.from_dict(_manifest(frames=bad), "m")
    with pytest.raises(InvalidDataError, match="'frames'"):
        Manifest.from_dict(_manifest(compression="gzip"), "m")


def test_a_created_zstd_archive_lists_its_frames(cli: CliFn, gateway_db: Path) -> None:
    run = cli("backup", "create", "--format", "json")
    assert run.exit_code == 0, run.stderr
    document = run.json()
    assert isinstance(document, dict)
    archive = Path(document["destination"]) / document["name"]
    manifest = read_manifest(archive)
    assert manifest.frames and sum(manifest.frames) == manifest.payload_bytes
    gzip = cli("backup", "create", "-c", "gzip", "--format", "json").json()
    assert isinstance(gzip, dict) and "frames" not in gzip["manifest"]


# -- counts -------------------------------------------------------------------------


ODD_KEYS = [
    "memory:a:PUBLIC:x",
    "memory::PUBLIC:x",
    "memory:a:PUBLIC:",
    "memory:a:PUBLIC",
    "memory:a:SECRET:x",
    "memory:a:INTERNAL:b:c",
    "memory:a",
    "memory:",
    "memory:a:b:RESTRICTED:x",
    "memoryx:a:PUBLIC:x",
]


@pytest.mark.parametrize("key", ODD_KEYS)
def test_memory_levels_are_read_as_the_memory_commands_read_them(key: str) -> None:
    parts = split_key(key)
    assert memory_level(key) == (parts[1].name if parts else None)


def test_counts_of_a_store_with_odd_memory_keys(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "odd.db")
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.executemany("INSERT INTO kv VALUES (?, '{}')", [(key,) for key in ODD_KEYS])
    conn.commit()
    counts = count_rows(conn)
    conn.close()
    assert counts.memories == {"PUBLIC": 2, "INTERNAL": 1}
    assert counts.keys == len(ODD_KEYS) and sum(counts.namespaces.values()) == len(ODD_KEYS)
    assert os.path.exists(tmp_path / "odd.db")


SEGMENTS = ["memory", "a", "ab", "a-b", "", "PUBLIC", "INTERNAL", "RESTRICTED", "SECRET", ";", "x"]
SEGMENTS += ["é"]  # not ASCII


@settings(max_examples=150, deadline=None)
@given(
    st.sets(
        st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=5).map(":".join),
        max_size=40,
    )
)
def test_the_snapshot_counts_match_a_key_by_key_count(keys: set[str]) -> None:
    """Range counts over the key index (a physical backup) and the count of a logical one
    (key by key) agree on any set of keys, however odd."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.executemany("INSERT INTO kv VALUES (?, '{}')", [(key,) for key in keys])
    counter = KeyCounter()
    for key in sorted(keys):
        counter.add(key)
    assert count_rows(conn) == counter.counts()
    conn.close()
