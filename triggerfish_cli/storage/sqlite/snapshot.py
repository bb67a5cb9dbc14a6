"""The physical snapshot of a live SQLite store, streamed as it is read.

The store's own pages, read directly: inside one read transaction on the
store (which pins a WAL snapshot: it never blocks the gateway's writers),
pages 1..N of that snapshot are read from the database file and the -wal
file, in page order, in large chunks, and handed to the consumer; the keys
are counted (``inspect``) on the same connection, in the same transaction,
meanwhile. No copy file, and the archive holds exactly the pages SQLite
itself reads in that snapshot, page 1 included.

Why the pages read are the snapshot's (SQLite's wal.c: walTryBeginRead,
walCheckpoint, walRestartLog, walRestartHdr):

1. The wal-index header (in ``<db>-shm``, both copies equal, its checksum
   right) is read before the transaction begins (H1) and twice after its
   first read took the snapshot, with ``nBackfill`` (B) in between (H2, H3).
   Every commit, WAL restart and recovery rewrites that header (its change
   counter goes up), so H1 == H2 == H3 means none happened in between: the
   snapshot is that header (its mxFrame M, its page count N), and B is a
   value nBackfill had while that header was live.
2. SQLite reads from the database file alone (read slot 0) only when
   nBackfill == M when it begins; nBackfill only grows until a restart,
   which changes the header. So B < M means our connection holds a read
   slot > 0, which keeps any writer or checkpointer from restarting the
   WAL until the transaction ends: frames 1..M stay in the -wal file as
   they are (a writer never overwrites a committed frame in place).
3. B == M: every page of the snapshot is in the database file, and stays:
   with slot 0 no checkpoint may backfill at all; with a slot > 0 its mark
   (<= M) caps any backfill at frames already backfilled.
4. B < M: each page is its newest frame <= M (the WAL's salts checked
   against the header's, frame by frame), and every other page comes from
   the database file: a checkpoint only writes pages that have a frame <=
   its limit (<= our mark <= M), and we read all of those from the WAL.

Anything unusual (not WAL mode, no -shm, a header that will not hold still
after a few tries, sizes that disagree, a short read) falls back to the
online backup API in one step into a scratch copy, which is then streamed:
slower, never wrong.

The descriptors of the database and -shm files are kept open while SQLite
holds locks on them (storage/kept_files.py: closing one would drop them);
the -wal, on which SQLite takes no lock, is opened and closed as usual.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from triggerfish_cli.backup.streams import CHUNK, read_chunks
from triggerfish_cli.storage.kept_files import kept
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.sql import MMAP_SIZE, translate_error
from triggerfish_cli.storage.sqlite.wal_index import WAL_VERSION
from triggerfish_cli.storage.sqlite.wal_index import WalIndex as _Index
from triggerfish_cli.storage.sqlite.wal_index import (
    read_index_and_backfill as _read_index_and_backfill,
)
from triggerfish_cli.threads import Worker

T = TypeVar("T")

Consume = Callable[[Iterator[bytes | memoryview]], T]
Inspect = Callable[[sqlite3.Connection], Any]

#: Pages SQLite keeps of a fallback copy before writing them out.
COPY_CACHE_PAGES = 100
#: Tries at a snapshot whose wal-index header holds still (a commit landed meanwhile).
ATTEMPTS = 8

WAL_HEADER = struct.Struct(">III")  # magic, format version, page size (salts at 16..24)
WAL_HEADER_SIZE = 32
WAL_FRAME_HEADER = struct.Struct(">II8s")  # page, db size after a commit, salts
WAL_FRAME_HEADER_SIZE = 24
WAL_MAGICS = (0x377F0682, 0x377F0683)
#: Frames read at a time while the WAL is scanned.
SCAN_FRAMES = 256
#: SQLite never writes the page holding this byte offset (its lock bytes).
PENDING_BYTE = 0x40000000


@dataclass
class Snapshot:
    page_size: int
    page_count: int
    #: "direct" (the store's own pages) or "copy" (the backup API, the fallback).
    method: str
    #: False when the consumer was called a second time (the direct read failed part way).
    streamed: bool = True
    #: Pages of the snapshot read from the WAL (direct reads).
    wal_pages: int = 0
    #: What ``inspect`` returned on the snapshot.
    inspected: Any = field(default=None, repr=False)


def stream_snapshot(
    provider: SqliteStorage,
    scratch: Path,
    consume: Consume[T],
    *,
    inspect: Inspect | None = None,
    chunk: int = CHUNK,
) -> tuple[T, Snapshot]:
    """Stream a consistent snapshot of the live store, byte for byte, through ``consume``.

    ``consume`` gets an iterator over the snapshot's bytes and returns its
    result; it may run on another thread. The chunks (of ``chunk``
    bytes, the last one shorter) stay valid for as long as they are held.
    It may be called a second time with the bytes of a fallback copy when
    the direct read fails part way: it must then start its output afresh.
    ``inspect`` runs meanwhile on a connection that sees the very same
    snapshot (its result is :attr:`Snapshot.inspected`). ``scratch``: a new
    file for the fallback copy, in a directory of the caller's; it is
    removed once read.
    """
    origin = f"{provider.path}: backup"
    if provider.connection.in_transaction:
        raise RuntimeError("stream_snapshot: the source connection is in a transaction")
    try:
        done = _direct(provider, consume, inspect, chunk)
        if isinstance(done, tuple):
            return done
        return _copied(provider, scratch, consume, inspect, streamed=done)
    except sqlite3.Error as exc:
        raise translate_error(exc, origin) from exc


# -- the direct read --------------------------------------------------------------------


class _Unusual(Exception):
    """Something the direct read does not handle: take the backup API's copy instead."""


