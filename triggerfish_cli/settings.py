"""``triggerfish.yaml``: the gateway's config file, and the sections that are ours.

The gateway's YAML has no ``storage:`` or ``retention:`` section today; we
define them. Sections we do not own are left alone and never validated
here. Our sections are checked strictly: an unknown setting or a bad value
is an :class:`InvalidDataError` (exit 8), never silently a default.

``storage:``::

    storage:
      backend: sqlite          # sqlite (default) | memory | postgres | s3
      path: data/triggerfish.db   # sqlite: relative to this file's directory
      busy_timeout_ms: 5000    # sqlite: how long to wait for a lock
      live_writers: freeze     # sqlite: freeze | refuse | ignore (the write gate)

    storage:                   # postgres (storage/postgres/backend.py, remote_settings.py)
      backend: postgres
      dsn: "host=db.internal dbname=triggerfish user=tf"   # never a password
      schema: triggerfish
      connect_timeout: 5

    storage:                   # s3 (storage/s3/backend.py); credentials: the AWS chain
      backend: s3
      bucket: acme-triggerfish
      prefix: prod/
      endpoint_url: https://minio.internal:9000   # S3-compatible stores
      region: eu-west-1
      read_timeout: 20         # s3: seconds per answer; max_attempts: 3 tries a request

The YAML is parsed lazily: a command that only needs to know the backend
does not import the YAML parser when the file has no ``storage`` section.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli import safe_yaml
from triggerfish_cli.errors import InvalidDataError, NotFoundError


@dataclass(frozen=True)
class StorageConfig:
    """Which backend, and how to reach it. Never holds a secret."""

    backend: str
    #: SQLite file (sqlite backend only).
    path: Path | None = None
    #: Backend-specific settings (busy_timeout_ms, dsn, bucket, ...).
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Where the choice came from: default, config, --db, --backend, --from, --to.
    source: str = "default"
    #: How it was chosen, for messages: "from --db", "from TRIGGERFISH_DATA_DIR", ...
    chosen_by: str = ""


@dataclass
class Settings:
    """A loaded ``triggerfish.yaml`` (or its absence)."""

    path: Path
    text: str | None = None
    _data: dict[str, Any] | None = None

    @property
    def exists(self) -> bool:
        return self.text is not None

    @property
    def data(self) -> dict[str, Any]:
        """The whole document as a mapping (empty when there is no file)."""
        if self._data is None:
            self._data = parse_yaml_mapping(self.text or "", str(self.path))
        return self._data

    def section(self, name: str) -> Any:
        return self.data.get(name)

    def storage_section(self) -> Mapping[str, Any] | None:
        # Fast path: no "storage" anywhere in the text means no section, and
        # the YAML parser (~50 ms to import) is not needed.
        if not self.text or "storage" not in self.text:
            return None
        section = self.section("storage")
        if section is None:
            return None
        if not isinstance(section, Mapping):
            raise InvalidDataError(f"{self.path}: storage: must be a mapping")
        return section


def load_settings(path: Path, *, explicit: bool) -> Settings:
    """Read ``path``; a missing file is no settings, unless it was asked for by name."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if explicit:
            raise NotFoundError(f"{path}: config file not found") from None
        return Settings(path)
    except IsADirectoryError:
        raise InvalidDataError(f"{path}: is a directory, not a config file") from None
    except UnicodeDecodeError as exc:
        raise InvalidDataError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise InvalidDataError(f"{path}: cannot read: {exc.strerror}") from None
    return Settings(path, text)


def parse_yaml_mapping(text: str, origin: str) -> dict[str, Any]:
    """Parse YAML whose top level must be a mapping; errors name line and column."""
    # lazy: yaml adds 20 modules: only a file with a section of ours needs it
    import yaml

    try:
        document = safe_yaml.load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise InvalidDataError(f"{origin}: invalid YAML: {where}{exc.problem}") from None
    except yaml.YAMLError as exc:
        raise InvalidDataError(f"{origin}: invalid YAML: {exc}") from None
    except ValueError as exc:  # YAML that parses but cannot be built: a 13th month
        raise InvalidDataError(f"{origin}: invalid value in YAML: {exc}") from None
    except InvalidDataError as exc:  # an alias bomb
        raise InvalidDataError(f"{origin}: {exc.message}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise InvalidDataError(f"{origin}: the top level must be a mapping of sections")
    return document


# -- checking our sections (storage: in storage/backends.py) ----------------


def check_keys(section: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(str(key) for key in section if key not in allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise InvalidDataError(f"{where}.{unknown[0]}: unknown setting (known: {known})")


def positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidDataError(f"{where}: must be a positive whole number, not {value!r}")
    return value


#: The sections of triggerfish.yaml that are ours, each with the
#: ``"module:function(section, config_path)"`` that checks it strictly and
#: raises InvalidDataError. Modules register their section here (retention:
#: ...); ``config validate`` runs them all. Imported lazily.
OUR_SECTIONS: dict[str, str] = {
    "storage": "triggerfish_cli.storage.backends:check_storage_section",
    "retention": "triggerfish_cli.retention.policies:check_section",
    "metrics": "triggerfish_cli.metrics:check_section",
    "backup": "triggerfish_cli.backup.settings:check_section",
    "checks": "triggerfish_cli.checks.limits:check_section",
}


def check_our_sections(settings: Settings) -> None:
    """Check every section of ours present in ``settings``; the first error is raised."""
    for name, target in OUR_SECTIONS.items():
        if name not in settings.data:
            continue
        module, _, function = target.partition(":")
        getattr(importlib.import_module(module), function)(settings.data[name], settings.path)
