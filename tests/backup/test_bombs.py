"""Issue 35, bombs in backups: every way a payload decompresses stops at the size its
manifest claims (exit 5 at once, nothing written past it), a logical line at
archive.MAX_LINE, in a fixed amount of memory; the scratch copy is never written
through a link planted at its name.

The bombs (tests/helpers/bombs.py) are hashed right: only the size checks catch them.
"""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from tests.backup.test_backup import create, kv_rows
from tests.backup.test_scratch import places, shm  # noqa: F401 - fixtures
from tests.conftest import CliFn
from tests.helpers.bombs import CREATED, bomb, run_limited
from tests.helpers.gateway import GATEWAY_ROWS
from tests.helpers.services import S3
from triggerfish_cli.backup import decompress, payload, physical, verify
from triggerfish_cli.backup.archive import (
    MAX_LINE,
    MAX_SEALED,
    archive_name,
    read_manifest,
    trailer_bytes,
)
from triggerfish_cli.backup.crypt import parse_recipient
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.backup.payload import Payload, finish_payload
from triggerfish_cli.backup.streams import LimitedHashingReader
from triggerfish_cli.errors import TriggerfishError, VerificationError, WriteError
from triggerfish_cli.progress import SILENT

SCRIPT = str(Path(sys.executable).parent / "triggerfish-admin")
#: What the issue's manifest claimed: 54 pages.
CLAIM = 221_184
#: Peak RSS of a verify or restore of any bomb: generous, and far below what one
#: costs without the bounds (the whole expansion, 1 GiB here; a logical line three
#: or four times over).
MEMORY_BOUND_MIB = 256
BIG = 1 << 30

WAYS: dict[str, dict[str, Any]] = {
    "zstd frame, sized": {"compression": "zstd", "framed": True, "sized": True},
    "zstd frame, no size": {"compression": "zstd", "framed": True, "sized": False},
    "zstd stream": {"compression": "zstd", "framed": False},
    "gzip": {"compression": "gzip"},
    "none": {"compression": "none"},
}


def _source(archive: Path, stack: Any) -> tuple[LimitedHashingReader, Any]:
    manifest = read_manifest(archive)
    handle = stack.enter_context(archive.open("rb"))
    return LimitedHashingReader(handle, manifest.payload_bytes), manifest


@pytest.fixture
def ends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Where each write into a scratch file ended (decompress._write_at, every thread's)."""
    seen: list[int] = []
    write = decompress._write_at

    def spy(fd: int, data: Any, offset: int) -> None:
        seen.append(offset + len(data))
        write(fd, data, offset)

    monkeypatch.setattr(decompress, "_write_at", spy)
    return seen


# -- decompress.py: each way stops at the claim ----------------------------------------


@pytest.mark.parametrize("way", WAYS)
def test_each_way_stops_at_the_claim_and_writes_nothing_past_it(
    tmp_path: Path, way: str, ends: list[int]
) -> None:
    expands = (4 << 20) if way == "none" else (64 << 20)
    archive = bomb(tmp_path, expands_to=expands, claim=CLAIM, **WAYS[way])
    scratch = tmp_path / "scratch"
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with contextlib.ExitStack() as stack:
        stack.callback(os.close, fd)
        source, manifest = _source(archive, stack)
        steps = decompress.decompress_into(
            source, manifest.compression, manifest.frames, fd, limit=CLAIM
        )
        with pytest.raises(VerificationError, match=f"more than the {CLAIM} bytes"):
            list(steps)
    assert scratch.stat().st_size <= CLAIM
    assert max(ends, default=0) <= CLAIM
    with contextlib.ExitStack() as stack:  # and chunk by chunk (a logical payload's way)
        source, manifest = _source(archive, stack)
        given = 0
        with pytest.raises(VerificationError, match=f"more than the {CLAIM} bytes"):
            for chunk in decompress.decompress_chunks(
                source, manifest.compression, manifest.frames, limit=CLAIM
            ):
                given += len(chunk)
        assert given <= CLAIM


@pytest.mark.parametrize("way", WAYS)
def test_each_way_gives_all_of_a_payload_that_is_exactly_its_claim(
    tmp_path: Path, way: str
) -> None:
    size = (3 << 20) + 5
    archive = bomb(tmp_path, expands_to=size, claim=size, **WAYS[way])
    for limit, fails in ((size, False), (size - 1, True)):
        with contextlib.ExitStack() as stack:
            source, manifest = _source(archive, stack)
            chunks = decompress.decompress_chunks(
                source, manifest.compression, manifest.frames, limit=limit
            )
            if fails:
                with pytest.raises(VerificationError, match="more than"):
                    list(chunks)
            else:
                assert sum(len(chunk) for chunk in chunks) == size


def test_a_frame_whose_header_says_too_much_is_refused_before_it_is_decompressed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ends: list[int]
) -> None:
    touched: list[str] = []
    monkeypatch.setattr(decompress, "_frame_into", lambda *a: touched.append("pool"))
    monkeypatch.setattr(decompress, "_zstd_stream", lambda *a: touched.append("stream"))
    archive = bomb(tmp_path, expands_to=BIG, claim=CLAIM)
    with contextlib.ExitStack() as stack:
        source, manifest = _source(archive, stack)
        fd = os.open(tmp_path / "scratch", os.O_WRONLY | os.O_CREAT, 0o600)
        stack.callback(os.close, fd)
        with pytest.raises(VerificationError, match=f"more than the {CLAIM} bytes"):
            list(decompress.decompress_into(source, "zstd", manifest.frames, fd, limit=CLAIM))
    assert touched == [] and ends == []


