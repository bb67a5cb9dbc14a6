"""The payload's streams: hashed and counted writes, bounded hashed reads, and
compression (zstd in independent frames compressed in parallel, gzip, none)."""

from __future__ import annotations

import collections
import hashlib
import threading
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

from triggerfish_cli.threads import block_signals

CHUNK = 1 << 20
DEFAULT_ZSTD_LEVEL = 1
DEFAULT_GZIP_LEVEL = 6


def read_chunks(reader: Any, size: int = CHUNK) -> Iterator[bytes]:
    """``reader.read(size)`` until it returns nothing."""
    while True:
        data = reader.read(size)
        if not data:
            return
        yield data


class HashingWriter:
    """A file-like sink that hashes and counts what passes through it."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.count = 0

    def write(self, data: bytes | memoryview) -> int:
        self.sha.update(data)
        self.sink.write(data)
        self.count += len(data)
        return len(data)

    def flush(self) -> None:
        self.sink.flush()

    def write_all(self, chunks: Iterable[bytes | memoryview]) -> int:
        """:meth:`write` each chunk, the write on a thread while the chunk is hashed here;
        the bytes written.

        SHA-256 and the write each take about as long as the other (about 0.4 s
        a 700 MiB store here) and both let go of the GIL: side by side, an
        uncompressed payload costs the longer of the two, not their sum. Each
        write ends before the next chunk is asked for (its producer may then
        reuse it).
        """
        total = 0
        with ThreadPoolExecutor(
            1, thread_name_prefix="backup-write", initializer=block_signals
        ) as pool:
            for chunk in chunks:
                written = pool.submit(self.sink.write, chunk)
                try:
                    self.sha.update(chunk)
                finally:
                    written.result()  # the write's own error, if it failed
                self.count += len(chunk)
                total += len(chunk)
        return total


class LimitedHashingReader:
    """Reads at most ``limit`` bytes of ``source``, hashing them."""

    def __init__(self, source: IO[bytes], limit: int) -> None:
        self.source = source
        self.left = limit
        self.sha = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        wanted = self.left if size is None or size < 0 else min(size, self.left)
        data = self.source.read(wanted)
        self.left -= len(data)
        self.sha.update(data)
        return data

    def drain(self) -> None:
        for _ in read_chunks(self):
            pass


@dataclass
class Compressed:
    #: The bytes read (the payload's content size).
    read: int
    #: zstd: the compressed size of each frame (:attr:`Manifest.frames`).
    frames: list[int] | None = None


def compress_stream(
    chunks: Iterable[bytes | memoryview],
    sink: HashingWriter,
    compression: str,
    *,
    level: int | None = None,
    threads: int = 0,
    stable: bool = False,
) -> Compressed:
    """Compress ``chunks`` into ``sink``.

    The chunks may be views of a buffer their producer reuses: each is
    consumed (copied or compressed) before the next is asked for. With
    ``stable``, a chunk stays valid for as long as it is held: zstd then
    compresses a chunk of exactly one frame where it is, without a copy.
    """
    read = 0
    if compression == "zstd":
        sizes: list[int] = []
        with ZstdFrames(DEFAULT_ZSTD_LEVEL if level is None else level, threads) as frames:
            for chunk in chunks:
                read += len(chunk)
                for frame in frames.add(chunk, stable=stable):
                    sizes.append(sink.write(frame))
            for frame in frames.finish():
                sizes.append(sink.write(frame))
        return Compressed(read, sizes)
    if compression == "gzip":
        gzip_level = DEFAULT_GZIP_LEVEL if level is None else level
        deflate = zlib.compressobj(gzip_level, zlib.DEFLATED, 31)
        for chunk in chunks:
            read += len(chunk)
            sink.write(deflate.compress(chunk))
        sink.write(deflate.flush())
        return Compressed(read)
    return Compressed(sink.write_all(chunks))


class ZstdFrames:
    """zstd compression as a series of independent frames of ``FRAME`` bytes each.

    The frames are compressed ``threads`` at a time on a pool (zstd releases
    the GIL) and handed back in order; concatenated, they are one valid zstd
    stream (``zstd -d`` and every decoder read across frames), each with its
    content size and checksum. One-shot frames on a pool cost a third less
    CPU than libzstd's own multi-threaded streaming mode fed 1 MiB writes,
    at the same ratio (the level-1 window is far smaller than a frame).
    The input is gathered in a few buffers used over and over: fresh 8 MiB
    blocks would cost a page fault per 4 KiB.
    """

    FRAME = 8 << 20

    def __init__(self, level: int, threads: int) -> None:
        import zstandard  # lazy: a C extension only backups and restores need

        self._local = threading.local()
        self._level = level
        self._zstd = zstandard
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        if self._threads > 1:
            self._pool = ThreadPoolExecutor(
                self._threads, thread_name_prefix="backup-zstd", initializer=block_signals
            )
        #: Frames on the pool, oldest first, each with the buffer it reads.
        self._pending: collections.deque[tuple[Future[bytes], bytearray | None]] = (
            collections.deque()
        )
        self._free: list[bytearray] = []
        self._buffer = bytearray(self.FRAME)
        self._filled = 0
        self._frames = 0

    def __enter__(self) -> ZstdFrames:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            for future, _ in self._pending:
                future.cancel()
            self._pool.shutdown(wait=True)

    def _compress(self, block: memoryview) -> bytes:
        compressor = getattr(self._local, "compressor", None)
        if compressor is None:
            compressor = self._zstd.ZstdCompressor(level=self._level, write_checksum=True)
            self._local.compressor = compressor
        return bytes(compressor.compress(block))

    def add(self, chunk: bytes | memoryview, *, stable: bool = False) -> Iterator[bytes]:
        """Take ``chunk``; the frames finished by now, in order.

        ``stable``: the chunk stays valid while held, so one of exactly a
        frame is compressed where it is.
        """
        view = memoryview(chunk).cast("B")
        if stable and not self._filled and len(view) == self.FRAME and self._pool is not None:
            yield from self._submit(view)
            return
        while view:
            room = self.FRAME - self._filled
            taken = view[:room]
            self._buffer[self._filled : self._filled + len(taken)] = taken
            self._filled += len(taken)
            view = view[room:]
            if self._filled == self.FRAME:
                yield from self._submit()

    def finish(self) -> Iterator[bytes]:
        if self._filled or not self._frames:  # an empty stream is one empty frame
            yield from self._submit()
        while self._pending:
            yield self._collect()

    def _submit(self, outside: memoryview | None = None) -> Iterator[bytes]:
        """Compress the gathered block, or ``outside`` (a whole frame held elsewhere)."""
        self._frames += 1
        block = None if outside is not None else self._buffer
        data = outside if outside is not None else memoryview(self._buffer)[: self._filled]
        if self._pool is None:
            self._filled = 0
            yield self._compress(data)
            return
        self._pending.append((self._pool.submit(self._compress, data), block))
        while self._pending and (
            self._pending[0][0].done() or len(self._pending) > 2 * self._threads
        ):
            yield self._collect()
        if block is not None:
            self._buffer = self._free.pop() if self._free else bytearray(self.FRAME)
            self._filled = 0

    def _collect(self) -> bytes:
        future, block = self._pending.popleft()
        frame = future.result()
        if block is not None:
            self._free.append(block)
        return frame
