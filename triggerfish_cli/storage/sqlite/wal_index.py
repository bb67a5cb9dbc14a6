"""The wal-index header SQLite keeps at the start of a store's -shm file (wal.c:
WalIndexHdr), read without taking any lock: where the WAL ends (``mxFrame``), its
salts, its page size, and how far it is checkpointed (``nBackfill``).

Read by the physical snapshot (snapshot.py) and by the write gate, which counts
the WAL frames of its own commits and sees how long the WAL is after one.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from triggerfish_cli.storage.sqlite.live_writers import probe_fd, store_files

WAL_VERSION = 3007000
#: WalIndexHdr, in the machine's byte order: iVersion, unused, iChange, isInit,
#: bigEndCksum, szPage, mxFrame, nPage, aFrameCksum, aSalt, aCksum.
INDEX_HEADER = struct.Struct("=IIIBBHII8s8s8s")
#: The two header copies, then WalCkptInfo.nBackfill.
INDEX_READ = 2 * INDEX_HEADER.size + 4
#: Tries at a header not torn by a commit writing it.
TRIES = 3


@dataclass(frozen=True)
class WalIndex:
    """The wal-index header, as SQLite keeps it in the -shm file."""

    raw: bytes
    page_size: int
    max_frame: int
    pages: int
    salt: bytes


def read_index_and_backfill(shm: int) -> tuple[WalIndex | None, int]:
    """The header and, read after it in the same pass, nBackfill.

    SQLite writes the second copy first and reads the first copy first:
    equal copies (and the header checksum) mean a header not torn by a write.
    """
    try:
        raw = os.pread(shm, INDEX_READ, 0)
    except OSError:
        return None, 0
    if len(raw) < INDEX_READ:
        return None, 0
    first, second = raw[: INDEX_HEADER.size], raw[INDEX_HEADER.size : 2 * INDEX_HEADER.size]
    (backfilled,) = struct.unpack_from("=I", raw, 2 * INDEX_HEADER.size)
    if first != second:
        return None, 0
    version, _, _, initialised, _, size, max_frame, pages, _, salt, checksum = INDEX_HEADER.unpack(
        first
    )
    if version != WAL_VERSION or not initialised or _checksum(first) != checksum:
        return None, 0
    page_size = (size & 0xFE00) + ((size & 0x0001) << 16)
    return WalIndex(first, page_size, max_frame, pages, salt), backfilled


def _checksum(header: bytes) -> bytes:
    """walChecksumBytes over the first 40 bytes, native byte order (as walIndexTryHdr)."""
    words = struct.unpack("=10I", header[:40])
    s1 = s2 = 0
    for i in range(0, 10, 2):
        s1 = (s1 + words[i] + s2) & 0xFFFFFFFF
        s2 = (s2 + words[i + 1] + s1) & 0xFFFFFFFF
    return struct.pack("=II", s1, s2)


def wal_mark(db: Path) -> tuple[int, bytes] | None:
    """Where the store's WAL ends now: its frames (``mxFrame``) and its salt, which a
    restart of the WAL from its start changes. None: unknown (no valid header)."""
    fd = probe_fd(store_files(db)[2])
    if fd is None:
        return None
    for _ in range(TRIES):
        index, _ = read_index_and_backfill(fd)
        if index is not None:
            return index.max_frame, index.salt
    return None


def frames_between(before: tuple[int, bytes] | None, after: tuple[int, bytes] | None) -> int:
    """The frames written to the WAL between two :func:`wal_mark` readings (-1: unknown).

    A WAL restarted in between (a new salt) holds only what was written since.
    """
    if before is None or after is None:
        return -1
    if after[1] != before[1]:
        return after[0]
    return max(after[0] - before[0], 0)
