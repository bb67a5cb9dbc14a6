"""Ordinary failures are one line and a documented exit code, never "unexpected" (exit 1).

Disk full on a small tmpfs (run through the installed console script, as
cron runs it), a corrupt database, a directory or an existing file where
the other is wanted, a lone surrogate in an import line; files holding
store data are private (0600); -q prints nothing on success; temp files of
killed processes (their pids are in their names) are cleaned up.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers.script import one_line
from tests.helpers.script import run_script as run
from tests.helpers.services import unavailable
from triggerfish_cli.errors import EXIT_CODES


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs: writes into it run out of space."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        unavailable("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        unavailable(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def big_store(base_dir: Path) -> Path:
    """A store of ~2 MiB of incompressible values: more than the tmpfs holds."""
    db = base_dir / "data" / "triggerfish.db"
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.executemany(
        "INSERT INTO kv VALUES (?, ?)",
        ((f"conv:s:{n:012d}", json.dumps({"pad": os.urandom(1000).hex()})) for n in range(1000)),
    )
    conn.commit()
    conn.close()
    return db


def test_exit_9_is_documented() -> None:
    assert 9 in EXIT_CODES and "disk full" in EXIT_CODES[9]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "| 9 | cannot write" in readme


def test_disk_full_in_kv_export_and_a_logical_backup_leaves_nothing_half_written(
    tiny_fs: Path, big_store: Path
) -> None:
    out = tiny_fs / "export.jsonl"
    done = run("--db", str(big_store), "kv", "export", "-o", str(out))
    assert done.returncode == 9, done.stderr
    line = one_line(done.stderr)
    assert str(out) in line and "No space left" in line
    assert list(tiny_fs.iterdir()) == []

    dest = tiny_fs / "backups"
    done = run(
        "--db", str(big_store), "backup", "create", "--logical", "-c", "none", "--to", str(dest)
    )
    assert done.returncode == 9, done.stderr
    assert str(dest) in one_line(done.stderr)
    assert [p.name for p in dest.iterdir()] == []  # no archive, no temp file


def test_disk_full_in_a_logical_restore_into_a_new_store(
    tiny_fs: Path, big_store: Path, tmp_path: Path
) -> None:
    backups = tmp_path / "backups"
    made = run(
        "--db", str(big_store), "backup", "create", "--logical", "--to", str(backups), "-f", "json"
    )
    assert made.returncode == 0, made.stderr
    name = json.loads(made.stdout)["name"]
    target = tiny_fs / "new.db"
    done = run(
        "--db", str(target), "backup", "restore", str(backups / name), "--to", str(target), "--yes"
    )
    assert done.returncode == 9, done.stderr
    one_line(done.stderr)


def test_disk_full_in_a_config_rollback_leaves_the_file_as_it_was(
    tiny_fs: Path, big_store: Path, tmp_path: Path
) -> None:
    big = tmp_path / "big.yaml"  # a version larger than the tmpfs
    big.write_text(
        "models:\n  primary: x\n" + "".join(f"# {os.urandom(40).hex()}\n" for _ in range(4000))
    )
    assert run("--db", str(big_store), "--config", str(big), "config", "snapshot").returncode == 0
    config = tiny_fs / "triggerfish.yaml"
    config.write_text("models:\n  primary: y\n")
    done = run(
        "--db", str(big_store), "-q", "--config", str(config), "config", "rollback", "1", "--yes"
    )
    assert done.returncode == 9, done.stderr
    line = one_line(done.stderr)
    assert str(config) in line and "No space left" in line and "unchanged" in line
    assert config.read_text() == "models:\n  primary: y\n"
    assert [p.name for p in tiny_fs.iterdir()] == ["triggerfish.yaml"]  # no temp file


def test_a_sweep_on_a_corrupt_database_is_exit_8_naming_it(cli: CliFn, big_store: Path) -> None:
    size = big_store.stat().st_size
    with big_store.open("r+b") as handle:
        handle.seek(size // 2)
        handle.write(b"\xff" * 8192)
    done = run("--db", str(big_store), "retention", "sweep", "--yes")
    assert done.returncode == 8, done.stderr
    line = one_line(done.stderr)
    assert str(big_store) in line and "malformed" in line


def test_kv_import_of_a_directory_and_backup_create_to_a_file(
    tmp_path: Path, big_store: Path
) -> None:
    done = run("--db", str(big_store), "kv", "import", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert str(tmp_path) in one_line(done.stderr)
    existing = tmp_path / "a-file"
    existing.write_text("keep me")
    done = run("--db", str(big_store), "backup", "create", "--to", str(existing))
    assert done.returncode == 2, done.stderr
    assert str(existing) in one_line(done.stderr)
    assert existing.read_text() == "keep me"


def test_an_import_line_with_a_lone_surrogate_is_named(tmp_path: Path, big_store: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"key":"a","value":"fine"}\n{"key":"b\\ud800","value":"x"}\n', encoding="utf-8"
    )
    done = run("--db", str(big_store), "kv", "import", str(source))
    assert done.returncode == 8, done.stderr
    line = one_line(done.stderr)
    assert "line 2" in line and "surrogate" in line


def test_files_holding_store_data_are_private(cli: CliFn, base_dir: Path, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = base_dir / "data" / "triggerfish.db"
        from triggerfish_cli.storage.sqlite.backend import SqliteStorage

        SqliteStorage(store, create=True).close()  # a store we create: 0600 (kv import makes none)
        assert (
            cli(
                "--db", str(store), "kv", "import", "-", input='{"key":"a","value":"1"}\n'
            ).exit_code
            == 0
        )
        export = tmp_path / "out.jsonl"
        assert cli("--db", str(store), "kv", "export", "-o", str(export)).exit_code == 0
        migrated = tmp_path / "migrated.db"
        assert cli("migrate", "--from", str(store), "--to", str(migrated)).exit_code == 0
        backups = tmp_path / "b"
        made = cli(
            "--db", str(store), "backup", "create", "--logical", "--to", str(backups), "-f", "json"
        )
        restored = tmp_path / "restored.db"
        name = json.loads(made.stdout)["name"]  # type: ignore[index]
        done = cli("backup", "restore", str(backups / name), "--to", str(restored), "--yes")
        assert done.exit_code == 0, done.stderr
        for path in (store, export, migrated, restored):
            assert path.stat().st_mode & 0o777 == 0o600, path
            for suffix in ("-wal", "-shm"):
                side = Path(str(path) + suffix)
                if side.exists():
                    assert side.stat().st_mode & 0o777 == 0o600, side
    finally:
        os.umask(old)


def test_quiet_prints_nothing_on_success(cli: CliFn, base_dir: Path, tmp_path: Path) -> None:
    from tests.helpers.memories import write_memory_store

    store = write_memory_store(base_dir / "data" / "triggerfish.db")
    target = tmp_path / "t.db"
    for args in (
        ("-q", "migrate", "--from", str(store), "--to", str(target)),
        ("-q", "memory", "reindex", "--taint", "RESTRICTED"),
        ("-q", "backup", "create", "--to", str(tmp_path / "b")),
        ("-q", "backup", "create", "--to", str(tmp_path / "b")),
        ("-q", "backup", "prune", "--keep-last", "1", "--from", str(tmp_path / "b"), "--yes"),
    ):
        done = cli(*args)
        assert done.exit_code == 0, (args, done.stderr)
        assert done.stdout == "" and done.stderr == "", args


def test_purge_older_than_zero_is_refused_like_retention(cli: CliFn, base_dir: Path) -> None:
    from tests.helpers.memories import write_memory_store

    write_memory_store(base_dir / "data" / "triggerfish.db")
    for spec in ("0d", "0s", "0h0m"):
        done = cli("memory", "purge", "--older-than", spec, "--yes", "--taint", "RESTRICTED")
        assert done.exit_code == 2, done.stderr
        assert "zero" in done.stderr


def test_temp_files_of_killed_processes_carry_their_pid_and_are_cleaned(
    cli: CliFn, big_store: Path, tmp_path: Path
) -> None:
    backups = tmp_path / "b"
    backups.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    leftovers = [
        backups / f".triggerfish-2026-11-30T02-00-00.000Z.jsonl.zst.{dead.pid}.k2j3h4.tmp",
    ]
    scratch = big_store.with_name(f".{big_store.name}.restore-{dead.pid}.tmp")
    leftovers += [scratch, Path(f"{scratch}-wal"), Path(f"{scratch}-shm")]
    for path in leftovers:
        path.write_bytes(b"half")
    alive = backups / f".triggerfish-x.jsonl.zst.{os.getpid()}.abc.tmp"
    alive.write_bytes(b"mine, still running")
    logical = cli("--db", str(big_store), "backup", "create", "--logical", "--to", str(backups))
    assert logical.exit_code == 0, logical.stderr
    made = cli("--db", str(big_store), "backup", "create", "--to", str(backups), "-f", "json")
    assert made.exit_code == 0, made.stderr
    name = json.loads(made.stdout)["name"]  # type: ignore[index]
    restored = cli("--db", str(big_store), "backup", "restore", str(backups / name), "--yes")
    assert restored.exit_code == 0, restored.stderr
    for path in leftovers:
        assert not path.exists(), path
    assert alive.exists()


def test_atomic_writer_temp_names_hold_the_pid(tmp_path: Path) -> None:
    from triggerfish_cli.fileio import atomic_writer

    target = tmp_path / "x.txt"
    with atomic_writer(target) as handle:
        names = [p.name for p in tmp_path.iterdir()]
        handle.write("x")
    assert len(names) == 1 and f".x.txt.{os.getpid()}." in names[0]


def test_atomic_writer_writes_into_a_fifo_and_leaves_it_one(tmp_path: Path) -> None:
    """Not a regular file (a FIFO, /dev/null, /dev/stdout): written as it is, never
    replaced by a regular file (as root, replacing /dev/null breaks the machine)."""
    import stat
    import threading

    from triggerfish_cli.fileio import atomic_writer

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    with atomic_writer(fifo) as handle:
        handle.write("through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temp file left


def test_atomic_writer_replaces_the_file_a_symlink_names_and_keeps_the_link(
    tmp_path: Path,
) -> None:
    from triggerfish_cli.fileio import atomic_writer

    real = tmp_path / "real" / "triggerfish.yaml"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    with atomic_writer(link) as handle:
        handle.write("new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in real.parent.iterdir()) == ["triggerfish.yaml"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_kv_export_to_a_character_device_leaves_the_device(cli: CliFn, tmp_path: Path) -> None:
    """``kv export -o /dev/null`` as root replaced /dev/null with a regular file."""
    import stat

    db = tmp_path / "s.db"
    assert cli("--db", str(db), "demo", "create", "--records", "200").exit_code == 0
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    done = cli("--db", str(db), "kv", "export", "-o", str(device))
    assert done.exit_code == 0, done.stderr
    assert stat.S_ISCHR(device.lstat().st_mode)
    assert device.stat().st_rdev == os.makedev(1, 3)
