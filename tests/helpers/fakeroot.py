"""Run a command with a file system root of its own: a chosen ``/data`` and ``/.dockerenv``.

The gateway's base directory depends on ``/data`` and ``/.dockerenv`` at the
root of the file system (paths.py), which a test must neither create nor
remove on the machine it runs on. So the command runs in a private mount
namespace (``unshare --mount``), chrooted into a tmpfs that holds a bind of
every top-level directory of the real root, plus ``/data`` bound to a
directory of the test's and ``/.dockerenv`` only when asked. Nothing outside
the namespace sees any of it; it all goes when the command ends.

Needs root (mount namespaces and chroot) and ``unshare``; :func:`available`
says whether this machine has them, and why not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

_SCRIPT = r"""
set -e
root=$1; shift
"$FAKEROOT_MOUNT" -t tmpfs tfadmin-test-root "$root"
for entry in /*; do
  name=${entry#/}
  case "$name" in .dockerenv|data) continue ;; esac
  if [ -L "$entry" ]; then
    ln -s "$(readlink "$entry")" "$root/$name"
  elif [ -d "$entry" ]; then
    mkdir "$root/$name" && "$FAKEROOT_MOUNT" --rbind "$entry" "$root/$name"
  fi
done
if [ -n "$FAKEROOT_DOCKERENV" ]; then : > "$root/.dockerenv"; fi
if [ -n "$FAKEROOT_DATA" ]; then
  mkdir "$root/data" && "$FAKEROOT_MOUNT" --bind "$FAKEROOT_DATA" "$root/data"
fi
exec "$FAKEROOT_CHROOT" "$root" /bin/sh -c 'cd "$FAKEROOT_CWD" && exec "$@"' sh "$@"
"""


_SBIN = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"


def _tool(name: str) -> str | None:
    return shutil.which(name, path=_SBIN)


def available() -> str | None:
    """None when :func:`run` works here, else why not (for a skip)."""
    if os.geteuid() != 0:
        return "needs root: a private mount namespace and chroot give the tool a / of its own"
    missing = [name for name in ("unshare", "mount", "chroot") if _tool(name) is None]
    if missing:
        return f"needs {', '.join(missing)} for a private mount namespace and a root of its own"
    probe = subprocess.run(
        [str(_tool("unshare")), "--mount", "--propagation", "private", "true"],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"unshare --mount is not permitted here: {probe.stderr.decode().strip()}"
    return None


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    data: Path | None = None,
    dockerenv: bool = False,
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``argv`` chrooted into a fresh root: ``/data`` is ``data`` (absent when None)."""
    root = Path(tempfile.mkdtemp(prefix="tfadmin-root-", dir="/tmp"))
    try:
        full_env = {
            **env,
            "FAKEROOT_DATA": str(data) if data is not None else "",
            "FAKEROOT_DOCKERENV": "1" if dockerenv else "",
            "FAKEROOT_CWD": str(cwd or "/"),
            "FAKEROOT_MOUNT": str(_tool("mount")),
            "FAKEROOT_CHROOT": str(_tool("chroot")),
        }
        unshare = [str(_tool("unshare")), "--mount", "--propagation", "private"]
        return subprocess.run(
            [*unshare, "sh", "-c", _SCRIPT, "sh", str(root), *argv],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        root.rmdir()


def shell(command: str) -> list[str]:
    """``sh -c command`` (for several steps inside one root)."""
    return ["/bin/sh", "-c", command]