def test_a_frame_header_that_lies_low_gives_no_more_than_it_says(tmp_path: Path) -> None:
    """A frame whose header says 1000 bytes while it holds 64 MiB: only its 1000 (and
    one more, to see it lies) are ever decompressed, and none is written."""
    content = b"\0" * (64 << 20)
    frame = bytearray(zstandard.ZstdCompressor(level=1).compress(content))
    params = zstandard.get_frame_parameters(bytes(frame))
    assert params.content_size == len(content)
    header = frame[4]  # frame header descriptor: the size field is 4 bytes here
    assert header >> 6 == 2
    at = 5 + (0 if header & 0x20 else 1)  # after the window descriptor
    frame[at : at + 4] = (1000).to_bytes(4, "little")
    assert zstandard.frame_content_size(bytes(frame)) == 1000
    target = tmp_path / "scratch"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        source = LimitedHashingReader(io.BytesIO(bytes(frame)), len(frame))
        with pytest.raises(VerificationError, match="zstd"):
            list(decompress.decompress_into(source, "zstd", [len(frame)], fd, limit=CLAIM))
    finally:
        os.close(fd)
    assert target.stat().st_size == 0


@pytest.mark.parametrize("into_file", [True, False])
def test_frames_too_big_for_the_pool_are_streamed_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, into_file: bool
) -> None:
    """A frame bigger than decompress.POOLED (compressed, or what it holds) is streamed
    once those before it landed, at its place; the frames after it go back to the pool."""
    monkeypatch.setattr(decompress, "POOLED", 100_000)
    pieces = [os.urandom(50_000), b"z" * 300_000, os.urandom(150_000), b"q" * 70_000]
    frames = [zstandard.ZstdCompressor(level=1).compress(piece) for piece in pieces]
    assert len(frames[2]) > 100_000 and len(frames[1]) < 100_000  # both kinds of too big
    data = b"".join(frames)
    content = b"".join(pieces)
    sizes = [len(frame) for frame in frames]
    source = LimitedHashingReader(io.BytesIO(data), len(data))
    if into_file:
        target = tmp_path / "out"
        fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            steps = list(decompress.decompress_into(source, "zstd", sizes, fd, limit=len(content)))
        finally:
            os.close(fd)
        assert steps == [len(piece) for piece in pieces]
        assert target.read_bytes() == content
    else:
        chunks = decompress.decompress_chunks(source, "zstd", sizes, limit=len(content))
        assert b"".join(bytes(chunk) for chunk in chunks) == content
    source = LimitedHashingReader(io.BytesIO(data), len(data))
    with pytest.raises(VerificationError, match="more than"):
        list(decompress.decompress_chunks(source, "zstd", sizes, limit=len(content) - 1))


def test_gzip_with_more_after_its_end_is_refused(tmp_path: Path) -> None:
    import gzip

    data = gzip.compress(b"x" * 1000) + gzip.compress(b"y" * 1000)
    source = LimitedHashingReader(io.BytesIO(data), len(data))
    with pytest.raises(VerificationError, match="after the end"):
        list(decompress.decompress_chunks(source, "gzip", None, limit=1 << 20))


