"""The payload decompressed: chunk by chunk, or written into a file (zstd frames in
parallel, each written at its offset by the thread that decompressed it).

Never beyond what the manifest says: every way stops as soon as the output
would pass ``limit`` (the manifest's ``content_bytes``) and raises
VerificationError then, before that output is handed on or written. A
decompression bomb (a small payload, hashed right, that expands far beyond
its claim) costs at most ``limit`` bytes of output and a fixed amount of
memory: a zstd frame whose header says it would pass the limit is refused
before it is decompressed; frames are held whole only up to :data:`POOLED`
bytes (ours are 8 MiB), bigger ones and those whose header gives no size are
streamed; gzip and unframed zstd give at most a chunk per step.
"""

from __future__ import annotations

import collections
import os
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from triggerfish_cli.backup.streams import CHUNK, LimitedHashingReader, ZstdFrames
from triggerfish_cli.errors import VerificationError
from triggerfish_cli.threads import block_signals, cpu_workers

#: A zstd frame is decompressed whole on the pool up to this size (compressed, and
#: what its header says it holds); a bigger one is streamed, in order.
POOLED = ZstdFrames.FRAME + (1 << 20)


def decompress_chunks(
    source: LimitedHashingReader, compression: str, frames: list[int] | None, *, limit: int
) -> Iterator[bytes | memoryview]:
    """The decompressed payload, chunk by chunk, never more than ``limit`` bytes in all:
    past it, or on corrupt data, VerificationError.

    A chunk is only valid until the next one is asked for.

    ``frames`` (zstd): the compressed size of each frame; they are then
    decompressed in parallel, in order.
    """
    if compression == "zstd" and frames:
        yield from _zstd_frames(source, frames, limit)
    elif compression == "zstd":
        yield from _zstd_stream(source, limit)
    elif compression == "gzip":
        yield from _capped(_Gunzip(source).read, limit, "gzip")
    else:
        yield from _capped(source.read, limit, "payload")


def decompress_into(
    source: LimitedHashingReader,
    compression: str,
    frames: list[int] | None,
    fd: int,
    *,
    limit: int,
) -> Iterator[int]:
    """The decompressed payload written into the file ``fd`` from its start; yields
    how many bytes each step wrote, in order. Nothing is written past ``limit``:
    a payload that holds more, or corrupt data, raises VerificationError.

    zstd frames are each written by the thread that decompressed it, at
    their offset: the kernel's work of giving the file new pages (on a VM
    most of the cost of writing a scratch store) is spread over the cores
    like the decompression.
    """
    if compression == "zstd" and frames:
        yield from _zstd_frames(source, frames, limit, fd)
        return
    offset = 0
    for chunk in decompress_chunks(source, compression, frames, limit=limit):
        _write_at(fd, chunk, offset)
        offset += len(chunk)
        yield len(chunk)


def too_big(what: str, limit: int) -> VerificationError:
    return VerificationError(
        f"{what}: the payload decompresses to more than the {limit} bytes the manifest says"
    )


def _capped(read: Callable[[int], bytes], limit: int, what: str) -> Iterator[bytes]:
    """``read(n)`` until it gives nothing, in chunks of at most CHUNK bytes; one byte
    past ``limit`` raises (that byte is never handed on)."""
    produced = 0
    while True:
        data = read(min(CHUNK, max(limit - produced + 1, 1)))
        if not data:
            return
        produced += len(data)
        if produced > limit:
            raise too_big(what, limit)
        yield data


def _zstd_stream(source: Any, limit: int) -> Iterator[bytes]:
    """zstd frames one after another (any number, sized or not), read as one stream."""
    import zstandard  # lazy: a C extension only backups and restores need

    reader = zstandard.ZstdDecompressor().stream_reader(
        source, read_size=CHUNK, read_across_frames=True
    )
    try:
        yield from _capped(reader.read, limit, "zstd")
    except zstandard.ZstdError as exc:
        raise VerificationError(f"zstd: {exc}") from None


class _Gunzip:
    """A gzip stream as a reader: ``read(n)`` gives at most ``n`` decompressed bytes
    (zlib's ``max_length``), whatever one compressed chunk expands to."""

    def __init__(self, source: LimitedHashingReader) -> None:
        self.source = source
        self.inflate = zlib.decompressobj(31)
        self.tail = b""

    def read(self, size: int) -> bytes:
        inflate = self.inflate
        try:
            while not inflate.eof:
                if not self.tail:
                    self.tail = self.source.read(CHUNK)
                    if not self.tail:
                        left = inflate.decompress(b"", size)  # what zlib still holds
                        if left:
                            return left
                        raise VerificationError("gzip: the compressed stream ends early")
                out = inflate.decompress(self.tail, size)
                self.tail = inflate.unconsumed_tail
                if out:
                    return out
        except zlib.error as exc:
            raise VerificationError(f"gzip: {exc}") from None
        if inflate.unused_data or self.source.read(1):
            raise VerificationError("gzip: more data after the end of the compressed stream")
        return b""


