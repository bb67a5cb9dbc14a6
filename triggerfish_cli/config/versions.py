"""Versions of ``triggerfish.yaml`` kept in the store as ``config:v<N>``.

A version is one compact JSON value (the gateway's own form)::

    {"version":13,"createdAt":"2026-03-28T14:05:40.902Z","user":"alice",
     "reason":"before the model switch","source":"snapshot","sha256":"9f2c...",
     "bytes":812,"redacted":[{"path":"channels.telegram.botToken","line":9,
     "kind":"key name","where":"value","style":"plain"}],"yaml":"models:\\n  ..."}

- ``source`` is ``snapshot``, ``rollback`` (then ``restoredFrom`` names the
  version it put back) or ``import`` (then ``importedFrom`` names the
  gateway's backup file and ``createdAt`` is that file's time).
- ``sha256`` and ``bytes`` are of ``yaml``, the exact text stored (UTF-8).
- ``redacted`` (absent when empty) lists values replaced by the marker
  ``"<redacted>"`` because they were plain-text secrets (``secrets_guard``).
- Numbers only grow: the next one is the highest ``config:v<N>`` plus one
  (parsed, since ``config:v10`` sorts before ``config:v9``). The
  :data:`KEEP` newest are kept; older ones are removed when a new one is
  written. A version is never rewritten.

Every version written also writes an audit record. Whether the file on disk
"is" a version is decided on its masked text, so a version stored with
redacted secrets still matches the file it came from.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli import audit
from triggerfish_cli.config import redaction, secrets_guard
from triggerfish_cli.config.files import ConfigFile, config_lock, read_config, sha256_text
from triggerfish_cli.errors import (
    InvalidDataError,
    NotFoundError,
    RefusedError,
    UsageError,
    VerificationError,
)
from triggerfish_cli.serialization import dumps, loads, now_iso
from triggerfish_cli.settings import parse_yaml_mapping
from triggerfish_cli.storage.provider import StorageProvider

PREFIX = "config:v"
KEEP = 10
SOURCES = ("snapshot", "rollback", "import")
_KEY = re.compile(r"^config:v([1-9][0-9]{0,17})$")
_ARG = re.compile(r"^[vV]?([1-9][0-9]{0,17})$")


def version_key(number: int) -> str:
    return f"{PREFIX}{number}"


def parse_version_arg(text: str) -> int:
    """``13`` or ``v13`` -> 13; anything else is a usage error (exit 2)."""
    match = _ARG.match(text.strip())
    if match is None:
        raise UsageError(f"{text!r} is not a version: write it as 13 or v13")
    return int(match.group(1))


def version_numbers(provider: StorageProvider) -> list[int]:
    """The stored version numbers, ascending. Reads keys only (cheap; for completion)."""
    numbers = []
    for key in provider.scan_keys(PREFIX):
        match = _KEY.match(key)
        if match is not None:
            numbers.append(int(match.group(1)))
    return sorted(numbers)


# -- the record -----------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    number: int
    created_at: str
    user: str
    source: str
    sha256: str
    yaml: str
    reason: str | None = None
    redacted: tuple[dict[str, Any], ...] = ()
    restored_from: int | None = None
    imported_from: str | None = None

    @property
    def key(self) -> str:
        return version_key(self.number)

    @property
    def size(self) -> int:
        return len(self.yaml.encode("utf-8"))

    @property
    def redacted_paths(self) -> list[str]:
        return [str(entry["path"]) for entry in self.redacted]

    def to_json(self) -> str:
        record: dict[str, Any] = {
            "version": self.number,
            "createdAt": self.created_at,
            "user": self.user,
        }
        if self.reason is not None:
            record["reason"] = self.reason
        record["source"] = self.source
        record["sha256"] = self.sha256
        record["bytes"] = self.size
        if self.redacted:
            record["redacted"] = list(self.redacted)
        if self.restored_from is not None:
            record["restoredFrom"] = self.restored_from
        if self.imported_from is not None:
            record["importedFrom"] = self.imported_from
        record["yaml"] = self.yaml
        return dumps(record)

    @classmethod
    def from_json(cls, number: int, text: str) -> Version:
        """Parse a stored record (malformed: InvalidDataError; bad sha256: VerificationError)."""
        where = version_key(number)
        try:
            record = loads(text)
        except ValueError:
            raise InvalidDataError(f"{where}: not JSON") from None
        if not isinstance(record, dict) or not isinstance(record.get("yaml"), str):
            raise InvalidDataError(f"{where}: not a config version record (no yaml text)")
        yaml_text = record["yaml"]
        redacted = record.get("redacted") or []
        if not isinstance(redacted, list) or not all(
            isinstance(entry, dict) and "path" in entry for entry in redacted
        ):
            raise InvalidDataError(f"{where}: malformed redacted list")
        version = cls(
            number=number,
            created_at=str(record.get("createdAt", "")),
            user=str(record.get("user", "")),
            source=str(record.get("source", "snapshot")),
            sha256=str(record.get("sha256", "")),
            yaml=yaml_text,
            reason=record.get("reason") if isinstance(record.get("reason"), str) else None,
            redacted=tuple(redacted),
            restored_from=_int_or_none(record.get("restoredFrom")),
            imported_from=_str_or_none(record.get("importedFrom")),
        )
        if version.sha256 != sha256_text(yaml_text):
            raise VerificationError(
                f"{where}: checksum mismatch: the stored YAML does not match its sha256"
            )
        return version

    def row(self, current: bool) -> dict[str, Any]:
        """The stable JSON row of ``config history``."""
        return {
            "version": self.number,
            "created_at": self.created_at,
            "user": self.user,
            "reason": self.reason,
            "source": self.source,
            "bytes": self.size,
            "sha256": self.sha256,
            "redacted": self.redacted_paths,
            "restored_from": self.restored_from,
            "imported_from": self.imported_from,
            "current": current,
        }

    def as_dict(self) -> dict[str, Any]:
        """The stable JSON object of ``config show``: the history row, redactions and text."""
        document = self.row(current=False)
        del document["current"]
        document["redactions"] = list(self.redacted)
        document["yaml"] = self.yaml
        return document


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass
class Listing:
    versions: list[Version] = field(default_factory=list)
    #: Records under config:v<N> that could not be read (one message each).
    problems: list[str] = field(default_factory=list)

    @property
    def newest(self) -> Version | None:
        return self.versions[-1] if self.versions else None

    def by_sha(self, sha: str) -> Version | None:
        """The newest version whose text has this sha256."""
        return next((v for v in reversed(self.versions) if v.sha256 == sha), None)


def list_versions(provider: StorageProvider) -> Listing:
    """Every readable version, ascending by number; unreadable ones as problems."""
    listing = Listing()
    found: list[tuple[int, str]] = []
    for key, value in provider.scan(PREFIX):
        match = _KEY.match(key)
        if match is not None:
            found.append((int(match.group(1)), value))
    for number, value in sorted(found):
        try:
            listing.versions.append(Version.from_json(number, value))
        except (InvalidDataError, VerificationError) as exc:
            listing.problems.append(exc.message)
    return listing


def get_version(provider: StorageProvider, number: int) -> Version:
    value = provider.get(version_key(number))
    if value is None:
        numbers = version_numbers(provider)
        hint = None
        if numbers:
            hint = f"stored: {_ranges(numbers)}"
            if number < numbers[0]:
                hint += f"; only the {KEEP} newest are kept"
        else:
            hint = "no versions stored yet: run `config snapshot`"
        raise NotFoundError(f"config version v{number} not found", hint=hint)
    return Version.from_json(number, value)


def _ranges(numbers: list[int]) -> str:
    return f"v{numbers[0]}" if len(numbers) == 1 else f"v{numbers[0]}..v{numbers[-1]}"


def current_number(listing: Listing, config: ConfigFile | None) -> int | None:
    """The newest version the file on disk matches (secrets compared masked).

    The exact text is compared first; the file is scanned and masked only
    when some version was stored redacted (so `history` rarely needs YAML).
    """
    if config is None:
        return None
    found = listing.by_sha(config.sha256)
    if found is None and any(v.redacted for v in listing.versions):
        found = listing.by_sha(sha256_text(config.masked()))
    return found.number if found is not None else None


# -- writing versions -------------------------------------------------------------


def check_reason(reason: str | None) -> None:
    """A reason is free text stored as is: it must not carry a secret either."""
    if reason is not None and secrets_guard.pattern_kind(reason) is not None:
        raise RefusedError("the reason looks like it contains a secret; it was not stored")


def refuse_secrets(findings: list[secrets_guard.Finding], what: str) -> None:
    paths = ", ".join(f.describe() for f in findings)
    raise RefusedError(
        f"{what} holds plain-text secrets at {paths}",
        hint="use secret: references, or pass --redact to store it with those values masked",
    )


def store_version(
    provider: StorageProvider,
    text: str,
    *,
    source: str,
    redacted: list[secrets_guard.Finding] | tuple[dict[str, Any], ...] = (),
    reason: str | None = None,
    created_at: str | None = None,
    restored_from: int | None = None,
    imported_from: str | None = None,
    target: str | None = None,
    audit_details: dict[str, Any] | None = None,
) -> tuple[Version, list[int]]:
    """Write ``text`` (already free of secrets) as the next version; evict beyond :data:`KEEP`.

    Returns the version and the numbers evicted. Writes one audit record.
    """
    assert source in SOURCES
    if secrets_guard.scan(text).findings:  # the last line of defence
        raise RefusedError("refusing to store a config version that still holds secrets")
    check_reason(reason)
    numbers = version_numbers(provider)
    number = (numbers[-1] if numbers else 0) + 1
    while provider.get(version_key(number)) is not None:  # never overwrite one
        number += 1
    entries = tuple(f.as_record() if isinstance(f, secrets_guard.Finding) else f for f in redacted)
    version = Version(
        number=number,
        created_at=created_at or now_iso(),
        user=audit.os_user(),
        source=source,
        sha256=sha256_text(text),
        yaml=text,
        reason=reason,
        redacted=entries,
        restored_from=restored_from,
        imported_from=imported_from,
    )
    provider.set(version.key, version.to_json())
    kept = sorted([*numbers, number])
    evicted = kept[:-KEEP] if len(kept) > KEEP else []
    if evicted:
        provider.delete_many([version_key(n) for n in evicted])
    details: dict[str, Any] = {"version": number, "source": source, "sha256": version.sha256}
    if version.redacted:
        details["redacted"] = version.redacted_paths
    if restored_from is not None:
        details["restored_from"] = restored_from
    if imported_from is not None:
        details["imported_from"] = imported_from
    if evicted:
        details["evicted"] = evicted
    details.update(audit_details or {})
    audit.record(
        provider,
        f"config_{source}",
        target=target,
        counts={"stored": 1, "evicted": len(evicted)},
        details=details,
    )
    return version, evicted


@dataclass
class SnapshotResult:
    config: str
    stored: bool
    version: int | None
    sha256: str
    bytes: int
    redacted: list[str]
    evicted: list[int]
    dry_run: bool
    warnings: list[str] = field(default_factory=list)
    #: The file equals the newest version: nothing to store.
    unchanged: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "stored": self.stored,
            "unchanged": self.unchanged,
            "version": self.version,
            "sha256": self.sha256,
            "bytes": self.bytes,
            "redacted": self.redacted,
            "evicted": self.evicted,
            "dry_run": self.dry_run,
        }


def snapshot(
    provider: StorageProvider,
    config_path: Path,
    *,
    reason: str | None = None,
    redact: bool = False,
    dry_run: bool = False,
) -> SnapshotResult:
    """Store the file as a new version, unless it equals the newest one."""
    check_reason(reason)
    with config_lock(config_path) if not dry_run else contextlib.nullcontext():
        config = read_config(config_path)
        assert config is not None
        scan = secrets_guard.scan(config.text)
        try:
            stored_text, findings = redaction.redact(config.text, scan)
        except RefusedError:
            if not redact:
                refuse_secrets(scan.findings, str(config_path))
            raise
        result = SnapshotResult(
            config=str(config_path),
            stored=False,
            version=None,
            sha256=sha256_text(stored_text),
            bytes=len(stored_text.encode("utf-8")),
            redacted=[f.describe() for f in findings],
            evicted=[],
            dry_run=dry_run,
            warnings=[] if scan.parsed and scan.valid else _validity_warnings(config.text),
        )
        newest = list_versions(provider).newest
        if newest is not None and newest.sha256 == result.sha256:
            result.version, result.unchanged = newest.number, True
            return result
        if findings and not redact:
            refuse_secrets(findings, str(config_path))
        if dry_run:
            numbers = version_numbers(provider)
            result.version = (numbers[-1] if numbers else 0) + 1
            result.evicted = sorted([*numbers, result.version])[:-KEEP]
            return result
        version, result.evicted = store_version(
            provider,
            stored_text,
            source="snapshot",
            redacted=findings,
            reason=reason,
            target=str(config_path),
        )
    result.stored = True
    result.version = version.number
    return result


def _validity_warnings(text: str) -> list[str]:
    try:
        parse_yaml_mapping(text, "the file")
    except InvalidDataError as exc:
        return [f"{exc.message}; stored anyway (a rollback to it will be refused)"]
    return []
