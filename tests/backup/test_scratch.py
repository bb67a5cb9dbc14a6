"""Where `backup verify` decompresses a physical backup: in memory when it fits (scratch.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backup.test_backup import create
from tests.conftest import CliFn
from triggerfish_cli.backup import scratch, verify


def test_a_small_copy_goes_to_a_tmpfs_with_room_and_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "_is_tmpfs", lambda directory: directory == tmp_path)
    assert scratch.memory_dir(1 << 20, tmp_path) == tmp_path
    # the machine must keep twice the copy available (and the margin)
    monkeypatch.setattr(scratch, "mem_available", lambda: 2 * (1 << 20) + scratch.MARGIN - 1)
    assert scratch.memory_dir(1 << 20, tmp_path) is None
    monkeypatch.setattr(scratch, "mem_available", lambda: None)  # unknown: the disk
    assert scratch.memory_dir(1 << 20, tmp_path) is None


def test_no_memory_dir_for_a_copy_bigger_than_the_tmpfs_or_a_disk_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert scratch.memory_dir(1 << 20, tmp_path) is None  # not a tmpfs mount point
    monkeypatch.setattr(scratch, "_is_tmpfs", lambda directory: True)
    monkeypatch.setattr(scratch, "mem_available", lambda: 1 << 62)
    room = os.statvfs(tmp_path)
    assert scratch.memory_dir(room.f_bavail * room.f_frsize, tmp_path) is None
    assert scratch.memory_dir(-1, tmp_path) is None


def test_the_real_tmpfs_is_recognised_from_the_mount_table() -> None:
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    kinds = [line.split()[2] for line in mounts if line.split()[1] == str(scratch.MEMORY_DIR)]
    assert scratch._is_tmpfs(scratch.MEMORY_DIR) == (bool(kinds) and kinds[-1] == "tmpfs")
    assert not scratch._is_tmpfs(Path("/proc"))
    available = scratch.mem_available()
    assert available is not None and available > 0


@pytest.fixture
def places(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Where each verify wrote its scratch copy."""
    seen: list[Path] = []
    write = verify._write_snapshot

    def spy(reader, manifest, snapshot, durable, progress):  # type: ignore[no-untyped-def]
        seen.append(snapshot)
        return write(reader, manifest, snapshot, durable, progress)

    monkeypatch.setattr(verify, "_write_snapshot", spy)
    return seen


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory standing in for /dev/shm (a tmpfs, as far as scratch.py can tell)."""
    directory = tmp_path / "shm"
    directory.mkdir()
    monkeypatch.setattr(scratch, "MEMORY_DIR", directory)
    monkeypatch.setattr(scratch, "_is_tmpfs", lambda path: path == directory)
    return directory


def test_verify_decompresses_in_memory_and_leaves_nothing_there(
    cli: CliFn,
    gateway_db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    places: list[Path],
    shm: Path,
) -> None:
    archive = create(cli)
    run = cli("backup", "verify", str(archive))
    assert run.exit_code == 0, run.stderr
    assert len(places) == 1 and places[0].parent.parent == shm
    assert list(shm.iterdir()) == []  # removed with the verdict
    assert sorted(p.name for p in archive.parent.iterdir()) == sorted(
        [archive.name, f"{archive.name}.verified"]
    )


def test_verify_uses_the_disk_when_memory_is_short_and_scratch_when_given(
    cli: CliFn,
    gateway_db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    places: list[Path],
    shm: Path,
) -> None:
    archive = create(cli)
    chosen = tmp_path / "chosen"
    run = cli("backup", "verify", str(archive), "--scratch", str(chosen))
    assert run.exit_code == 0, run.stderr
    assert places[-1].parent.parent == chosen  # the operator's --scratch always wins
    monkeypatch.setattr(scratch, "mem_available", lambda: 0)
    run = cli("backup", "verify", str(archive))
    assert run.exit_code == 0, run.stderr
    assert places[-1].parent.parent == archive.parent  # beside the backups, as before
    assert list(shm.iterdir()) == [] and list(chosen.iterdir()) == []


def test_a_killed_verify_s_copy_in_memory_is_removed_by_the_next_one(
    cli: CliFn, gateway_db: Path, shm: Path, places: list[Path]
) -> None:
    """A verify killed mid-copy leaves its scratch in RAM: the next verify takes it away."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = int(gone.stdout)
    stale = shm / f".tfadmin-{dead}-abc123.verify"
    stale.mkdir()
    (stale / "snapshot.db").write_bytes(b"\0" * 4096)
    live = shm / f".tfadmin-{os.getpid()}-def456.verify"  # a running process's: kept
    live.mkdir()
    archive = create(cli)
    run = cli("backup", "verify", str(archive))
    assert run.exit_code == 0, run.stderr
    assert places[-1].parent.parent == shm
    assert sorted(shm.iterdir()) == [live]
