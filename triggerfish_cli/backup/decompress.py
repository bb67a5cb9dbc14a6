"""The payload decompressed: chunk by chunk, or written into a file (zstd frames in
parallel, each written at its offset by the thread that decompressed it)."""

from __future__ import annotations

import collections
import os
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from triggerfish_cli.backup.streams import CHUNK, LimitedHashingReader, read_chunks
from triggerfish_cli.errors import VerificationError
from triggerfish_cli.threads import block_signals, cpu_workers


def decompress_chunks(
    source: LimitedHashingReader, compression: str, frames: list[int] | None = None
) -> Iterator[bytes | memoryview]:
    """The decompressed payload, chunk by chunk. Corrupt data raises VerificationError.

    A chunk is only valid until the next one is asked for.

    ``frames`` (zstd): the compressed size of each frame; they are then
    decompressed in parallel, in order.
    """
    if compression == "zstd" and frames:
        yield from _zstd_frames(source, frames)
    elif compression == "zstd":
        import zstandard  # lazy: a C extension only backups and restores need

        raw: Any = source
        reader = zstandard.ZstdDecompressor().stream_reader(
            raw, read_size=CHUNK, read_across_frames=True
        )
        try:
            yield from read_chunks(reader)
        except zstandard.ZstdError as exc:
            raise VerificationError(f"zstd: {exc}") from None
    elif compression == "gzip":
        inflate = zlib.decompressobj(31)
        try:
            for data in read_chunks(source):
                out = inflate.decompress(data)
                if out:
                    yield out
            tail = inflate.flush()
            if tail:
                yield tail
        except zlib.error as exc:
            raise VerificationError(f"gzip: {exc}") from None
        if not inflate.eof:
            raise VerificationError("gzip: the compressed stream ends early")
    else:
        yield from read_chunks(source)


def decompress_into(
    source: LimitedHashingReader, compression: str, frames: list[int] | None, fd: int
) -> Iterator[int]:
    """The decompressed payload written into the file ``fd`` from its start; yields
    how many bytes each step wrote, in order. Corrupt data raises VerificationError.

    zstd frames are each written by the thread that decompressed them, at
    their offset: the kernel's work of giving the file new pages (on a VM
    most of the cost of writing a scratch store) is spread over the cores
    like the decompression.
    """
    if compression == "zstd" and frames:
        yield from _zstd_frames(source, frames, fd)
        return
    offset = 0
    for chunk in decompress_chunks(source, compression, frames):
        _write_at(fd, chunk, offset)
        offset += len(chunk)
        yield len(chunk)


def _write_at(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _zstd_frames(
    source: LimitedHashingReader, sizes: list[int], fd: int | None = None
) -> Iterator[Any]:
    """Each frame of ``sizes`` read in turn (hashed), decompressed on a pool, in order.

    Without ``fd``: the frames' contents (each valid until the next is asked
    for). With it: each frame is written into ``fd`` at its offset by the
    thread that decompressed it, and what is yielded is its length (a frame
    whose header does not give its size, and every one after it, is written
    here, in order). Frames are decompressed into a few buffers used over and
    over: fresh 8 MiB outputs would cost a page fault per 4 KiB.
    """
    import zstandard  # lazy: a C extension only backups and restores need

    local = threading.local()
    free: list[bytearray] = []

    def decompress(
        data: bytes, size: int, buffer: bytearray, offset: int | None
    ) -> tuple[bytearray, int]:
        context = getattr(local, "context", None)
        if context is None:
            context = local.context = zstandard.ZstdDecompressor()
        try:
            if size < 0:  # not in the header: as a stream, to its end
                stream = context.decompressobj()
                buffer = bytearray(stream.decompress(data))
                size = len(buffer)
                if not stream.eof or stream.unused_data:
                    raise VerificationError("zstd: a frame ends early, or more follows it")
            else:
                if len(buffer) < size:
                    buffer = bytearray(size)
                _frame_into(context, data, memoryview(buffer), size)
        except zstandard.ZstdError as exc:
            raise VerificationError(f"zstd: {exc}") from None
        if fd is not None and offset is not None:
            _write_at(fd, memoryview(buffer)[:size], offset)
        return buffer, size

    threads = cpu_workers()
    pending: collections.deque[Future[tuple[bytearray, int]]] = collections.deque()
    #: Where the next frame goes in fd; None once a frame did not say its size.
    offset: int | None = 0
    written = 0  # bytes in fd so far (frames written here, in order)

    def landed(future: Future[tuple[bytearray, int]]) -> Any:
        nonlocal written
        buffer, count = future.result()
        free.append(buffer)
        if fd is None:
            return memoryview(buffer)[:count]
        if offset is None:
            _write_at(fd, memoryview(buffer)[:count], written)
        written += count
        return count

    with ThreadPoolExecutor(
        threads, thread_name_prefix="backup-unzstd", initializer=block_signals
    ) as pool:
        try:
            for size in sizes:
                data = source.read(size)
                if len(data) != size:
                    raise VerificationError("zstd: the payload ends inside a frame")
                content, at = _content_size(data), None
                if fd is not None and offset is not None:
                    if content < 0:
                        while pending:  # from here on every frame is written in order
                            yield landed(pending.popleft())
                        offset = None
                    else:
                        at, offset = offset, offset + content
                buffer = free.pop() if free else bytearray()
                pending.append(pool.submit(decompress, data, content, buffer, at))
                while pending and (pending[0].done() or len(pending) > 2 * threads):
                    yield landed(pending.popleft())
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
