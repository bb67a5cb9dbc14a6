"""The physical snapshot of a live SQLite store, streamed while it is taken.

The online backup API copies the store in ONE step (pages=-1): one WAL read
snapshot for the whole copy, so the gateway's writers are never blocked and
never restart it (a stepped backup restarts on every write and may never
finish). That step is one C call that only ends when the copy is done; to
hash or compress the copy at the same time, a second thread *follows* the
copy file as SQLite writes it.

That works because of how SQLite writes a fresh copy (journal off, a small
page cache): every page is copied once, in page order, and written out as
the cache spills, so the file grows in page order and no byte below its
current size changes again. The one exception is page 1, which SQLite
keeps in memory and finishes last (the header: change counter, schema
cookie, page count, library version).

Page 1 is therefore *predicted*: the snapshot's own page 1 (from the
database file, or its newest committed frame in the WAL) with the header
fields a fresh copy gets. The snapshot is pinned with a read transaction
held from before the prediction until the copy is done. When the finished
copy's page 1 is not the predicted one (a write landed between the two,
another SQLite version), the stream is taken again from the finished file:
slower, never wrong.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from triggerfish_cli.backup_archive import CHUNK, read_chunks
from triggerfish_cli.storage.sqlite import SqliteStorage, translate_error
from triggerfish_cli.threads import Worker

T = TypeVar("T")

#: Pages SQLite keeps of the copy before writing them out: small, so the
#: follower is never far behind the copy.
COPY_CACHE_PAGES = 100
WAL_HEADER = struct.Struct(">IIIIII8x")
WAL_FRAME_HEADER = struct.Struct(">IIII8x")
WAL_MAGICS = (0x377F0682, 0x377F0683)
#: How long the follower sleeps when it has caught up with the copy.
FOLLOW_POLL = 0.002

Consume = Callable[[Iterator[bytes | memoryview]], T]


@dataclass
class Snapshot:
    page_size: int
    page_count: int
    #: False when page 1 was mispredicted and the stream was taken again.
    streamed: bool


def stream_snapshot(
    provider: SqliteStorage,
    target: Path,
    consume: Consume[T],
    *,
    on_copied: Callable[[], None] | None = None,
    mapped: int | None = None,
) -> tuple[T, Snapshot]:
    """Copy the live store into ``target`` (a new, empty file) and stream its bytes.

    ``consume`` gets an iterator over the copy's bytes, from the first, and
    returns its result; it runs on a thread during the copy. The chunks it
    gets are only valid until it asks for the next one. It may be called a
    second time (on this thread, after the copy) with the finished file's
    bytes: it must then start its output afresh. ``on_copied`` runs once
    the copy is complete (the file is final), while ``consume`` may still
    be catching up; from then on this function reads the copy only through
    files it already has open, so ``on_copied`` may unlink ``target``.
    ``mapped``: chunks are memory maps of that size, kept valid while held
    (see :class:`Follower`), after the predicted first page.
    """
    origin = f"{provider.path}: backup"
    if provider.connection.in_transaction:
        raise RuntimeError("stream_snapshot: the source connection is in a transaction")
    done, abort = threading.Event(), threading.Event()
    worker: Worker | None = None
    follower: Follower | None = None
    try:
        with contextlib.ExitStack() as files:
            copy = files.enter_context(contextlib.closing(_open_copy(target)))
            reader = files.enter_context(target.open("rb"))
            # A read transaction pins the snapshot from here until the copy is done.
            with provider.read_snapshot("backup") as source:
                page_size = int(source.execute("PRAGMA page_size").fetchone()[0])
                page_count = int(source.execute("PRAGMA page_count").fetchone()[0])
                first = predict_first_page(provider.path, page_size, page_count)
                follower = Follower(os.dup(reader.fileno()), page_size, done, abort, mapped=mapped)
                chunks = _prepend(first, iter(follower))
                worker = Worker(lambda: consume(chunks))
                try:
                    source.backup(copy, pages=-1)
                finally:
                    done.set()
            page_count = int(copy.execute("PRAGMA page_count").fetchone()[0])
            streamed = os.pread(reader.fileno(), page_size, 0) == first
            if not streamed:
                abort.set()  # the stream so far is wrong: stop it, take it again below
            if on_copied is not None:
                on_copied()
            if streamed:
                files.close()  # the follower's own descriptor is the last: it frees the copy
                result = worker.result()
            else:
                with contextlib.suppress(_Aborted):
                    worker.result()
                reader.seek(0)
                result = consume(read_chunks(reader))
    except sqlite3.Error as exc:
        raise translate_error(exc, origin) from exc
    finally:
        abort.set()  # on any error: the follower stops where it is
        if worker is not None:
            with contextlib.suppress(BaseException):
                worker.result()
        if follower is not None:
            follower.close()  # when the consumer never started it
    return result, Snapshot(page_size, page_count, streamed)


def _prepend(first: bytes, rest: Iterator[memoryview]) -> Iterator[bytes | memoryview]:
    yield first
    yield from rest


def _open_copy(target: Path) -> sqlite3.Connection:
    """The copy needs neither a journal nor fsyncs of its own: the caller syncs it."""
    copy = sqlite3.connect(target, isolation_level=None)
    try:
        copy.execute("PRAGMA journal_mode=OFF")
        copy.execute("PRAGMA synchronous=OFF")
        copy.execute(f"PRAGMA cache_size={COPY_CACHE_PAGES}")
    except BaseException:
        copy.close()
        raise
    return copy


class _Aborted(Exception):
    """The follower was stopped: the copy failed, or its first page was mispredicted."""


class Follower:
    """The bytes of the file open as ``fd`` from ``start`` on, as a writer appends them.

    Iterating reads until ``done`` is set and the end is reached, then closes
    ``fd`` (on the consuming thread: the last close of a deleted copy frees
    its pages there). Only bytes below the file's current size are read: the
    kernel raises the size after the written bytes are in place.

    By default the chunks are views of one buffer, read into over and over
    (valid until the next one). With ``mapped``, each chunk is a read-only
    memory map of that part of the file, valid for as long as it is held,
    and of ``mapped`` bytes, the first ending at that multiple of the file:
    no copy at all, for a consumer that keeps chunks (a compression pool).
    """

    def __init__(
        self,
        fd: int,
        start: int,
        done: threading.Event,
        abort: threading.Event,
        *,
        mapped: int | None = None,
    ) -> None:
        self._fd: int | None = fd
        self._start = start
        self._done, self._abort = done, abort
        self._mapped = mapped

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __iter__(self) -> Iterator[memoryview]:
        fd = self._fd
        if fd is None:
            raise ValueError("the follower is closed")
        read = self._map if self._mapped else self._reader()
        step = self._mapped or CHUNK
        position = self._start
        try:
            while True:
                if self._abort.is_set():
                    raise _Aborted
                finished = self._done.is_set()
                size = os.fstat(fd).st_size
                while True:
                    end = min(size, (position // step + 1) * step)
                    if end == position or (end < (position // step + 1) * step and not finished):
                        break  # nothing more, or a part chunk while the copy goes on
                    chunk = read(fd, position, end - position)
                    yield chunk
                    position += len(chunk)
                if finished:
                    return
                self._done.wait(FOLLOW_POLL)
        finally:
            self.close()

    @staticmethod
    def _reader() -> Callable[[int, int, int], memoryview]:
        view = memoryview(bytearray(CHUNK))

        def read(fd: int, position: int, length: int) -> memoryview:
            count = os.preadv(fd, [view[:length]], position)
            if count <= 0:
                raise OSError(f"the copy ends early at byte {position}")
            return view[:count]

        return read

    @staticmethod
    def _map(fd: int, position: int, length: int) -> memoryview:
        import mmap

        base = position - position % mmap.ALLOCATIONGRANULARITY
        mapping = mmap.mmap(fd, length + position - base, offset=base, access=mmap.ACCESS_READ)
        return memoryview(mapping)[position - base :]


def predict_first_page(path: Path, page_size: int, page_count: int) -> bytes:
    """Page 1 of a fresh backup-API copy of the snapshot this process holds open.

    The snapshot's page 1 is the newest committed frame of page 1 in the WAL,
    else the database file's; the copy then gets a change counter of 1, a
    schema cookie of 1 (its own, 0, plus one), the page count and this
    SQLite's version number. A wrong guess costs time, not correctness:
    :func:`stream_snapshot` compares it with the finished copy.
    """
    try:
        with path.open("rb") as handle:
            page = bytearray(handle.read(page_size))
        page[len(page) :] = bytes(page_size - len(page))
        # SQLite keeps the WAL beside the real file, not beside a symlink to it
        framed = _wal_first_page(Path(f"{os.path.realpath(path)}-wal"), page_size)
        if framed is not None:
            page[:] = framed
    except OSError:
        return b""
    major, minor, patch = sqlite3.sqlite_version_info
    struct.pack_into(">II", page, 24, 1, page_count)
    struct.pack_into(">I", page, 40, 1)
    struct.pack_into(">II", page, 92, 1, major * 1_000_000 + minor * 1_000 + patch)
    return bytes(page)


def _wal_first_page(wal: Path, page_size: int) -> bytes | None:
    """The newest committed frame of page 1 in ``wal`` (None: none there)."""
    try:
        handle = wal.open("rb")
    except FileNotFoundError:
        return None
    with handle:
        fd = handle.fileno()
        header = os.pread(fd, WAL_HEADER.size, 0)
        if len(header) < WAL_HEADER.size:
            return None
        magic, _version, wal_page_size, _sequence, salt1, salt2 = WAL_HEADER.unpack(header)
        if magic not in WAL_MAGICS or wal_page_size != page_size:
            return None
        frame = WAL_FRAME_HEADER.size + page_size
        size = os.fstat(fd).st_size
        latest: int | None = None
        committed: int | None = None
        offset = WAL_HEADER.size
        while offset + frame <= size:
            page, commit, frame_salt1, frame_salt2 = WAL_FRAME_HEADER.unpack(
                os.pread(fd, WAL_FRAME_HEADER.size, offset)
            )
            if (frame_salt1, frame_salt2) != (salt1, salt2):
                break  # the frames of an earlier generation of the WAL
            if page == 1:
                latest = offset + WAL_FRAME_HEADER.size
            if commit and latest is not None:
                committed = latest
            offset += frame
        if committed is None:
            return None
        data = os.pread(fd, page_size, committed)
        return data if len(data) == page_size else None
