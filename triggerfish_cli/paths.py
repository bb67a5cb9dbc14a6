"""Where Triggerfish keeps things on disk: the base directory, exactly as the gateway finds it.

The gateway's rule (``src/cli/config/paths.ts``, ``src/core/env.ts``), first
match wins:

1. ``$TRIGGERFISH_DATA_DIR`` when set and not empty, taken as it is (no ``~``
   expansion: the gateway does none);
2. ``/data`` inside Docker: ``$TRIGGERFISH_DOCKER`` is ``true`` or ``1``, or
   ``/.dockerenv`` exists;
3. ``$HOME/.triggerfish`` (``$USERPROFILE`` on Windows, else ``./.triggerfish``).

:func:`resolve_base` also says which rule chose it, for the messages that
name a store ("... (from TRIGGERFISH_DATA_DIR)") and for ``status``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DATA_DIR_ENV = "TRIGGERFISH_DATA_DIR"
DOCKER_ENV = "TRIGGERFISH_DOCKER"
#: The gateway's base directory inside its Docker image (a volume).
DOCKER_BASE = Path("/data")
#: The file Docker puts at the root of every container.
DOCKERENV = Path("/.dockerenv")


@dataclass(frozen=True)
class BaseDir:
    """The base directory, and which of the gateway's rules chose it."""

    path: Path
    #: ``TRIGGERFISH_DATA_DIR``, ``TRIGGERFISH_DOCKER=1`` / ``/.dockerenv`` (Docker), or ``HOME``.
    chosen_by: str

    def describe(self) -> str:
        """How it was chosen, for messages: ``from TRIGGERFISH_DATA_DIR``, ..."""
        if self.chosen_by == DATA_DIR_ENV:
            return f"from {DATA_DIR_ENV}"
        if self.chosen_by.startswith("docker:"):
            return f"Docker's /data ({self.chosen_by.removeprefix('docker:')})"
        return "the default $HOME/.triggerfish"


def docker_reason(env: Mapping[str, str] | None = None) -> str | None:
    """Why we are inside Docker by the gateway's rule (None: we are not)."""
    env = os.environ if env is None else env
    dockerenv = DOCKERENV
    flag = env.get(DOCKER_ENV)
    if flag in ("true", "1"):
        return f"{DOCKER_ENV}={flag}"
    if dockerenv.exists():
        return f"{dockerenv} exists"
    return None


def resolve_base(env: Mapping[str, str] | None = None) -> BaseDir:
    env = os.environ if env is None else env
    configured = env.get(DATA_DIR_ENV)
    if configured:
        return BaseDir(Path(configured), DATA_DIR_ENV)
    reason = docker_reason(env)
    if reason is not None:
        return BaseDir(DOCKER_BASE, f"docker:{reason}")
    home = env.get("HOME") or env.get("USERPROFILE") or "."
    return BaseDir(Path(home) / ".triggerfish", "HOME")


def base_dir(env: Mapping[str, str] | None = None) -> Path:
    return resolve_base(env).path


def db_path_in(base: Path) -> Path:
    """The gateway's SQLite store under a base directory."""
    return base / "data" / "triggerfish.db"


def default_db_path(env: Mapping[str, str] | None = None) -> Path:
    return db_path_in(base_dir(env))


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    return base_dir(env) / "triggerfish.yaml"


def config_backups_dir(env: Mapping[str, str] | None = None) -> Path:
    """The gateway's own copies of triggerfish.yaml (``backups/triggerfish.yaml.<time>``)."""
    return base_dir(env) / "backups"


def store_backups_dir(env: Mapping[str, str] | None = None) -> Path:
    """Default destination of ``backup create``."""
    return base_dir(env) / "backups" / "store"


def daemon_file(env: Mapping[str, str] | None = None) -> Path:
    """The gateway daemon's ``daemon.json`` (its start time)."""
    return base_dir(env) / "daemon.json"