# -- logical lines ------------------------------------------------------------------------


def test_a_line_longer_than_the_bound_fails_as_it_passes_it_never_held_whole() -> None:
    taken = 0

    def endless() -> Iterator[bytes]:
        nonlocal taken
        while True:
            taken += 1
            yield b'{"key":"k","value":"' if taken == 1 else b"a" * 10

    with pytest.raises(VerificationError, match="line 1: longer than 100 bytes"):
        list(verify.iter_lines(endless(), max_line=100))
    assert taken <= 10
    line = b'{"key":"k","value":"' + b"a" * 78 + b'"}'
    assert len(line) == 100  # exactly the bound: fine, in one piece or many
    for step in (7, 100, 1000):
        whole = line + b"\n" + line + b"\n"
        pieces = [whole[i : i + step] for i in range(0, len(whole), step)]
        assert [row[2] for row in verify.iter_lines(iter(pieces), max_line=100)] == [1, 2]
    with pytest.raises(VerificationError, match="line 2: longer than 99 bytes"):
        list(verify.iter_lines(iter([b'{"key":"a","value":""}\n' + line + b"\n"]), max_line=99))


def test_create_refuses_a_row_whose_line_would_pass_the_bound(
    cli: CliFn, gateway_db: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verify would refuse it: a logical backup that can never be restored is not made."""
    monkeypatch.setattr(payload, "MAX_LINE", 4000)
    conn = sqlite3.connect(gateway_db)
    conn.execute("INSERT INTO kv (key, value) VALUES ('big:one', ?)", ("v" * 5000,))
    conn.commit()
    conn.close()
    run = cli("backup", "create", "--logical")
    assert run.exit_code == 4, run.stderr
    assert "'big:one'" in run.stderr and "4000" in run.stderr
    backups = base_dir / "backups"
    assert not [p for p in backups.rglob("*") if p.is_file()]
    assert MAX_LINE == 64 << 20


# -- the command, on the bombs ------------------------------------------------------


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


PHYSICAL: dict[str, dict[str, Any]] = {
    "zstd frame, sized": {"compression": "zstd", "framed": True, "sized": True},
    "zstd frame, no size": {"compression": "zstd", "framed": True, "sized": False},
    "zstd stream": {"compression": "zstd", "framed": False},
    "gzip": {"compression": "gzip"},
    "encrypted": {"compression": "zstd", "framed": True, "sized": True, "encrypted": True},
}


def _identity(tmp_path: Path) -> tuple[Any, Path]:
    import pyrage

    key = pyrage.x25519.Identity.generate()
    path = tmp_path / "identity.txt"
    path.write_text(f"{key}\n")
    return parse_recipient(str(key.to_public()), "test"), path


@pytest.mark.parametrize("way", PHYSICAL)
def test_verify_of_a_physical_bomb_fails_at_once_within_its_claim(tmp_path: Path, way: str) -> None:
    """The installed command: exit 5 in one line, no file written past the claim
    (RLIMIT_FSIZE: a write past it would fail), a fixed peak RSS."""
    options = dict(PHYSICAL[way])
    extra: list[str] = []
    if options.pop("encrypted", False):
        recipient, identity = _identity(tmp_path)
        options["recipients"] = [recipient]
        extra = ["--identity", str(identity)]
    expands = BIG // 2 if way == "gzip" else BIG
    archive = bomb(tmp_path, expands_to=expands, claim=CLAIM, **options)
    ran = run_limited(
        [SCRIPT, "backup", "verify", str(archive), *extra],
        dict(os.environ),
        tmp_path,
        max_file=CLAIM,
    )
    assert ran.returncode == 5, ran.stderr
    assert f"more than the {CLAIM} bytes the manifest says" in _one_line(ran.stderr)
    assert ran.peak_mib < MEMORY_BOUND_MIB, ran.peak_mib


@pytest.mark.parametrize("inside", ["more than its claim", "not gzip"])
def test_an_encrypted_payload_that_fails_to_decompress_fails_at_once(
    tmp_path: Path, inside: str
) -> None:
    """Its encrypted bytes are intact, so the failure is the decompression's: exit 5 at
    once (the plaintext was once drained from an age stream already shut: a hang)."""
    recipient, identity = _identity(tmp_path)
    if inside == "not gzip":
        archive = _encrypted_junk(tmp_path, recipient)
    else:
        archive = bomb(
            tmp_path, expands_to=8 << 20, claim=1 << 20, compression="none", recipients=[recipient]
        )
    ran = run_limited(
        [SCRIPT, "backup", "verify", str(archive), "-i", str(identity)],
        dict(os.environ),
        tmp_path,
        hang=300,
    )
    assert ran.returncode == 5, ran.stderr
    assert "verification failed: decompress: " in _one_line(ran.stderr)


def _encrypted_junk(tmp_path: Path, recipient: Any) -> Path:
    """An encrypted archive whose payload, said to be gzip, is 8 MiB of noise."""
    sealing = Payload([recipient])
    manifest = Manifest(
        kind="physical",
        created=CREATED,
        source="sqlite:/nowhere/triggerfish.db",
        backend="sqlite",
        compression="gzip",
        content_bytes=1 << 20,
    )
    path = tmp_path / archive_name(CREATED, "physical", "gzip", encrypted=True)
    with path.open("wb") as out:
        with sealing.into(out) as sink:
            sink.write(os.urandom(8 << 20))
        finish_payload(sink, manifest)
        out.write(sealing.trailer(manifest))
    return path


def test_restore_of_a_physical_bomb_fails_at_once_and_leaves_nothing(tmp_path: Path) -> None:
    archive = bomb(tmp_path, expands_to=BIG, claim=CLAIM, sized=False)
    target = tmp_path / "store" / "restored.db"
    ran = run_limited(
        [SCRIPT, "backup", "restore", str(archive), "--to", str(target), "--yes"],
        dict(os.environ),
        tmp_path,
        max_file=CLAIM,
    )
    assert ran.returncode == 5, ran.stderr
    assert "nothing restored" in _one_line(ran.stderr)
    assert ran.peak_mib < MEMORY_BOUND_MIB, ran.peak_mib
    assert not target.exists() and list(target.parent.iterdir()) == []


@pytest.mark.parametrize("command", ["verify", "restore"])
def test_a_logical_line_bomb_fails_once_the_line_passes_the_bound(
    tmp_path: Path, command: str
) -> None:
    """One line of 400 MiB, its size claimed truly: exit 5 at MAX_LINE, never held."""
    size = 400 << 20
    archive = bomb(tmp_path, kind="logical", expands_to=size, claim=size)
    args = [str(archive)]
    if command == "restore":
        args += ["--to", str(tmp_path / "restored.db"), "--yes"]
    ran = run_limited([SCRIPT, "backup", command, *args], dict(os.environ), tmp_path)
    assert ran.returncode == 5, ran.stderr
    assert f"line 1: longer than {MAX_LINE} bytes" in _one_line(ran.stderr)
    assert ran.peak_mib < MEMORY_BOUND_MIB, ran.peak_mib
    assert not (tmp_path / "restored.db").exists() or kv_rows(tmp_path / "restored.db") == {}


def test_a_bomb_in_memory_stops_at_its_claim_and_leaves_nothing_there(
    cli: CliFn,
    tmp_path: Path,
    shm: Path,  # noqa: F811 - the fixture
    places: list[Path],  # noqa: F811 - the fixture
    ends: list[int],
) -> None:
    """The claim fits the tmpfs, so the copy goes there: what is written there stops at it."""
    archive = bomb(tmp_path, expands_to=BIG, claim=CLAIM)
    run = cli("backup", "verify", str(archive))
    assert run.exit_code == 5, run.stderr
    assert places and places[0].parent.parent == shm
    assert max(ends, default=0) <= CLAIM
    assert list(shm.iterdir()) == []


def test_a_bomb_in_s3_stops_at_its_claim(
    cli: CliFn,
    s3: S3,
    tmp_path: Path,
    shm: Path,  # noqa: F811 - the fixture
    ends: list[int],
) -> None:
    archive = bomb(tmp_path, expands_to=BIG, claim=CLAIM, framed=False)
    bucket = s3.new_bucket()
    client: Any = s3.client()
    client.put_object(Bucket=bucket, Key=f"b/{archive.name}", Body=archive.read_bytes())
    where = ["--from", f"s3://{bucket}/b/", "--endpoint-url", s3.endpoint_url]
    run = cli("backup", "verify", archive.name, *where)
    assert run.exit_code == 5, run.stderr
    assert f"more than the {CLAIM} bytes" in run.stderr
    assert max(ends, default=0) <= CLAIM
    assert list(shm.iterdir()) == []


# -- manifests that would make us hold too much --------------------------------------------


def test_a_negative_claim_is_an_invalid_manifest(tmp_path: Path) -> None:
    archive = bomb(tmp_path, expands_to=1 << 20, claim=-1)
    ran = run_limited([SCRIPT, "backup", "verify", str(archive)], dict(os.environ), tmp_path)
    assert ran.returncode == 8, ran.stderr
    assert "content_bytes" in _one_line(ran.stderr)


def test_an_encrypted_manifest_too_long_to_hold_is_an_invalid_manifest(tmp_path: Path) -> None:
    recipient, identity = _identity(tmp_path)
    archive = bomb(tmp_path, expands_to=1 << 20, claim=1 << 20, recipients=[recipient])
    outer = read_manifest(archive)
    body = archive.read_bytes()[: outer.payload_bytes]
    outer.sealed_bytes = MAX_SEALED + 1
    with archive.open("wb") as out:
        out.write(body)
        out.write(b"\0" * outer.sealed_bytes)
        out.write(trailer_bytes(outer))
    ran = run_limited(
        [SCRIPT, "backup", "verify", str(archive), "-i", str(identity)],
        dict(os.environ),
        tmp_path,
    )
    assert ran.returncode == 8, ran.stderr
    assert "encrypted manifest length" in _one_line(ran.stderr)


# -- the scratch file: never written through a link ------------------------------------------


def _victim(tmp_path: Path, name: str) -> Path:
    victim = tmp_path / name
    victim.write_bytes(b"precious, and not ours to write")
    victim.chmod(0o600)
    return victim


def _unchanged(victim: Path) -> bool:
    return (
        victim.read_bytes() == b"precious, and not ours to write"
        and stat.S_IMODE(victim.stat().st_mode) == 0o600
    )


def test_restore_never_writes_through_links_planted_at_its_scratch_names(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    """The scratch name beside the store is predictable (its pid): links planted there
    and at SQLite's companions are removed, never followed; the restore goes on."""
    archive = create(cli)
    scratch = gateway_db.with_name(f".{gateway_db.name}.restore-{os.getpid()}.tmp")
    victims = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        victim = _victim(tmp_path, f"victim{suffix}")
        Path(f"{scratch}{suffix}").symlink_to(victim)
        victims.append(victim)
    run = cli("backup", "restore", str(archive), "--yes")
    assert run.exit_code == 0, run.stderr
    assert all(_unchanged(victim) for victim in victims)
    assert kv_rows(gateway_db) == GATEWAY_ROWS
    assert not list(gateway_db.parent.glob(f".{gateway_db.name}.restore-*"))


def test_the_snapshot_is_never_opened_through_a_link(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    archive = create(cli)
    victim = _victim(tmp_path, "victim")
    snapshot = tmp_path / "snapshot.db"
    snapshot.symlink_to(victim)
    manifest = read_manifest(archive)
    with archive.open("rb") as handle:
        reader = LimitedHashingReader(handle, manifest.payload_bytes)
        with pytest.raises(WriteError, match="already there"):
            verify._write_snapshot(reader, manifest, snapshot, False, SILENT)
    assert _unchanged(victim) and snapshot.is_symlink()


def test_the_swap_never_changes_mode_or_owner_through_a_link(
    gateway_db: Path, tmp_path: Path
) -> None:
    """A scratch file replaced by a link once checked: nothing is swapped in, and the
    store's mode is not given to what the link names."""
    gateway_db.chmod(0o644)
    before = gateway_db.read_bytes()
    victim = _victim(tmp_path, "victim")
    scratch = gateway_db.with_name(f".{gateway_db.name}.restore-{os.getpid()}.tmp")
    scratch.symlink_to(victim)
    with pytest.raises(TriggerfishError) as failed:
        physical._swap_in(scratch, gateway_db, "sqlite", force=True)
    assert failed.value.exit_code == 9
    assert _unchanged(victim)
    assert not gateway_db.is_symlink() and gateway_db.read_bytes() == before
    assert not list(gateway_db.parent.glob("*pre-restore*"))
