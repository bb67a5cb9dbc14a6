"""The streamed physical snapshot (backup_snapshot) and the framed zstd payload."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CliFn
from tests.helpers import wal_writer
from triggerfish_cli.backup.archive import read_manifest
from triggerfish_cli.backup.counts import Counts, KeyCounter, memory_level
from triggerfish_cli.backup.decompress import decompress_chunks, decompress_into
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.backup.streams import (
    HashingWriter,
    LimitedHashingReader,
    ZstdFrames,
    compress_stream,
)
from triggerfish_cli.errors import InvalidDataError, TriggerfishError, VerificationError
from triggerfish_cli.memory.keys import split_key
from triggerfish_cli.storage import kept_files
from triggerfish_cli.storage.sqlite import snapshot as backup_snapshot
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.counts import count_rows


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


def _grow(
    db: Path,
    count: int,
    *,
    checkpoint: bool,
    tag: str = "grow",
    conn: sqlite3.Connection | None = None,
) -> None:
    """Rows committed by another connection, 500 a commit; left in the WAL unless
    ``checkpoint`` (a TRUNCATE checkpoint: an empty WAL)."""
    writer = conn or sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    for start in range(0, count, 500):
        writer.execute("BEGIN")
        writer.executemany(
            "INSERT OR REPLACE INTO kv VALUES (?, ?)",
            (
                (f"conv:{tag}:{i:08d}", json.dumps({"n": i, "pad": "y" * 300}))
                for i in range(start, min(count, start + 500))
            ),
        )
        writer.execute("COMMIT")
    if checkpoint:
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if conn is None:
        writer.close()


def _new_store(db: Path, page_size: int | None = None) -> sqlite3.Connection:
    """An empty WAL store with the kv table; its gateway-like writer (see _writer)."""
    setup = sqlite3.connect(db, isolation_level=None)
    if page_size is not None:
        setup.execute(f"PRAGMA page_size={page_size}")
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    setup.close()
    return _writer(db)


def _writer(db: Path) -> sqlite3.Connection:
    """A connection writing as the gateway does: no busy timeout; no auto-checkpoint,
    so its frames stay in the WAL."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    return conn


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


#: Page 1 header fields a backup-API copy sets for itself: change counter, page
#: count, schema cookie, version-valid-for and SQLite version number.
COPY_OWN_FIELDS = ((24, 32), (40, 44), (92, 100))


def _without_copy_fields(image: bytes) -> bytes:
    page = bytearray(image[:100])
    for start, end in COPY_OWN_FIELDS:
        page[start:end] = bytes(end - start)
    return bytes(page) + image[100:]


