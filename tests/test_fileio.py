"""fileio's rule for what is at a name it writes (issue 35): a planted link is never
followed; a device, a pipe, /dev/stdout still are. Plus the writers that use it
without a command of their own to run (tests/cli/test_planted_links.py has those)."""

from __future__ import annotations

import errno
import os
import stat
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.cli.test_planted_links import SECRET, Victim, plant
from tests.conftest import CliFn
from triggerfish_cli.errors import RefusedError
from triggerfish_cli.fileio import (
    atomic_writer,
    follows,
    open_lock_file,
    publish,
    trusted_link,
)


def write(path: Path, text: str = "new\n", **options: bool) -> None:
    with atomic_writer(path, **options) as handle:
        handle.write(text)


def only(directory: Path) -> list[str]:
    return sorted(child.name for child in directory.iterdir())


# -- the rule, case by case ------------------------------------------------------------


def test_a_planted_link_to_a_file_is_replaced_and_the_file_left_alone(tmp_path: Path) -> None:
    victim = Victim(tmp_path)
    link = plant(tmp_path / "out" / "metrics.prom", victim)
    write(link)
    assert victim.unchanged()
    assert not link.is_symlink() and link.read_text() == "new\n"
    assert only(link.parent) == ["metrics.prom"]  # no temp file left


@pytest.mark.skipif(os.geteuid() != 0, reason="a link owned by another user needs root")
def test_a_link_owned_by_another_user_is_replaced_even_in_a_private_directory(
    tmp_path: Path,
) -> None:
    """The issue's case: root runs it, another user planted the link (the directory is
    root's own, no one else may write there now)."""
    victim = Victim(tmp_path)
    link = tmp_path / "out" / "metrics.prom"
    link.parent.mkdir(mode=0o755)
    link.symlink_to(victim.path)
    os.lchown(link, 65534, 65534)
    assert not trusted_link(link)
    write(link)
    assert victim.unchanged() and not link.is_symlink()


def test_a_dangling_link_is_replaced_and_nothing_made_where_it_pointed(tmp_path: Path) -> None:
    link = tmp_path / "export.jsonl"
    link.symlink_to(tmp_path / "elsewhere" / "made-by-us")  # ours, in our own directory
    (tmp_path / "elsewhere").mkdir()
    write(link)
    assert not link.is_symlink() and link.read_text() == "new\n"
    assert only(tmp_path / "elsewhere") == []


def test_a_trusted_link_to_a_file_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "git" / "triggerfish.yaml"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "triggerfish.yaml"
    link.symlink_to(real)
    assert trusted_link(link)
    write(link)
    assert link.is_symlink() and real.read_text() == "new\n"
    assert real.stat().st_mode & 0o777 == 0o640


