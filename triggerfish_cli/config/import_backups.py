"""Importing the gateway's own copies of ``triggerfish.yaml`` as versions.

Before each config write the gateway copies the file to
``<base>/backups/triggerfish.yaml.<ISO time with ':' as '-'>`` (for example
``triggerfish.yaml.2026-02-16T14-30-45.123Z``) and keeps the 10 newest. The
directory is always ``<base>/backups`` and the prefix always
``triggerfish.yaml.``, whatever config path the gateway was given: so they
are here too (:func:`default_dir`, :data:`PREFIX`), not beside the file.
``config import-backups`` stores them as versions (source ``import``,
``createdAt`` the time in the name), oldest first, skipping:

- files whose name does not have that exact form;
- copies already stored (same text after masking, or the same file name
  recorded as ``importedFrom``), and repeats of a copy imported just before;
- copies older than the newest stored version, unless ``include_older``:
  they would take the newest numbers and push newer versions out of the
  rolling window;
- copies beyond the window: of more than :data:`KEEP` candidates only the
  newest are imported, since the others would be evicted at once.

Copies holding plain-text secrets refuse the whole import (nothing stored)
unless ``redact``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli import paths
from triggerfish_cli.config import redaction, secrets_guard
from triggerfish_cli.config.files import backup_time, config_lock, read_config, sha256_text
from triggerfish_cli.config.versions import KEEP, list_versions, store_version, version_numbers
from triggerfish_cli.errors import (
    InvalidDataError,
    NotFoundError,
    RefusedError,
    TriggerfishError,
)
from triggerfish_cli.storage.provider import StorageProvider

#: The name the gateway's copies start with (then ``.`` and the time).
PREFIX = "triggerfish.yaml"


def default_dir() -> Path:
    """Where the gateway writes its copies: ``<base>/backups``, whatever the config path."""
    return paths.config_backups_dir()


@dataclass
class Candidate:
    file: str
    created_at: str
    text: str = ""
    findings: list[secrets_guard.Finding] = field(default_factory=list)
    skipped: str | None = None
    version: int | None = None

    def as_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"file": self.file, "created_at": self.created_at}
        if self.skipped is not None:
            row["skipped"] = self.skipped
        else:
            row["version"] = self.version
            row["redacted"] = [f.describe() for f in self.findings]
        return row


@dataclass
class ImportPlan:
    directory: Path
    candidates: list[Candidate]

    @property
    def to_import(self) -> list[Candidate]:
        return [c for c in self.candidates if c.skipped is None]

    def as_dict(self, dry_run: bool, evicted: list[int]) -> dict[str, Any]:
        return {
            "dir": str(self.directory),
            "imported": [c.as_dict() for c in self.to_import],
            "skipped": [c.as_dict() for c in self.candidates if c.skipped is not None],
            "evicted": evicted,
            "dry_run": dry_run,
        }


def plan_import(
    provider: StorageProvider,
    directory: Path,
    stem: str = PREFIX,
    *,
    redact: bool = False,
    include_older: bool = False,
    missing_ok: bool = False,
) -> ImportPlan:
    """Which backup copies would be imported, and why the others would not."""
    if not directory.is_dir():
        if missing_ok and not directory.exists():
            return ImportPlan(directory, [])
        raise NotFoundError(f"{directory}: no such directory (the gateway's config backups)")
    found: list[Candidate] = []
    for entry in directory.iterdir():
        created_at = backup_time(entry.name, stem)
        if created_at is not None and entry.is_file():
            found.append(Candidate(entry.name, created_at))
    found.sort(key=lambda c: (c.created_at, c.file))
    listing = list_versions(provider)
    known = {v.sha256: v.number for v in listing.versions}
    names = {v.imported_from: v.number for v in listing.versions if v.imported_from}
    newest = listing.newest
    refusals: list[str] = []
    batch: dict[str, str] = {}  # sha -> the earlier copy in this import
    for candidate in found:
        if candidate.file in names:
            candidate.skipped = f"already stored as v{names[candidate.file]}"
            continue
        if newest is not None and not include_older and candidate.created_at < newest.created_at:
            candidate.skipped = f"older than the newest version v{newest.number}"
            continue
        try:
            config = read_config(directory / candidate.file)
        except TriggerfishError as exc:
            candidate.skipped = exc.message
            continue
        assert config is not None
        try:
            scan = secrets_guard.scan(config.text)
        except InvalidDataError as exc:  # an alias bomb: the whole import stops
            raise InvalidDataError(f"{candidate.file}: {exc.message}; nothing imported") from None
        try:
            candidate.text, candidate.findings = redaction.redact(config.text, scan)
        except RefusedError as exc:
            candidate.skipped = exc.message
            continue
        sha = sha256_text(candidate.text)
        if sha in known:
            candidate.skipped = f"already stored as v{known[sha]}"
        elif sha in batch:
            candidate.skipped = f"same as {batch[sha]}"
        else:
            batch[sha] = candidate.file
            if scan.findings and not redact:
                refusals.append(f"{candidate.file}: {', '.join(scan.paths)}")
    if refusals:
        raise RefusedError(
            "gateway backups hold plain-text secrets; nothing imported: " + "; ".join(refusals),
            hint="pass --redact to import them with those values masked",
        )
    pending = [c for c in found if c.skipped is None]
    for candidate in pending[:-KEEP]:
        candidate.skipped = f"outside the {KEEP}-version window"
    numbers = version_numbers(provider)
    following = (numbers[-1] if numbers else 0) + 1
    for offset, candidate in enumerate(pending[-KEEP:]):
        candidate.version = following + offset  # as a dry run shows them
    return ImportPlan(directory, found)


def predicted_evictions(provider: StorageProvider, plan: ImportPlan) -> list[int]:
    """The versions an import would remove from the window."""
    numbers = [*version_numbers(provider), *(c.version or 0 for c in plan.to_import)]
    return sorted(numbers)[:-KEEP] if len(numbers) > KEEP else []


def apply_import(provider: StorageProvider, plan: ImportPlan, config_path: Path) -> list[int]:
    """Store the planned copies oldest first; the version numbers evicted."""
    evicted: list[int] = []
    with config_lock(config_path):
        for candidate in plan.to_import:
            version, gone = store_version(
                provider,
                candidate.text,
                source="import",
                redacted=candidate.findings,
                reason="gateway backup",
                created_at=candidate.created_at,
                imported_from=candidate.file,
                target=str(plan.directory / candidate.file),
            )
            candidate.version = version.number
            evicted += gone
    return evicted
