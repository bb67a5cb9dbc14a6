"""Issue 35: no file is ever written through a symbolic link someone else planted.

Each test plants a link where a command writes (in a directory others may
write: what makes a link untrusted, fileio.trusted_link) to a private 0600
file, runs the installed command, and shows that file byte for byte and mode
for mode as it was: the new file replaces the link, or (locks, markers,
restore targets, identities) the command is refused with exit 4 and one line.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(sys.executable).parent / "triggerfish-admin")
SECRET = b"root:$6$planted-link-target$not-yours:19000:0:99999:7:::\n"


def run(*args: str, stdout: object = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    """The installed ``triggerfish-admin ARGS`` (the hermetic environment is inherited)."""
    return subprocess.run(
        [SCRIPT, *args],
        stdout=stdout,  # type: ignore[arg-type]
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
        check=False,
    )


class Victim:
    """A private file (0600) that a planted link names: it must never change."""

    def __init__(self, tmp_path: Path, data: bytes = SECRET) -> None:
        private = tmp_path / "private"
        private.mkdir(mode=0o700, exist_ok=True)
        self.path = private / f"victim-{len(list(private.iterdir()))}"
        self.path.write_bytes(data)
        self.path.chmod(0o600)
        self.data = data
        self.inode = self.path.stat().st_ino

    def unchanged(self) -> bool:
        found = self.path.lstat()
        return (
            stat.S_ISREG(found.st_mode)
            and found.st_mode & 0o7777 == 0o600
            and found.st_ino == self.inode
            and self.path.read_bytes() == self.data
        )


def plant(link: Path, victim: Victim) -> Path:
    """A link at ``link`` to the victim, in a directory anyone may write (so anyone could
    have put it there)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim.path)
    link.parent.chmod(0o777)
    return link


def one_line_refusal(done: subprocess.CompletedProcess[str], path: Path) -> None:
    assert done.returncode == 4, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "symbolic link" in lines[0], lines


@pytest.fixture
def archive(gateway_db: Path, tmp_path: Path) -> Path:
    backups = tmp_path / "backups"
    made = run("--db", str(gateway_db), "backup", "create", "--to", str(backups), "-f", "json")
    assert made.returncode == 0, made.stderr
    return backups / json.loads(made.stdout)["name"]


# -- files replaced: the link goes, the file it named stays --------------------------------


def test_kv_export_replaces_a_planted_link(gateway_db: Path, tmp_path: Path) -> None:
    victim = Victim(tmp_path)
    link = plant(tmp_path / "exports" / "kv.jsonl", victim)
    done = run("--db", str(gateway_db), "kv", "export", "-o", str(link))
    assert done.returncode == 0, done.stderr
    assert victim.unchanged()
    assert not link.is_symlink() and link.stat().st_mode & 0o777 == 0o600
    assert b'"key"' in link.read_bytes()


def test_the_metrics_file_replaces_a_planted_link(
    gateway_db: Path, tmp_path: Path, archive: Path
) -> None:
    """The issue's first case: the file a link names was rewritten and went 0600 -> 0644."""
    victim = Victim(tmp_path)
    link = plant(tmp_path / "textfile" / "triggerfish.prom", victim)
    done = run("backup", "verify", str(archive), "--metrics-file", str(link))
    assert done.returncode == 0, done.stderr
    assert victim.unchanged()
    assert not link.is_symlink() and b"triggerfish_admin_last_exit_code" in link.read_bytes()