def test_a_pipe_behind_a_trusted_link_is_written_through(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    write(link, "through the pipe\n")
    reader.join(timeout=60)
    assert got == ["through the pipe\n"]
    assert link.is_symlink() and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_pipe_behind_a_planted_link_is_never_opened(tmp_path: Path) -> None:
    """Opened, it would block until someone reads: the link is replaced instead."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    fifo = private / "pipe"
    os.mkfifo(fifo, 0o600)
    link = tmp_path / "out" / "export.jsonl"
    link.parent.mkdir()
    link.symlink_to(fifo)
    link.parent.chmod(0o777)
    write(link)
    assert not link.is_symlink() and link.read_text() == "new\n"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_device_behind_a_trusted_link_is_written_through_never_replaced(
    tmp_path: Path,
) -> None:
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    write(link, "gone\n")
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert follows(Path("/dev/null")) == Path("/dev/null")


def test_a_trusted_link_to_a_directory_is_refused_a_planted_one_replaced(
    tmp_path: Path,
) -> None:
    target = tmp_path / "somewhere"
    target.mkdir()
    link = tmp_path / "mine" / "out"
    link.parent.mkdir()
    link.symlink_to(target)
    with pytest.raises(RefusedError, match="symbolic link to a directory"):
        write(link)
    assert link.is_symlink() and only(target) == [] and only(link.parent) == ["out"]
    link.parent.chmod(0o777)  # now anyone could have put it there: replaced
    write(link)
    assert not link.is_symlink() and only(target) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a block device needs root")
def test_a_trusted_link_to_a_block_device_is_refused_and_never_opened(tmp_path: Path) -> None:
    device = tmp_path / "disk"
    os.mknod(device, 0o600 | stat.S_IFBLK, os.makedev(7, 250))  # a loop device number
    link = tmp_path / "out"
    link.symlink_to(device)
    with pytest.raises(RefusedError, match="block device"):
        write(link)
    assert link.is_symlink() and stat.S_ISBLK(device.lstat().st_mode)


def test_stdout_behind_its_link_is_written_through() -> None:
    """/dev/stdout is a trusted link (root's, in /dev): followed, never replaced."""
    assert trusted_link(Path("/dev/stdout"))
    assert follows(Path("/dev/stdout")) is not None


# -- exclusive writes and publishing ---------------------------------------------------


def test_an_exclusive_write_never_replaces_anything(tmp_path: Path) -> None:
    victim = Victim(tmp_path)
    taken = tmp_path / "copies" / "taken"
    taken.parent.mkdir()
    taken.write_text("first\n")
    link = tmp_path / "copies" / "link"
    link.symlink_to(victim.path)  # trusted, even: an exclusive write never follows one
    for name in (taken, link):
        with pytest.raises(FileExistsError):
            write(name, exclusive=True)
    assert taken.read_text() == "first\n" and victim.unchanged()
    assert only(taken.parent) == ["link", "taken"]  # no temp file left
    write(taken.parent / "free", exclusive=True)
    assert (taken.parent / "free").read_text() == "new\n"


@pytest.mark.parametrize("hard_links", [True, False])
def test_publish_claims_a_name_and_never_replaces_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool
) -> None:
    if not hard_links:  # a file system without them (vfat): an exclusive create claims it

        def no_links(*args: object, **kwargs: object) -> None:
            raise OSError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(os, "link", no_links)
    victim = Victim(tmp_path)
    temp = tmp_path / ".archive.tmp"
    temp.write_bytes(b"archive")
    link = tmp_path / "archive"
    link.symlink_to(victim.path)
    with pytest.raises(FileExistsError):
        publish(temp, link)
    assert victim.unchanged() and temp.read_bytes() == b"archive"
    link.unlink()
    publish(temp, link)
    assert link.read_bytes() == b"archive" and not temp.exists() and not link.is_symlink()


# -- locks -----------------------------------------------------------------------------


def test_a_lock_file_is_never_opened_through_a_link(tmp_path: Path) -> None:
    victim = Victim(tmp_path)
    link = tmp_path / "job.lock"
    link.symlink_to(victim.path)  # even a link of our own
    with pytest.raises(RefusedError) as refused:
        open_lock_file(link)
    assert refused.value.exit_code == 4 and str(link) in str(refused.value)
    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)
    with pytest.raises(RefusedError, match="not a regular file"):
        open_lock_file(fifo)
    fd = open_lock_file(tmp_path / "fresh.lock")
    os.close(fd)
    assert (tmp_path / "fresh.lock").stat().st_mode & 0o777 == 0o600
    assert victim.unchanged()


def test_the_write_gates_lock_is_never_opened_through_a_link(tmp_path: Path) -> None:
    from triggerfish_cli.storage.sqlite.freezer import Freezer
    from triggerfish_cli.storage.sqlite.gate_stats import GateStats

    victim = Victim(tmp_path)
    db = tmp_path / "store.db"
    db.touch()
    plant(db.with_name("store.db-tfadmin-gate.lock"), victim)
    freezer = Freezer(db, GateStats(), deadline=1.0, stop_timeout=1.0)
    try:
        with pytest.raises(RefusedError, match=r"tfadmin-gate\.lock"):
            freezer.begin(1.0)
    finally:
        freezer.close()
    assert victim.unchanged()


# -- writers with no command of their own here ------------------------------------------


