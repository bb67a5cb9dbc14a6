"""`backup keygen`: its own help example works on a fresh home; without -o it prints
the identity to stdout and the public key to stderr, as age-keygen does. Run
through the installed console script."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.helpers.script import one_line, run_script


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_help_example_makes_the_missing_directories_private(tmp_path: Path) -> None:
    home = tmp_path / "fresh-home"
    home.mkdir()
    run = run_script(
        "backup", "keygen", "-o", "~/.config/triggerfish/backup.key", env={"HOME": str(home)}
    )
    assert run.returncode == 0, run.stderr
    key = home / ".config" / "triggerfish" / "backup.key"
    public = run.stdout.strip()
    assert public.startswith("age1") and f"# public key: {public}" in key.read_text()
    assert mode(key) == 0o600
    assert mode(home / ".config") == 0o700 and mode(key.parent) == 0o700


def test_without_output_the_identity_goes_to_stdout_and_the_public_key_to_stderr() -> None:
    run = run_script("backup", "keygen")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("# created: ") and lines[2].startswith("AGE-SECRET-KEY-1")
    public = lines[1].removeprefix("# public key: ")
    assert run.stderr == f"Public key: {public}\n"
    quiet = run_script("-q", "backup", "keygen")  # the key is the result: never withheld
    assert quiet.returncode == 0 and "AGE-SECRET-KEY-1" in quiet.stdout


def test_a_symbolic_link_on_the_way_is_refused_with_exit_9(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    for target in (link / "backup.key", link / "sub" / "backup.key"):
        run = run_script("backup", "keygen", "-o", str(target))
        assert run.returncode == 9, run.stderr
        line = one_line(run.stderr)
        assert str(link) in line and "symbolic link" in line
    assert os.listdir(real) == []