def _write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class _Part:
    """The next ``left`` bytes of ``source`` as a reader (a frame streamed as it is read)."""

    def __init__(self, source: LimitedHashingReader, left: int) -> None:
        self.source = source
        self.left = left

    def read(self, size: int = -1) -> bytes:
        wanted = self.left if size is None or size < 0 else min(size, self.left)
        data = self.source.read(wanted)
        self.left -= len(data)
        return data


def _zstd_frames(
    source: LimitedHashingReader, sizes: list[int], limit: int, fd: int | None = None
) -> Iterator[Any]:
    """Each frame of ``sizes`` read in turn (hashed), decompressed on a pool, in order;
    never more than ``limit`` bytes in all.

    Without ``fd``: the frames' contents (each valid until the next is asked
    for). With it: each frame is written into ``fd`` at its offset by the
    thread that decompressed it, and what is yielded is its length. A frame
    whose header says it holds more than the rest of ``limit`` is refused
    before it is decompressed; one bigger than :data:`POOLED`, or whose
    header does not say, is streamed here once those before it landed. Frames
    are decompressed into a few buffers used over and over: fresh 8 MiB
    outputs would cost a page fault per 4 KiB.
    """
    import zstandard  # lazy: a C extension only backups and restores need

    local = threading.local()
    free: list[bytearray] = []

    def decompress(data: bytes, size: int, buffer: bytearray, offset: int) -> tuple[bytearray, int]:
        context = getattr(local, "context", None)
        if context is None:
            context = local.context = zstandard.ZstdDecompressor()
        if len(buffer) < size:
            buffer = bytearray(size)
        try:
            _frame_into(context, data, memoryview(buffer), size)
        except zstandard.ZstdError as exc:
            raise VerificationError(f"zstd: {exc}") from None
        if fd is not None:
            _write_at(fd, memoryview(buffer)[:size], offset)
        return buffer, size

    threads = cpu_workers()
    pending: collections.deque[Future[tuple[bytearray, int]]] = collections.deque()
    total = 0  # the bytes of the frames taken so far: where the next one goes

    def landed(future: Future[tuple[bytearray, int]]) -> Any:
        buffer, count = future.result()
        free.append(buffer)
        return count if fd is not None else memoryview(buffer)[:count]

    with ThreadPoolExecutor(
        threads, thread_name_prefix="backup-unzstd", initializer=block_signals
    ) as pool:
        try:
            for size in sizes:
                data, content = b"", -1
                if size <= POOLED:
                    data = source.read(size)
                    if len(data) != size:
                        raise VerificationError("zstd: the payload ends inside a frame")
                    content = _content_size(data)
                if content > limit - total:
                    raise too_big("zstd", limit)  # its header says so: not decompressed
                if 0 <= content <= POOLED:
                    buffer = free.pop() if free else bytearray()
                    pending.append(pool.submit(decompress, data, content, buffer, total))
                    total += content
                    while pending and (pending[0].done() or len(pending) > 2 * threads):
                        yield landed(pending.popleft())
                    continue
                while pending:  # those before it land first: it follows them, in order
                    yield landed(pending.popleft())
                part = _Part(source, size) if size > POOLED else data
                streamed = 0
                for chunk in _zstd_stream(part, limit - total):
                    if fd is not None:
                        _write_at(fd, chunk, total + streamed)
                    else:
                        yield chunk
                    streamed += len(chunk)
                total += streamed
                if fd is not None:
                    yield streamed
            while pending:
                yield landed(pending.popleft())
        finally:
            for future in pending:
                future.cancel()


def _content_size(data: bytes) -> int:
    """The content size a zstd frame's header gives (-1: none, or not a frame: the
    stream decompression then says what is wrong with it)."""
    import zstandard  # lazy: a C extension only backups and restores need

    try:
        return int(zstandard.frame_content_size(data))
    except zstandard.ZstdError:
        return -1


def _frame_into(context: Any, data: bytes, view: memoryview, size: int) -> None:
    """One frame decompressed into ``view``: exactly ``size`` bytes, else VerificationError."""
    filled = 0
    with context.stream_reader(data, read_across_frames=False) as reader:
        while filled < size:
            count = reader.readinto(view[filled:size])
            if not count:
                break
            filled += count
        if filled != size or reader.read(1):  # short, or more after it
            raise VerificationError(
                f"zstd: a frame holds other than the {size} bytes its header says"
            )
