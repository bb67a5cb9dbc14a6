"""The uncompressed payload's overlapped write, and the allocator setting for big chunks."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from triggerfish_cli.backup_archive import HashingWriter, compress_stream


class Recording:
    """A sink that records what it got, on which thread, and whether a write was in flight."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.data = bytearray()
        self.threads: set[str] = set()
        self.writing = threading.Event()
        self.fail_at = fail_at
        self.writes = 0

    def write(self, data: Any) -> int:
        self.writing.set()
        try:
            self.threads.add(threading.current_thread().name)
            self.writes += 1
            if self.fail_at is not None and self.writes == self.fail_at:
                raise OSError(28, "No space left on device")
            self.data += bytes(data)
            return len(data)
        finally:
            self.writing.clear()

    def flush(self) -> None:
        pass


def test_none_writes_every_chunk_in_order_and_hashes_the_same_bytes() -> None:
    chunks = [bytes([n]) * (1000 + n) for n in range(50)]
    sink = Recording()
    writer = HashingWriter(sink)
    done = compress_stream(iter(chunks), writer, "none")
    expected = b"".join(chunks)
    assert bytes(sink.data) == expected
    assert done.read == writer.count == len(expected)
    assert writer.sha.hexdigest() == hashlib.sha256(expected).hexdigest()
    assert sink.threads and threading.current_thread().name not in sink.threads  # on its thread


def test_none_never_asks_for_the_next_chunk_while_a_write_is_in_flight() -> None:
    """A chunk may be a buffer its producer refills once the next one is asked for."""
    sink = Recording()
    in_flight: list[bool] = []

    def chunks() -> Iterator[memoryview]:
        buffer = bytearray(4096)
        for n in range(30):
            in_flight.append(sink.writing.is_set())
            buffer[:] = bytes([n]) * len(buffer)  # reused, as the snapshot reader may
            yield memoryview(buffer)

    compress_stream(chunks(), HashingWriter(sink), "none")
    assert in_flight == [False] * 30
    assert bytes(sink.data) == b"".join(bytes([n]) * 4096 for n in range(30))


def test_none_raises_the_writes_error_and_asks_for_nothing_more() -> None:
    asked: list[int] = []

    def chunks() -> Iterator[bytes]:
        for n in range(10):
            asked.append(n)
            yield b"x" * 100

    sink = Recording(fail_at=3)
    with pytest.raises(OSError, match="No space left"):
        compress_stream(chunks(), HashingWriter(sink), "none")
    assert asked == [0, 1, 2]
    assert len(sink.data) == 200


FAULTS = """
import collections, resource, sys, threading
from triggerfish_cli.big_buffers import reuse_big_buffers
if sys.argv[1] == "reuse":
    assert reuse_big_buffers()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
counted = []
def stream(chunks):  # as a backup's reader thread: a few 8 MiB chunks alive at once, in turn
    held = collections.deque()
    for _ in range(chunks):
        held.append(b"x" * (8 << 20))  # malloc, then every page filled, as a read fills it
        if len(held) > 3:
            held.popleft()
def streams():  # one stream, then the faults of the next one: its chunks' pages are fresh
    stream(8)
    before = faults()
    stream(40)
    counted.append(faults() - before)
thread = threading.Thread(target=streams)
thread.start()
thread.join()
print(counted[0])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_big_buffers_are_reused_instead_of_mapped_afresh() -> None:
    def faults(mode: str) -> int:
        done = subprocess.run(
            [sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True
        )
        return int(done.stdout)

    fresh, reused = faults("fresh"), faults("reuse")
    # 40 chunks in fresh mappings fault in page after page (thousands of faults);
    # in the kept heap they land on pages already there
    assert fresh > 1000, fresh
    assert reused < fresh / 20, (fresh, reused)
