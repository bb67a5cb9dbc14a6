"""Decompression bombs: archives whose payload is hashed right (its sha256 is the
manifest's) but that decompress far beyond what the manifest claims, or hold one
line longer than any record. Built as streams: a few MB on disk, nothing big in
memory. Used by tests/backup/test_bombs.py and bench/bench_bombs.py."""

from __future__ import annotations

import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from triggerfish_cli.backup.archive import archive_name
from triggerfish_cli.backup.crypt import Recipient
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.backup.payload import Payload, finish_payload

CREATED = "2026-11-30T01:22:33.123Z"
_PIECE = 1 << 20


def _stream(total: int, head: bytes, fill: bytes, tail: bytes) -> Iterator[bytes]:
    """``head``, ``fill`` repeated, ``tail``: ``total`` bytes in all, 1 MiB at a time."""
    yield head
    block = fill * _PIECE
    left = total - len(head) - len(tail)
    while left > 0:
        yield block[: min(left, _PIECE)]
        left -= _PIECE
    yield tail


def _compress(
    sink: Any, compression: str, pieces: Iterator[bytes], total: int, sized: bool
) -> None:
    if compression == "zstd":
        params = zstandard.ZstdCompressionParameters.from_level(1, write_content_size=sized)
        compressor = zstandard.ZstdCompressor(compression_params=params)
        with compressor.stream_writer(sink, size=total if sized else -1, closefd=False) as writer:
            for piece in pieces:
                writer.write(piece)
    elif compression == "gzip":
        deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
        for piece in pieces:
            sink.write(deflate.compress(piece))
        sink.write(deflate.flush())
    else:
        for piece in pieces:
            sink.write(piece)


def bomb(
    directory: Path,
    *,
    expands_to: int,
    claim: int,
    kind: str = "physical",
    compression: str = "zstd",
    framed: bool = True,
    sized: bool = True,
    recipients: list[Recipient] | None = None,
) -> Path:
    """An archive in ``directory`` whose payload decompresses to ``expands_to`` bytes
    while its manifest says ``claim``.

    Physical: zeros. Logical: one line ``{"key":"k","value":"aaa..."}`` of
    ``expands_to`` bytes, its newline included. ``framed`` (zstd): one frame
    the manifest lists, decompressed on the pool; ``sized``: that frame's
    header says how much it holds (the truth).
    """
    if kind == "logical":
        pieces = _stream(expands_to, b'{"key":"k","value":"', b"a", b'"}\n')
    else:
        pieces = _stream(expands_to, b"", b"\0", b"")
    payload = Payload(recipients or [])
    path = directory / archive_name(CREATED, kind, compression, encrypted=bool(recipients))
    manifest = Manifest(
        kind=kind,
        created=CREATED,
        source="sqlite:/nowhere/triggerfish.db",
        backend="sqlite",
        compression=compression,
        page_size=4096 if kind == "physical" else None,
        page_count=claim // 4096 if kind == "physical" else None,
        content_bytes=claim,
        keys=1 if kind == "logical" else 0,
        namespaces={"": 1} if kind == "logical" else {},
    )
    with path.open("wb") as out:
        with payload.into(out) as sink:
            _compress(sink, compression, pieces, expands_to, sized)
        finish_payload(sink, manifest)
        if compression == "zstd" and framed:
            manifest.frames = [manifest.payload_bytes]
        out.write(payload.trailer(manifest))
    return path


#: Forks and execs the command after its first two arguments with RLIMIT_FSIZE set to
#: the second (-1: none), waits for it and writes its own peak RSS (KiB) to the file
#: named first; exits with the command's status (bench/common.py: a fork, not the
#: vfork of subprocess, so the child's peak is its own and not the test process's).
_WRAPPER = """
import os, resource, sys
out, fsize, command = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
pid = os.fork()
if pid == 0:
    try:
        if fsize >= 0:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        os.execv(command[0], command)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


@dataclass
class Limited:
    returncode: int
    stderr: str
    #: The command's own peak RSS, MiB.
    peak_mib: float


def run_limited(
    command: list[str], env: dict[str, str], work: Path, *, max_file: int = -1, hang: float = 600
) -> Limited:
    """``command`` with no file it writes allowed past ``max_file`` bytes (a write past
    it fails with EFBIG), and its own peak RSS; TimeoutExpired after ``hang`` seconds
    (a hang, not a speed: these runs take a second or two)."""
    out = work / "peak-rss"
    done = subprocess.run(
        [sys.executable, "-I", "-c", _WRAPPER, str(out), str(max_file), *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=hang,
        check=False,
    )
    peak = int(out.read_text()) / 1024
    out.unlink()
    return Limited(done.returncode, done.stderr, peak)