def test_a_config_rollback_replaces_a_planted_link(gateway_db: Path, tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    config = etc / "triggerfish.yaml"
    config.write_text("logging:\n  level: normal\n")
    store = ["--db", str(gateway_db), "--config", str(config)]
    assert run(*store, "config", "snapshot").returncode == 0
    config.unlink()
    victim = Victim(tmp_path, b"logging:\n  level: verbose\n")
    plant(config, victim)
    done = run(*store, "config", "rollback", "--yes")
    assert done.returncode == 0, done.stderr
    assert victim.unchanged()
    assert not config.is_symlink() and config.read_text() == "logging:\n  level: normal\n"


# -- refused: locks, markers, identities, restore targets, new stores ----------------------


def test_a_verification_marker_that_is_a_link_is_refused(tmp_path: Path, archive: Path) -> None:
    """The issue's second case: `backup verify` wrote <archive>.verified through a link."""
    victim = Victim(tmp_path)
    marker = plant(archive.with_name(archive.name + ".verified"), victim)
    done = run("backup", "verify", str(archive))
    one_line_refusal(done, marker)
    assert victim.unchanged() and marker.is_symlink()


def test_a_metrics_lock_that_is_a_link_refuses_the_job_before_it_runs(
    gateway_db: Path, tmp_path: Path
) -> None:
    victim = Victim(tmp_path)
    metrics = tmp_path / "textfile" / "triggerfish.prom"
    lock = plant(metrics.with_name(metrics.name + ".lock"), victim)
    backups = tmp_path / "backups"
    done = run("--db", str(gateway_db), "backup", "create", "--to", str(backups),
               "--metrics-file", str(metrics))  # fmt: skip
    one_line_refusal(done, lock)
    assert victim.unchanged() and not metrics.exists()
    assert not backups.exists() or not list(backups.iterdir())  # nothing was done


def test_a_job_lock_that_is_a_link_is_refused(gateway_db: Path, tmp_path: Path) -> None:
    victim = Victim(tmp_path)
    lock = gateway_db.with_name(f"{gateway_db.name}-tfadmin-retention-sweep.lock")
    plant(lock, victim)
    done = run("--db", str(gateway_db), "retention", "sweep", "--yes")
    one_line_refusal(done, lock)
    assert victim.unchanged()


def test_backup_keygen_never_writes_through_a_link(tmp_path: Path) -> None:
    victim = Victim(tmp_path)
    link = plant(tmp_path / "keys" / "backup.key", victim)
    done = run("backup", "keygen", "-o", str(link))
    assert done.returncode == 4, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and str(link) in done.stderr
    assert victim.unchanged() and link.is_symlink()


def test_a_restore_into_a_planted_link_is_refused(tmp_path: Path, archive: Path) -> None:
    victim = Victim(tmp_path)
    link = plant(tmp_path / "restored" / "store.db", victim)
    done = run("backup", "restore", str(archive), "--to", str(link), "--yes")
    one_line_refusal(done, link)
    assert victim.unchanged() and link.is_symlink()
    assert run("backup", "restore", "--undo", "--to", str(link), "--yes").returncode == 4
    assert victim.unchanged()


def test_a_new_store_is_never_made_through_a_planted_link(tmp_path: Path) -> None:
    empty = Victim(tmp_path, b"")
    dangling = Victim(tmp_path)
    for link in (
        plant(tmp_path / "stores" / "empty.db", empty),
        plant(tmp_path / "stores" / "gone.db", dangling),
    ):
        if link.name == "gone.db":
            dangling.path.unlink()  # a link to nothing (yet): made there, it would be root's
        done = run("--db", str(link), "demo", "create", "--records", "10")
        one_line_refusal(done, link)
    assert empty.unchanged() and not dangling.path.exists()


# -- what must still be written through ------------------------------------------------


def test_stdout_is_still_written_through_and_stays_a_link(gateway_db: Path, tmp_path: Path) -> None:
    """``-o /dev/stdout``: a pipe, and a regular file (a shell's ``>``), behind a trusted
    link (/dev/stdout -> /proc/self/fd/1). The link is never replaced."""
    piped = run("--db", str(gateway_db), "kv", "export", "-o", "/dev/stdout")
    assert piped.returncode == 0, piped.stderr
    assert '"key"' in piped.stdout
    out = tmp_path / "out.jsonl"
    with out.open("w") as handle:
        done = run("--db", str(gateway_db), "kv", "export", "-o", "/dev/stdout", stdout=handle)
    assert done.returncode == 0, done.stderr
    assert piped.stdout.splitlines()[-1] in out.read_text().splitlines()  # (+ an audit row)
    assert os.path.islink("/dev/stdout")