def test_the_gateway_format_config_copy_never_replaces_a_planted_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.config import files
    from triggerfish_cli.config.files import ConfigFile, backup_name, write_backup_copy

    moment = datetime(2026, 12, 1, 2, 0, 0, 123000, tzinfo=timezone.utc)
    monkeypatch.setattr(files, "utc_now", lambda: moment)
    config = ConfigFile(tmp_path / "etc" / "triggerfish.yaml", "logging: {}\n", 0o600)
    victim = Victim(tmp_path)
    planted = plant(
        tmp_path / "etc" / "backups" / backup_name("triggerfish.yaml", "2026-12-01T02:00:00.123Z"),
        victim,
    )
    made = write_backup_copy(config)
    assert made.name == backup_name("triggerfish.yaml", "2026-12-01T02:00:00.124Z")
    assert made.read_text() == "logging: {}\n" and made.stat().st_mode & 0o777 == 0o600
    assert victim.unchanged() and planted.is_symlink()


def test_an_archive_is_never_opened_through_a_link(tmp_path: Path) -> None:
    from triggerfish_cli.backup.direct_file import open_archive

    victim = Victim(tmp_path)
    link = tmp_path / ".triggerfish-x.db.zst.1.abc.tmp"
    link.symlink_to(victim.path)
    with pytest.raises(OSError) as failed, open_archive(link) as out:
        out.write(b"x")
    assert failed.value.errno == errno.ELOOP and victim.unchanged()


def test_a_kept_pre_restore_copy_never_goes_through_a_planted_name(
    cli: CliFn, gateway_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.backup import physical

    made = cli("backup", "create", "--to", str(tmp_path / "b"), "-f", "json")
    assert made.exit_code == 0, made.stderr
    archive = tmp_path / "b" / str(made.json()["name"])  # type: ignore[index]
    monkeypatch.setattr(physical, "stamp", lambda: "2026-12-01T02-00-00.000Z")
    victim = Victim(tmp_path)
    kept = gateway_db.with_name(f"{gateway_db.name}.pre-restore-2026-12-01T02-00-00.000Z")
    kept.symlink_to(victim.path)
    before = gateway_db.read_bytes()
    done = cli("backup", "restore", str(archive), "--yes")
    assert done.exit_code == 4, done.stderr
    assert str(kept) in done.stderr and victim.unchanged()
    assert gateway_db.read_bytes() == before  # nothing restored


def test_undo_never_copies_through_a_planted_scratch_or_puts_back_a_link(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    """The scratch name holds our pid: a link there (a guess, or a dead process's reused
    pid) is removed, not copied through; a kept copy that is a link is never put back."""
    from triggerfish_cli.backup.physical import PRE_RESTORE, pre_restores, scratch_path

    made = cli("backup", "create", "--to", str(tmp_path / "b"), "-f", "json")
    assert made.exit_code == 0, made.stderr
    archive = tmp_path / "b" / str(made.json()["name"])  # type: ignore[index]
    assert cli("backup", "restore", str(archive), "--yes").exit_code == 0
    (kept,) = pre_restores(gateway_db)
    victim = Victim(tmp_path, SECRET)
    newer = gateway_db.with_name(f"{gateway_db.name}{PRE_RESTORE}9999-12-31T23-59-59.999Z")
    newer.symlink_to(victim.path)  # sorts last: it would be put back first
    scratch = scratch_path(gateway_db)
    scratch.symlink_to(victim.path)  # our pid's scratch name, guessed
    assert pre_restores(gateway_db) == [kept]
    done = cli("backup", "restore", "--undo", "--yes")
    assert done.exit_code == 0, done.stderr
    assert victim.unchanged() and newer.is_symlink() and not kept.exists()
    assert not scratch.exists() and not scratch.is_symlink()


def test_a_restores_scratch_name_is_emptied_before_it_is_written(
    cli: CliFn, gateway_db: Path, tmp_path: Path
) -> None:
    from triggerfish_cli.backup.physical import scratch_path

    made = cli("backup", "create", "--to", str(tmp_path / "b"), "-f", "json")
    assert made.exit_code == 0, made.stderr
    archive = tmp_path / "b" / str(made.json()["name"])  # type: ignore[index]
    victim = Victim(tmp_path)
    scratch = scratch_path(gateway_db)
    scratch.symlink_to(victim.path)
    done = cli("backup", "restore", str(archive), "--yes")
    assert done.exit_code == 0, done.stderr
    assert victim.unchanged() and not scratch.is_symlink()