def _rows(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT key, value FROM kv"))
    finally:
        conn.close()


def _restored(image: bytes, path: Path) -> tuple[dict[str, str], Counts]:
    """The image as a store file: integrity checked; its rows and its counts."""
    path.write_bytes(image)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = dict(conn.execute("SELECT key, value FROM kv"))
        return rows, count_rows(conn)
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def _backfill_state(db: Path) -> tuple[int, int, bytes]:
    """(nBackfill, mxFrame, salts) of the wal-index now."""
    # a kept descriptor: closing one would drop the locks of this process's connections
    shm = kept_files.kept(os.path.realpath(f"{db}-shm"))
    index, backfilled = backup_snapshot._read_index_and_backfill(shm)
    assert index is not None
    return backfilled, index.max_frame, index.salt


@pytest.mark.parametrize(
    ("state", "page_size"),
    [
        ("frames-in-the-wal", 4096),
        ("frames-in-the-wal", 1024),
        ("frames-in-the-wal", 65536),
        ("rewritten-pages", 4096),
        ("backfilled", 4096),
        ("checkpointed-empty", 4096),
    ],
)
def test_the_direct_image_is_the_snapshot_page_for_page(
    tmp_path: Path, state: str, page_size: int
) -> None:
    """Pages read straight from the store's files: the backup API's copy of the same
    snapshot, page for page (page 1 keeps the store's own header), and a store."""
    before = set(threading.enumerate())
    db = tmp_path / "store.db"
    writer = _new_store(db, page_size)  # stays open: the WAL stays, as with a running gateway
    try:
        _grow(db, 3000, checkpoint=True, tag="old", conn=writer)  # in the database file
        _grow(db, 2000, checkpoint=False, tag="new", conn=writer)  # in the WAL
        if state == "rewritten-pages":  # the same pages in several frames
            for round in range(4):
                writer.execute(
                    "UPDATE kv SET value = ? WHERE key LIKE 'conv:new:%' AND key < ?",
                    (json.dumps({"round": round}), f"conv:new:{round * 400:08d}"),
                )
        if state == "backfilled":
            writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if state == "checkpointed-empty":
            writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        backfilled, frames, _ = _backfill_state(db)
        expected = {
            "frames-in-the-wal": backfilled < frames,
            "rewritten-pages": backfilled < frames,
            "backfilled": 0 < backfilled == frames,
            "checkpointed-empty": backfilled == frames == 0,
        }[state]
        assert expected, (backfilled, frames)  # the case under test is really there
        image, snapshot = _stream(db, tmp_path / "scratch.db", _collect, inspect=count_rows)
        reference = _reference_copy(db, tmp_path / "reference.db")
        rows = _rows(db)
    finally:
        writer.close()
    assert snapshot.method == "direct" and snapshot.streamed
    assert (snapshot.wal_pages > 0) == (state in ("frames-in-the-wal", "rewritten-pages"))
    assert snapshot.page_size == page_size and len(image) == snapshot.page_count * page_size
    assert image.startswith(b"SQLite format 3\x00")
    assert _without_copy_fields(image) == _without_copy_fields(reference)
    restored, counts = _restored(image, tmp_path / "restored.db")
    assert restored == rows and len(rows) == 5000
    assert counts == snapshot.inspected
    assert not _new_threads(before)


def test_the_image_is_the_snapshot_while_the_store_changes_under_it(tmp_path: Path) -> None:
    """Between two chunks of the read, another connection (no busy timeout) writes,
    checkpoints and tries to restart the WAL: none of its writes fail, and the image
    (and the counts, read meanwhile) are the store as it was when the read began."""
    db = tmp_path / "store.db"
    writer = _new_store(db)
    outcomes: list[tuple[int, int]] = []
    try:
        _grow(db, 2000, checkpoint=True, tag="old", conn=writer)
        _grow(db, 1500, checkpoint=False, tag="new", conn=writer)
        rows = _rows(db)

        def consume(chunks: Iterator[bytes | memoryview]) -> bytes:
            first = bytes(next(chunks))
            _grow(db, 1500, checkpoint=False, tag="new", conn=writer)  # the same pages, again
            writer.execute("DELETE FROM kv WHERE key LIKE 'conv:old:0000%'")
            passive = writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            truncate = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            outcomes.append((passive[0], truncate[0]))
            _grow(db, 3000, checkpoint=False, tag="later", conn=writer)  # after the restart
            writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            return first + _collect(chunks)

        # small chunks: most of the image is read after the writes
        image, snapshot = _stream(
            db, tmp_path / "scratch.db", consume, inspect=count_rows, chunk=8 * 4096
        )
    finally:
        writer.close()
    assert snapshot.method == "direct" and snapshot.wal_pages > 0
    assert outcomes == [(0, 1)]  # the TRUNCATE was held off: our read mark pins the WAL
    restored, counts = _restored(image, tmp_path / "restored.db")
    assert restored == rows
    assert counts == snapshot.inspected and counts.keys == len(rows)


def _wal_store(tmp_path: Path) -> tuple[Path, sqlite3.Connection]:
    """A store with rows in the database file and more in the WAL, its writer open."""
    db = tmp_path / "store.db"
    writer = _new_store(db)
    _grow(db, 2000, checkpoint=True, tag="old", conn=writer)
    _grow(db, 1500, checkpoint=False, tag="new", conn=writer)
    return db, writer


def test_frames_committed_after_the_snapshot_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit lands after the snapshot is pinned and before the WAL is scanned: its
    frames (the same pages, newer) are in the file, past the snapshot's mxFrame."""
    db, writer = _wal_store(tmp_path)
    scan = backup_snapshot._wal_frames

    def commit_first(*args: Any) -> dict[int, int]:
        _grow(db, 1500, checkpoint=False, tag="new", conn=writer)  # rewrites the same rows
        _grow(db, 500, checkpoint=False, tag="later", conn=writer)
        return scan(*args)

    monkeypatch.setattr(backup_snapshot, "_wal_frames", commit_first)
    try:
        rows = _rows(db)
        image, snapshot = _stream(db, tmp_path / "scratch.db", _collect, inspect=count_rows)
        assert len(_rows(db)) == len(rows) + 500
    finally:
        writer.close()
    assert snapshot.method == "direct" and snapshot.wal_pages
    restored, counts = _restored(image, tmp_path / "restored.db")
    assert restored == rows and counts == snapshot.inspected


def test_a_commit_between_the_header_reads_takes_the_snapshot_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wal-index header changed between the reads around the snapshot: which
    header is the snapshot's is not known, so it is taken again."""
    db, writer = _wal_store(tmp_path)
    read, pin = backup_snapshot._read_index_and_backfill, backup_snapshot._pin
    reads: list[int] = []
    pins: list[object] = []

    def commit_once(shm: int) -> tuple[Any, int]:
        reads.append(shm)
        if len(reads) == 2:  # the first read after the snapshot was taken (H2)
            _grow(db, 500, checkpoint=False, tag="meanwhile", conn=writer)
        return read(shm)

    def counted(*args: Any) -> Any:
        pins.append(pin(*args))
        return pins[-1]

    monkeypatch.setattr(backup_snapshot, "_read_index_and_backfill", commit_once)
    monkeypatch.setattr(backup_snapshot, "_pin", counted)
    try:
        image, snapshot = _stream(db, tmp_path / "scratch.db", _collect, inspect=count_rows)
        rows = _rows(db)
    finally:
        writer.close()
    assert len(pins) == 2 and pins[0] is None  # taken again
    assert snapshot.method == "direct"
    restored, counts = _restored(image, tmp_path / "restored.db")
    assert restored == rows and counts == snapshot.inspected and counts.keys == 4000


def test_a_wal_restart_during_a_read_of_a_checkpointed_store(tmp_path: Path) -> None:
    """Everything in the database file when the read begins (nBackfill == mxFrame):
    the next write restarts the WAL under the read (it may: the read takes nothing
    from it), and no checkpoint can touch the database file until the read ends."""
    db = tmp_path / "store.db"
    writer = _new_store(db)
    outcomes: list[tuple[bool, int]] = []
    try:
        _grow(db, 3000, checkpoint=False, tag="old", conn=writer)
        writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        backfilled, frames, salt = _backfill_state(db)
        assert 0 < backfilled == frames
        rows = _rows(db)

        def consume(chunks: Iterator[bytes | memoryview]) -> bytes:
            first = bytes(next(chunks))
            _grow(db, 1000, checkpoint=False, tag="old", conn=writer)
            restarted = _backfill_state(db)[2] != salt
            busy = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            outcomes.append((restarted, busy))
            _grow(db, 3000, checkpoint=False, tag="after", conn=writer)
            writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            return first + _collect(chunks)

        image, snapshot = _stream(db, tmp_path / "scratch.db", consume, chunk=8 * 4096)
    finally:
        writer.close()
    assert snapshot.method == "direct" and snapshot.wal_pages == 0
    # the WAL restarted; no checkpoint could backfill the new frames past our snapshot
    assert outcomes == [(True, 1)]
    assert _restored(image, tmp_path / "restored.db")[0] == rows


def _wal_shrinks(db: Path, until: float) -> bool:
    """Whether the -wal file shrinks before ``until``: only a TRUNCATE checkpoint that
    was not busy does that (a restart after PASSIVE ones writes over it from the start)."""
    wal = Path(f"{db}-wal")
    size = wal.stat().st_size
    while time.monotonic() < until:
        if wal.stat().st_size < size:
            return True
        time.sleep(0.001)
    return False


def test_backups_while_a_writer_process_writes_checkpoints_and_restarts_the_wal(
    gateway_db: Path, tmp_path: Path
) -> None:
    """A writer with no busy timeout commits numbered keys every few milliseconds and
    checkpoints (PASSIVE, and TRUNCATE, which restarts the WAL) while backups are
    taken: none of its writes fails, and each backup is a store holding the rows
    from before and exactly the writer's keys 1..k for some k."""
    _grow(gateway_db, 3000, checkpoint=False)
    original = _rows(gateway_db)
    provider = SqliteStorage(gateway_db)
    snapshots = []
    archives: list[Path] = []
    truncated = False  # the writer's TRUNCATE checkpoint restarted the WAL between reads

    def done() -> bool:
        # until the cases happened (it was: 6 backups over 1.5 s, which a loaded machine
        # could spend without one restart, or without one read of WAL frames)
        wal_read = any(snapshot.method == "direct" and snapshot.wal_pages for snapshot in snapshots)
        return len(archives) >= 6 and truncated and wal_read

    with wal_writer.running(gateway_db, tmp_path / "stop", tmp_path / "writer.json"):
        hang = time.monotonic() + 120  # a guard against a hang, not a measure
        while not done():
            assert time.monotonic() < hang, "the writer never restarted the WAL"
            archive = tmp_path / f"backup-{len(archives)}.zst"

            def consume(chunks: Iterator[bytes | memoryview], archive: Path = archive) -> int:
                with archive.open("wb") as out:
                    return compress_stream(
                        chunks, HashingWriter(out), "zstd", threads=2, stable=True
                    ).read

            _, snapshot = backup_snapshot.stream_snapshot(
                provider, tmp_path / "scratch.db", consume, inspect=count_rows, chunk=64 << 10
            )
            snapshots.append(snapshot)
            archives.append(archive)
            # a moment without a reader, in which a TRUNCATE checkpoint may restart the WAL
            truncated = truncated or _wal_shrinks(gateway_db, time.monotonic() + 0.5)
    provider.close()
    written = json.loads((tmp_path / "writer.json").read_text())
    assert written["errors"] == [] and written["count"] > 0
    assert written["restarts"] > 0  # the WAL restarted between (or under) the reads
    seen = []
    for snapshot, archive in zip(snapshots, archives, strict=True):
        image = (
            zstandard.ZstdDecompressor()
            .stream_reader(archive.read_bytes(), read_across_frames=True)
            .read()
        )
        rows, counts = _restored(image, tmp_path / "restored.db")
        ours = sorted(key for key in rows if key.startswith(wal_writer.PREFIX))
        assert ours == [wal_writer.key(n) for n in range(1, len(ours) + 1)]
        assert {key: rows[key] for key in original} == original
        assert len(rows) == len(original) + len(ours)
        assert counts == snapshot.inspected
        seen.append(len(ours))
    assert seen == sorted(seen)  # later backups, later states
    assert any(snapshot.method == "direct" and snapshot.wal_pages for snapshot in snapshots)


def test_backup_create_while_the_writer_process_runs_verifies(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    """The whole command (archive, manifest counts, audit record) beside the writer:
    none of its writes fails, and each archive verifies against its own counts."""
    _grow(gateway_db, 3000, checkpoint=False)
    archives = []
    with wal_writer.running(gateway_db, tmp_path / "stop", tmp_path / "writer.json"):
        for _ in range(3):
            run = cli("backup", "create", "--format", "json")
            assert run.exit_code == 0, run.stderr
            document = run.json()
            assert isinstance(document, dict)
            archives.append(Path(document["destination"]) / document["name"])
    written = json.loads((tmp_path / "writer.json").read_text())
    assert written["errors"] == [] and written["count"] > 0
    for archive in archives:
        run = cli("backup", "verify", str(archive))
        assert run.exit_code == 0, run.stdout + run.stderr


def _force_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wal-index cannot be read: the backup API's copy instead."""
    monkeypatch.setattr(backup_snapshot, "_read_index", lambda shm: None)


def test_the_fallback_copy_streams_the_same_snapshot(
    gateway_open: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(threading.enumerate())
    _grow(gateway_open, 3000, checkpoint=False)
    _force_copy(monkeypatch)
    image, snapshot = _stream(gateway_open, tmp_path / "scratch.db", _collect, inspect=count_rows)
    assert snapshot.method == "copy" and snapshot.streamed
    assert not (tmp_path / "scratch.db").exists()  # the scratch copy is gone once read
    assert image == _reference_copy(gateway_open, tmp_path / "reference.db")
    assert snapshot.page_count * snapshot.page_size == len(image)
    rows, counts = _restored(image, tmp_path / "restored.db")
    assert rows == _rows(gateway_open) and counts == snapshot.inspected
    assert not _new_threads(before)


def test_a_store_not_in_wal_mode_is_copied(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO kv VALUES ('todos:a', '{}')")
    conn.commit()
    conn.close()
    image, snapshot = _stream(db, tmp_path / "scratch.db", _collect)
    assert snapshot.method == "copy"
    assert _restored(image, tmp_path / "restored.db")[0] == {"todos:a": "{}"}


def test_a_read_failing_part_way_starts_the_consumer_again_on_a_copy(
    gateway_open: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(threading.enumerate())
    _grow(gateway_open, 3000, checkpoint=False)
    pages = backup_snapshot._pages

    def failing(*args: Any) -> Iterator[bytes | memoryview]:
        chunks = pages(*args)
        yield next(chunks)
        raise backup_snapshot._Unusual("a short read")

    monkeypatch.setattr(backup_snapshot, "_pages", failing)
    firsts: list[bytes] = []

    def consume(chunks: Iterator[bytes | memoryview]) -> bytes:
        firsts.append(bytes(next(chunks)))
        return firsts[-1] + _collect(chunks)

    image, snapshot = _stream(
        gateway_open, tmp_path / "scratch.db", consume, inspect=count_rows, chunk=4096
    )
    assert len(firsts) == 2 and snapshot.method == "copy" and not snapshot.streamed
    assert image == _reference_copy(gateway_open, tmp_path / "reference.db")
    assert _restored(image, tmp_path / "restored.db")[1] == snapshot.inspected
    assert not _new_threads(before)


def test_chunks_stay_valid_while_held(gateway_open: Path, tmp_path: Path) -> None:
    """Each chunk is a buffer of its own (the compression pool keeps whole frames)."""
    _grow(gateway_open, 3000, checkpoint=False)
    frame = 64 << 10
    chunks, snapshot = _stream(gateway_open, tmp_path / "scratch.db", list, chunk=frame)
    sizes = [len(chunk) for chunk in chunks]
    assert snapshot.method == "direct" and snapshot.wal_pages
    assert all(size == frame for size in sizes[:-1]) and 0 < sizes[-1] <= frame
    image = b"".join(bytes(chunk) for chunk in chunks)
    reference = _reference_copy(gateway_open, tmp_path / "reference.db")
    assert _without_copy_fields(image) == _without_copy_fields(reference)


def _our_locks(paths: list[Path]) -> set[tuple[str, str]]:
    """(file, byte range) of the POSIX locks this process holds on ``paths``."""
    inodes = {os.stat(path).st_ino: path.name for path in paths}
    held = set()
    with open("/proc/locks", encoding="ascii") as handle:
        for line in handle:
            fields = line.split()
            if fields[1] == "POSIX" and int(fields[4]) == os.getpid():
                inode = int(fields[5].split(":")[2])
                if inode in inodes:
                    held.add((inodes[inode], f"{fields[6]}-{fields[7]}"))
    return held


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs /proc/locks (Linux)")
def test_reading_the_store_files_keeps_sqlite_s_locks(gateway_open: Path, tmp_path: Path) -> None:
    """Closing any descriptor of a file drops the process's POSIX locks on it: the
    read must leave SQLite's own (its read mark, its SHARED lock) where they are."""
    _grow(gateway_open, 3000, checkpoint=False)
    files = [gateway_open, Path(f"{gateway_open}-shm")]
    provider = SqliteStorage(gateway_open)
    during: list[set[tuple[str, str]]] = []
    try:
        provider.connection.execute("SELECT count(*) FROM kv").fetchone()
        idle = _our_locks(files)

        def consume(chunks: Iterator[bytes | memoryview]) -> bytes:
            during.append(_our_locks(files))
            return _collect(chunks)

        _, snapshot = backup_snapshot.stream_snapshot(provider, tmp_path / "s.db", consume)
        assert snapshot.method == "direct" and snapshot.wal_pages
        after = _our_locks(files)
    finally:
        provider.close()
    read_marks = {f"{byte}-{byte}" for byte in range(123, 128)}  # WAL_READ_LOCK(0..4)
    assert idle and after == idle
    assert len(during) == 1 and during[0] > idle
    assert {span for name, span in during[0] - idle if name.endswith("-shm")} & read_marks


def _open_here(db: Path) -> int:
    """Descriptors of this process open on the store's database file."""
    real = os.path.realpath(db)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}") == real
    return count


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs /proc/locks (Linux)")
def test_the_kept_descriptors_close_once_sqlite_holds_no_lock(
    gateway_db: Path, tmp_path: Path
) -> None:
    """Kept while any connection of this process holds locks on the files; closed
    with the last store closed, so other processes no longer see the store open here."""
    holder = sqlite3.connect(gateway_db)
    holder.execute("SELECT count(*) FROM kv").fetchone()
    provider = SqliteStorage(gateway_db)
    try:
        _, snapshot = backup_snapshot.stream_snapshot(provider, tmp_path / "s.db", _collect)
        assert snapshot.method == "direct"
    finally:
        provider.close()
    assert _open_here(gateway_db) >= 2  # the holder's, and the kept one: its locks are live
    holder.close()
    SqliteStorage(gateway_db).close()
    assert _open_here(gateway_db) == 0


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


def test_a_failing_count_stops_the_read(gateway_db: Path, tmp_path: Path) -> None:
    before = set(threading.enumerate())
    provider = SqliteStorage(gateway_db)
    read: list[int] = []

    def consume(chunks: Iterator[bytes | memoryview]) -> None:
        for chunk in chunks:
            read.append(len(chunk))

    def inspect(conn: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    try:
        with pytest.raises(TriggerfishError, match="backup: disk I/O error"):
            backup_snapshot.stream_snapshot(
                provider, tmp_path / "copy.db", consume, inspect=inspect, chunk=4096
            )
        assert not provider.connection.in_transaction
    finally:
        provider.close()
    assert not _new_threads(before)


def test_a_failing_fallback_copy_is_the_error(
    gateway_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(threading.enumerate())
    _force_copy(monkeypatch)
    seen: list[int] = []

    def consume(chunks: Iterator[bytes | memoryview]) -> None:
        for chunk in chunks:
            seen.append(len(chunk))

    provider = SqliteStorage(gateway_db)
    target = tmp_path / "missing-dir" / "copy.db"  # SQLite cannot create it
    try:
        with pytest.raises(TriggerfishError, match=r"backup: .*unable to open"):
            backup_snapshot.stream_snapshot(provider, target, consume)
        assert not provider.connection.in_transaction and not seen
    finally:
        provider.close()
    assert not _new_threads(before)


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
            chunks = decompress_chunks(source, "zstd", frames, limit=len(content))
            assert b"".join(bytes(chunk) for chunk in chunks) == content
            assert source.sha.hexdigest() == sink.sha.hexdigest()


@pytest.mark.parametrize("sized", ["all", "none", "from the third"])
def test_frames_decompressed_into_a_file_land_at_their_offsets(tmp_path: Path, sized: str) -> None:
    """decompress_into: each frame written at its offset by its worker, or, from the first
    frame whose header does not give its size, in order."""
    content = _payload(1_000_000)
    step = 96 << 10
    pieces = [content[i : i + step] for i in range(0, len(content), step)]
    frames = []
    for number, piece in enumerate(pieces):
        say = sized == "all" or (sized == "from the third" and number < 2)
        params = zstandard.ZstdCompressionParameters(write_content_size=say)
        frames.append(zstandard.ZstdCompressor(compression_params=params).compress(piece))
    data = b"".join(frames)
    archive, target = tmp_path / "p.zst", tmp_path / "out.db"
    archive.write_bytes(data)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with archive.open("rb") as handle:
            source = LimitedHashingReader(handle, len(data))
            sizes = [len(f) for f in frames]
            steps = list(decompress_into(source, "zstd", sizes, fd, limit=len(content)))
    finally:
        os.close(fd)
    assert target.read_bytes() == content
    assert steps == [len(piece) for piece in pieces]
    assert source.sha.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_frame_whose_header_lies_about_its_size_is_a_verification_error(
    tmp_path: Path,
) -> None:
    small = zstandard.ZstdCompressor().compress(b"x" * 1000)
    lying = bytearray(small)
    lying[5] ^= 0x01  # the frame content size field (single-segment, 1 byte)
    archive = tmp_path / "p.zst"
    archive.write_bytes(bytes(lying))
    fd = os.open(tmp_path / "out.db", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with archive.open("rb") as handle, pytest.raises(VerificationError, match="zstd"):
            source = LimitedHashingReader(handle, len(lying))
            list(decompress_into(source, "zstd", [len(lying)], fd, limit=2000))
    finally:
        os.close(fd)


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
        source = LimitedHashingReader(handle, len(data))
        for _ in decompress_chunks(source, "zstd", done.frames, limit=len(content)):
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
