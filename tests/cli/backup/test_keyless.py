"""Encrypted backups verified on a host without the key (issue 36), through the script.

As the README recommends, the backup host holds only the recipients' public
keys. A keyless ``backup verify`` records what it checked (``verified:
keyless``, ``contents_checked: false``), which ``status --check`` counts: the
newest backup is fresh and intact (``backup_age`` OK), and until a verify with
the key checks the contents (``full_verify_age``) the state is WARNING, never
CRITICAL. A verify with the key made on another host is recorded by bringing
its verdict (``<name>.verified``) back beside the archive; a later keyless
verify never replaces it. ``backup list`` shows the label of an encrypted backup.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(sys.executable).parent / "triggerfish-admin"
CHECKS = ["--sweep-age", "off", "--wal-size", "off", "--index-drift", "off"]
CHECKS += ["--config-versions", "off"]


def run(base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env["TRIGGERFISH_DATA_DIR"] = str(base)
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300
    )


def ok(base: Path, *args: str) -> str:
    result = run(base, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def check(base: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    result = run(base, "status", "--check", *CHECKS, "--format", "json")
    document = json.loads(result.stdout)
    return result.returncode, {f["check"]: f for f in document["findings"]}


def listed(base: Path) -> dict[str, Any]:
    (entry,) = json.loads(ok(base, "backup", "list", "--format", "json"))
    assert isinstance(entry, dict)
    return entry


def test_a_keyless_verify_counts_and_a_verify_with_the_key_elsewhere_is_recorded(
    base_dir: Path, tmp_path: Path
) -> None:
    backups = base_dir / "backups" / "store"
    backups.mkdir(parents=True)
    ok(base_dir, "demo", "create", "--records", "300", "-q")
    operator = tmp_path / "operator"  # the operator's machine: the identity lives there
    operator.mkdir()
    public = ok(base_dir, "backup", "keygen", "-o", str(operator / "backup.key")).strip()
    ok(base_dir, "backup", "create", "-r", public, "--label", "nightly", "-q")

    entry = listed(base_dir)
    assert (entry["label"], entry["encrypted"], entry["verified"]) == ("nightly", True, "no")
    assert "nightly" in ok(base_dir, "backup", "list")
    code, found = check(base_dir)
    assert code == 2 and found["backup_age"]["state"] == "CRITICAL"

    # the nightly keyless verify of the README: silent, exit 0, and now recorded
    result = run(base_dir, "-q", "backup", "verify", "--all")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    entry = listed(base_dir)
    assert entry["verified"] == "keyless"
    marker = json.loads((backups / f"{entry['name']}.verified").read_text())
    assert marker["ok"] is True and marker["contents_checked"] is False
    assert any("encrypted" in line for line in marker["checks"])
    code, found = check(base_dir)
    assert code == 1  # WARNING, never CRITICAL once keyless verifies run
    assert found["backup_age"]["state"] == "OK"
    assert "contents not checked" in found["backup_age"]["message"]
    assert found["full_verify_age"]["state"] == "WARNING"
    assert "keyless verifies only" in found["full_verify_age"]["message"]
    text = ok(base_dir, "status")
    assert "verified keyless: encrypted bytes intact, contents not checked" in text
    assert "contents last verified: never" in text

    # a verify with the key on the operator's machine, of a copy; its verdict brought back
    shutil.copy(backups / entry["name"], operator / entry["name"])
    key = str(operator / "backup.key")
    ok(base_dir, "backup", "verify", str(operator / entry["name"]), "-i", key, "-q")
    shutil.copy(operator / f"{entry['name']}.verified", backups / f"{entry['name']}.verified")
    assert listed(base_dir)["verified"] == "yes"
    code, found = check(base_dir)
    assert code == 0, found
    assert found["full_verify_age"]["state"] == "OK"

    ok(base_dir, "-q", "backup", "verify", "--all")  # keyless again: it checked less
    assert listed(base_dir)["verified"] == "yes"
    assert check(base_dir)[0] == 0
    assert "contents last verified: 20" in ok(base_dir, "status")


def test_a_keyless_verify_records_damage(base_dir: Path, tmp_path: Path) -> None:
    backups = base_dir / "backups" / "store"
    backups.mkdir(parents=True)
    ok(base_dir, "demo", "create", "--records", "200", "-q")
    public = ok(base_dir, "backup", "keygen", "-o", str(tmp_path / "backup.key")).strip()
    ok(base_dir, "backup", "create", "-r", public, "-q")
    (archive,) = backups.glob("*.age")
    data = bytearray(archive.read_bytes())
    data[100] ^= 0xFF
    archive.write_bytes(bytes(data))
    assert run(base_dir, "-q", "backup", "verify", "--all").returncode == 5
    marker = json.loads((backups / f"{archive.name}.verified").read_text())
    assert marker["ok"] is False  # the marker names the damaged archive's sha256
    assert listed(base_dir)["verified"] == "FAILED"
    assert check(base_dir)[1]["backup_age"]["state"] == "CRITICAL"