class _Stopped(Exception):
    """The direct read was told to stop (``inspect`` failed, or Ctrl-C)."""


@dataclass
class _Plan:
    page_size: int
    page_count: int
    db: int
    #: Pages of the database file (whole pages, from its size once pinned).
    db_pages: int
    #: Page number -> offset of its newest frame <= mxFrame in the WAL, in page order.
    frames: list[tuple[int, int]]
    #: The WAL, open while its frames are read (None: no page is read from it).
    wal: int | None = None

    def close(self) -> None:
        wal, self.wal = self.wal, None
        if wal is not None:
            os.close(wal)  # SQLite takes no lock on the WAL: this descriptor may close


def _direct(
    provider: SqliteStorage, consume: Consume[T], inspect: Inspect | None, chunk: int
) -> tuple[T, Snapshot] | bool:
    """The snapshot read from the store's files; True: not possible here (take a
    copy); False: it failed part way (take a copy, the consumer starts again)."""
    files = _store_files(provider)
    if files is None:
        return True
    db, shm, wal_path = files
    for _ in range(ATTEMPTS):
        before = _read_index(shm)
        if before is None:
            continue  # torn by a write (or no valid index at all: the tries run out)
        with provider.read_snapshot("backup") as conn:
            try:
                plan = _pin(conn, before, db, shm, wal_path)
            except (_Unusual, OSError):
                return True
            if plan is None:
                continue  # a commit between the header reads: try again
            try:
                result, inspected = _run(conn, plan, consume, inspect, chunk)
            except _Unusual:
                return False
            finally:
                plan.close()
        wal_pages = len(plan.frames)
        return result, Snapshot(
            plan.page_size, plan.page_count, "direct", True, wal_pages, inspected
        )
    return True


def _store_files(provider: SqliteStorage) -> tuple[int, int, str] | None:
    """Descriptors of the database and -shm files (storage/kept_files.py), and the WAL's path."""
    if provider.read_only:
        return None  # a read-only -shm: SQLite may keep its index in private memory
    base = os.path.realpath(provider.path)  # SQLite's companions sit beside the real file
    shm = base + "-shm"
    if not os.access(shm, os.W_OK):
        return None
    try:
        return kept(base), kept(shm), base + "-wal"
    except OSError:
        return None


def _read_index(shm: int) -> _Index | None:
    """The wal-index header from the -shm file (None: not a valid one)."""
    index, _ = _read_index_and_backfill(shm)
    return index


