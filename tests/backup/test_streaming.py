"""How an archive's bytes reach the disk: the uncompressed payload's overlapped write,
the allocator setting for big chunks, archives written around the page cache."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from triggerfish_cli.backup.direct_file import BLOCK, DirectFile, open_archive
from triggerfish_cli.backup.streams import HashingWriter, compress_stream


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
from triggerfish_cli.backup.big_buffers import reuse_big_buffers
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


# -- archives written around the page cache ---------------------------------------------


def _direct_supported(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    return True


def _pieces(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    sizes = [1, 4095, 4097, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17, 12345, 0, 7]
    return [rng.randbytes(size) for size in sizes]


def test_an_archive_written_direct_holds_exactly_what_was_written(tmp_path: Path) -> None:
    target = tmp_path / "archive.tmp"
    target.touch()
    pieces = _pieces(1)
    with open_archive(target) as out:
        kinds = {type(out)}
        for piece in pieces:
            assert out.write(memoryview(piece)) == len(piece)
    assert target.read_bytes() == b"".join(pieces)
    if _direct_supported(tmp_path / "probe"):
        assert kinds == {DirectFile}  # the path under test really is the direct one
        assert out.fd == -1  # closed


def test_a_restarted_archive_holds_only_the_second_attempt(tmp_path: Path) -> None:
    target = tmp_path / "archive.tmp"
    target.touch()
    with open_archive(target) as out:
        out.write(b"a" * (BLOCK + 100))  # one block out, the rest buffered
        out.seek(0)
        out.truncate()
        out.write(b"b" * 5000)
    assert target.read_bytes() == b"b" * 5000


def test_a_failure_inside_closes_the_file_and_writes_no_tail(tmp_path: Path) -> None:
    target = tmp_path / "archive.tmp"
    target.touch()
    with pytest.raises(RuntimeError), open_archive(target) as out:
        out.write(b"c" * 100)
        raise RuntimeError("the snapshot failed")
    assert target.read_bytes() == b""  # what was held back is dropped, not written
    if isinstance(out, DirectFile):
        assert out.fd == -1


def test_a_filesystem_without_o_direct_gets_a_buffered_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing)
    target = tmp_path / "archive.tmp"
    target.touch()
    pieces = _pieces(2)
    with open_archive(target) as out:
        assert not isinstance(out, DirectFile)
        for piece in pieces:
            out.write(piece)
    assert target.read_bytes() == b"".join(pieces)


def test_a_refused_first_direct_write_goes_on_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    refused: list[int] = []

    def refusing(fd: int, data: Any) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", refusing)
    target = tmp_path / "archive.tmp"
    target.touch()
    pieces = _pieces(3)
    with open_archive(target) as out:
        for piece in pieces:
            out.write(piece)
    assert target.read_bytes() == b"".join(pieces)
    if isinstance(out, DirectFile):
        assert refused and not out.direct


def test_a_direct_write_error_other_than_einval_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "archive.tmp"
    target.touch()
    with pytest.raises(OSError, match="No space left"), open_archive(target) as out:
        monkeypatch.setattr(os, "write", full)
        out.write(b"d" * (BLOCK + 1))
        if not isinstance(out, DirectFile):  # buffered: the error comes at the flush
            out.flush()


def test_an_archive_not_there_yet_is_created_private(tmp_path: Path) -> None:
    target = tmp_path / "upload" / "archive.db.zst"
    target.parent.mkdir()
    with open_archive(target) as out:
        out.write(b"e" * 10)
    assert target.read_bytes() == b"e" * 10
    assert target.stat().st_mode & 0o777 == 0o600
