"""Where Triggerfish keeps things on disk.

The base directory is ``$TRIGGERFISH_DATA_DIR`` if set, else
``~/.triggerfish`` (the gateway's ``/data`` inside Docker is reached by
setting the variable, as the gateway's image does).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DATA_DIR_ENV = "TRIGGERFISH_DATA_DIR"


def base_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    configured = env.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".triggerfish"


def default_db_path(env: Mapping[str, str] | None = None) -> Path:
    return base_dir(env) / "data" / "triggerfish.db"


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    return base_dir(env) / "triggerfish.yaml"


def config_backups_dir(env: Mapping[str, str] | None = None) -> Path:
    """The gateway's own copies of triggerfish.yaml (``backups/triggerfish.yaml.<time>``)."""
    return base_dir(env) / "backups"


def store_backups_dir(env: Mapping[str, str] | None = None) -> Path:
    """Default destination of ``backup create``."""
    return base_dir(env) / "backups" / "store"