def _pin(
    conn: sqlite3.Connection, before: _Index, db: int, shm: int, wal_path: str
) -> _Plan | None:
    """Take the snapshot and find where each of its pages is (None: try again)."""
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the snapshot is taken here
    index, backfilled = _read_index_and_backfill(shm)
    again = _read_index(shm)
    if index is None or again is None or index.raw != before.raw or again.raw != before.raw:
        return None
    if backfilled > index.max_frame:
        return None  # a WAL restart half done (its header is written before nBackfill)
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    if mode != "wal":
        raise _Unusual(f"journal mode {mode}")
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    page_count = int(conn.execute("PRAGMA page_count").fetchone()[0])
    # An empty WAL (mxFrame 0) may have an index with no page size and no page
    # count yet (a fresh -shm): then the snapshot is the database file alone.
    if index.max_frame and (index.page_size, index.pages) != (page_size, page_count):
        raise _Unusual(
            f"{page_count} pages of {page_size} bytes, the wal-index says "
            f"{index.pages} of {index.page_size}"
        )
    plan = _Plan(page_size, page_count, db, os.fstat(db).st_size // page_size, [])
    try:
        if backfilled < index.max_frame:
            plan.wal = os.open(wal_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            plan.frames = sorted(_wal_frames(plan.wal, index, page_size, page_count).items())
        if page_count > plan.db_pages:  # pages past the file's end: each must be in the WAL
            in_wal = {page for page, _ in plan.frames}
            lock_page = PENDING_BYTE // page_size + 1  # never written: zeros, as in a copy
            for page in range(plan.db_pages + 1, page_count + 1):
                if page not in in_wal and page != lock_page:
                    raise _Unusual("the database file is shorter than the snapshot")
    except BaseException:
        plan.close()
        raise
    return plan


def _wal_frames(wal: int, index: _Index, page_size: int, page_count: int) -> dict[int, int]:
    """Page number -> offset of the page's newest frame among frames 1..mxFrame."""
    try:
        head = os.pread(wal, WAL_HEADER_SIZE, 0)
        if len(head) < WAL_HEADER_SIZE:
            raise _Unusual("the WAL header is short")
        magic, version, size = WAL_HEADER.unpack_from(head)
        if magic not in WAL_MAGICS or version != WAL_VERSION or size != page_size:
            raise _Unusual("not the WAL of this snapshot")
        if head[16:24] != index.salt:
            raise _Unusual("the WAL's salts are not the wal-index's")
        frame = WAL_FRAME_HEADER_SIZE + page_size
        newest: dict[int, int] = {}
        number, last = 1, index.max_frame
        commit = 0
        while number <= last:
            count = min(SCAN_FRAMES, last - number + 1)
            start = WAL_HEADER_SIZE + (number - 1) * frame
            block = os.pread(wal, count * frame, start)
            if len(block) < count * frame:
                raise _Unusual("the WAL is shorter than its index")
            for i in range(count):
                page, commit, salt = WAL_FRAME_HEADER.unpack_from(block, i * frame)
                if salt != index.salt or page == 0:
                    raise _Unusual("a frame of another generation of the WAL")
                if page <= page_count:
                    newest[page] = start + i * frame + WAL_FRAME_HEADER_SIZE
            number += count
    except OSError as exc:
        raise _Unusual(f"reading the WAL: {exc}") from exc
    if commit != page_count:
        raise _Unusual("the last frame is not the commit of this snapshot")
    return newest


def _run(
    conn: sqlite3.Connection,
    plan: _Plan,
    consume: Consume[T],
    inspect: Inspect | None,
    chunk: int,
) -> tuple[T, Any]:
    """``consume`` the pages on a worker while ``inspect`` reads the snapshot here."""
    stop = threading.Event()
    worker = Worker(lambda: consume(_pages(plan, chunk, stop)))
    try:
        inspected = inspect(conn) if inspect is not None else None
        return worker.result(), inspected
    finally:
        stop.set()  # when something failed here: the reader stops at its next chunk
        with contextlib.suppress(BaseException):
            worker.result()


def _pages(plan: _Plan, chunk: int, stop: threading.Event) -> Iterator[bytes | memoryview]:
    """Pages 1..N of the plan, ``chunk`` bytes at a time, each chunk a buffer of its own."""
    size = plan.page_size
    per = max(1, chunk // size)
    frames, next_frame = plan.frames, 0
    file_end = plan.db_pages * size
    for first in range(1, plan.page_count + 1, per):
        if stop.is_set():
            raise _Stopped
        count = min(per, plan.page_count - first + 1)
        offset, length = (first - 1) * size, count * size
        patches = []
        while next_frame < len(frames) and frames[next_frame][0] < first + count:
            patches.append(frames[next_frame])
            next_frame += 1
        from_file = max(0, min(length, file_end - offset))
        try:
            if not patches and from_file == length:
                data = os.pread(plan.db, length, offset)
                if len(data) != length:
                    raise _Unusual(f"the database file ends early at byte {offset + len(data)}")
                yield data
                continue
            buffer = memoryview(bytearray(length))
            if from_file:
                _read_exactly(plan.db, buffer[:from_file], offset)
            for page, at in patches:
                start = (page - first) * size
                assert plan.wal is not None
                _read_exactly(plan.wal, buffer[start : start + size], at)
        except OSError as exc:
            raise _Unusual(f"reading the store: {exc}") from exc
        yield buffer


def _read_exactly(fd: int, into: memoryview, offset: int) -> None:
    if hasattr(os, "preadv"):
        count = os.preadv(fd, [into], offset)
    else:  # pragma: no cover - macOS before Python 3.11 has no preadv
        data = os.pread(fd, len(into), offset)
        into[: len(data)] = data
        count = len(data)
    if count != len(into):
        raise _Unusual(f"a short read at byte {offset + count}")


# -- the fallback: the backup API into a scratch copy ----------------------------------


def _copied(
    provider: SqliteStorage,
    target: Path,
    consume: Consume[T],
    inspect: Inspect | None,
    *,
    streamed: bool,
) -> tuple[T, Snapshot]:
    """The online backup API in ONE step (pages=-1) into ``target``, then streamed.

    One step holds one WAL read snapshot for the whole copy: the gateway's
    writers are never blocked and never restart it (a stepped backup
    restarts on every write and may never finish).
    """
    with contextlib.closing(_open_copy(target)) as copy:
        with provider.read_snapshot("backup") as source:
            page_size = int(source.execute("PRAGMA page_size").fetchone()[0])
            source.backup(copy, pages=-1)
        page_count = int(copy.execute("PRAGMA page_count").fetchone()[0])
    counting: Worker | None = None
    try:
        with target.open("rb") as reader:
            if inspect is not None:
                checker = _open_finished(target)
                counting = Worker(lambda: _inspect_closing(checker, inspect))
            target.unlink()  # its pages are freed once both readers are done
            result = consume(read_chunks(reader, CHUNK))
    finally:
        if counting is not None:  # never leave it reading a file about to go
            with contextlib.suppress(BaseException):
                counting.result()
    inspected = counting.result() if counting is not None else None
    return result, Snapshot(page_size, page_count, "copy", streamed, 0, inspected)


def _open_copy(target: Path) -> sqlite3.Connection:
    """The copy needs neither a journal nor fsyncs of its own: it is read once, then gone."""
    copy = sqlite3.connect(target, isolation_level=None)
    try:
        copy.execute("PRAGMA journal_mode=OFF")
        copy.execute("PRAGMA synchronous=OFF")
        copy.execute(f"PRAGMA cache_size={COPY_CACHE_PAGES}")
    except BaseException:
        copy.close()
        raise
    return copy


def _open_finished(target: Path) -> sqlite3.Connection:
    """Read-only and immutable: no -wal/-shm beside it (its header says WAL, as its source)."""
    uri = f"file:{quote(str(target.absolute()))}?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
    return conn


def _inspect_closing(conn: sqlite3.Connection, inspect: Inspect) -> Any:
    with contextlib.closing(conn):
        return inspect(conn)


@contextlib.contextmanager
def copy_rows(path: Path) -> Iterator[Iterator[tuple[Any, Any]]]:
    """Every ``(key, value)`` of a snapshot file (a physical backup's), in key order,
    opened read-only and immutable: nothing else has it."""
    uri = f"file:{quote(str(path.absolute()))}?mode=ro&immutable=1"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        yield iter(conn.execute("SELECT key, value FROM kv ORDER BY key"))
