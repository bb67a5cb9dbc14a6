"""Rolling ``triggerfish.yaml`` back to a stored version: a plan, then a careful apply.

:func:`plan_rollback` reads everything and decides everything, writing
nothing: the target (default: the newest version that differs from the
file, i.e. the version before the newest once the file is the newest), the
text to write with any redacted secrets supplied again, its validation, the
masked diff, and whether the current file must be snapshotted first.

:func:`apply_rollback` then, under the config lock: re-reads the file and
refuses if it changed since the plan; snapshots it if it is not already a
version; keeps a gateway-style copy in ``backups/`` when the file holds
plain-text secrets the store does not keep; writes the new text atomically
(temp file, fsync, rename) with the file's mode, through a symlink to its
target; and records the rollback as a new version. History is never
rewritten. A failed write leaves the old file exactly as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli.config import diff as config_diff
from triggerfish_cli.config import redaction, secrets_guard, yaml_paths
from triggerfish_cli.config import storage as config_storage
from triggerfish_cli.config.files import (
    ConfigFile,
    config_lock,
    read_config,
    sha256_text,
    write_backup_copy,
)
from triggerfish_cli.config.versions import (
    Listing,
    Version,
    check_reason,
    get_version,
    list_versions,
    refuse_secrets,
    store_version,
)
from triggerfish_cli.errors import (
    BusyError,
    InvalidDataError,
    NotFoundError,
    RefusedError,
    TriggerfishError,
    UsageError,
)
from triggerfish_cli.fileio import atomic_writer
from triggerfish_cli.serialization import dumps, loads, now_iso
from triggerfish_cli.settings import parse_yaml_mapping
from triggerfish_cli.storage.provider import StorageProvider

#: Mode of a config file the rollback creates (it was missing): owner only.
NEW_FILE_MODE = 0o600


@dataclass
class SecretSupply:
    """Where the values of a redacted version come from, in this order."""

    #: Given by the operator (``--secrets-file``): dotted path -> value.
    values: Mapping[str, Any] = field(default_factory=dict)
    #: Take the value at the same path in the current file (``--secrets-from-current``).
    from_current: bool = False
    #: Ask for each still-missing value (hidden input on a TTY); None: never ask.
    prompt: Callable[[str], str] | None = None


@dataclass
class RollbackPlan:
    config_path: Path
    target: Version
    current: ConfigFile | None
    #: The version the file on disk already is (masked comparison), if any.
    current_version: int | None
    new_text: str
    #: What the rollback's own version will hold (new_text, secrets masked).
    record_text: str
    record_redactions: list[secrets_guard.Finding]
    #: Plain-text secrets in the current file (masked in its snapshot).
    current_findings: list[secrets_guard.Finding]
    diff: str
    changes: list[dict[str, Any]] | None
    warnings: list[str]
    supplied: list[str]
    #: Redacted paths no value was found for (dry runs only: a real run refuses).
    secrets_missing: list[str] = field(default_factory=list)
    #: What the snapshot of the current file taken first will hold.
    snapshot_text: str = ""
    snapshot_redactions: list[secrets_guard.Finding] = field(default_factory=list)

    @property
    def noop(self) -> bool:
        return self.current is not None and self.current.text == self.new_text

    @property
    def needs_snapshot(self) -> bool:
        return self.current is not None and self.current_version is None

    def as_dict(self, *, dry_run: bool = False) -> dict[str, Any]:
        """The stable JSON object of ``config rollback`` (before anything is done)."""
        return {
            "config": str(self.config_path),
            "target": self.target.number,
            "from_version": self.current_version,
            "changed": not self.noop,
            "snapshot_first": self.needs_snapshot and not self.noop,
            "secrets_supplied": [p for p in self.supplied if p not in self.secrets_missing],
            "secrets_missing": self.secrets_missing,
            "bytes": len(self.new_text.encode("utf-8")),
            "sha256": sha256_text(self.new_text),
            "diff": self.diff,
            "warnings": self.warnings,
            "snapshot": None,
            "version": None,
            "backup_copy": None,
            "written": False,
            "evicted": [],
            "dry_run": dry_run,
        }


def default_target(listing: Listing, current_sha: str | None) -> Version:
    """The newest version that differs from the file on disk."""
    for version in reversed(listing.versions):
        if version.sha256 != current_sha:
            return version
    if not listing.versions:
        raise NotFoundError("no config versions stored", hint="run `config snapshot` first")
    raise NotFoundError(
        "every stored version equals the file on disk: nothing to roll back to",
        hint="see `config history`",
    )


def plan_rollback(
    provider: StorageProvider,
    config_path: Path,
    target: int | None = None,
    *,
    supply: SecretSupply | None = None,
    redact: bool = False,
    dry_run: bool = False,
    storage: str = "refuse",
) -> RollbackPlan:
    """Decide everything a rollback will do; write nothing.

    Refuses (exit 4) when the current file holds plain-text secrets and must
    be snapshotted without ``redact``, or when the target's redacted values
    are not supplied (a dry run lists them in ``secrets_missing`` instead);
    exit 8 when the text to write is not valid. When the version's storage:
    section differs from the file's, ``storage`` decides (see
    :mod:`~triggerfish_cli.config.storage`): refuse (exit 4; a dry run
    warns), keep the file's section, or switch to the version's.
    """
    if storage not in config_storage.CHOICES:
        raise UsageError(f"--storage must be one of {', '.join(config_storage.CHOICES)}")
    supply = supply or SecretSupply()
    listing = list_versions(provider)
    current = read_config(config_path, missing_ok=True)
    masked_current = current.masked() if current is not None else None
    current_sha = sha256_text(masked_current) if masked_current is not None else None
    version = (
        get_version(provider, target)
        if target is not None
        else default_target(listing, current_sha)
    )
    matching = listing.by_sha(current_sha) if current_sha is not None else None
    current_version = matching.number if matching is not None else None
    current_findings = secrets_guard.scan(current.text).findings if current is not None else []

    values, supplied, missing = _gather_secrets(version, current, supply, dry_run)
    new_text = redaction.restore(version.yaml, list(version.redacted), values)
    before = config_storage.section_of(current.text if current is not None else None)
    after = config_storage.section_of(new_text)
    storage_note: str | None = None
    change = ""
    if config_storage.readable(before) and config_storage.readable(after) and before != after:
        change = (
            f"v{version.number} has {config_storage.describe(after)} where {config_path.name} "
            f"has {config_storage.describe(before)}"
        )
        if storage == "keep":
            new_text = config_storage.keep_current(new_text, current.text if current else None)
            storage_note = f"{change}: keeping the file's storage: section (--storage keep)"
        elif storage == "switch":
            storage_note = (
                f"{change}: the rollback switches the store (--storage switch); this tool and "
                "the gateway use the other store from their next start"
            )
        else:
            storage_note = f"{change}: the rollback will be refused without --storage keep|switch"
    report = config_diff.check_writable(new_text, config_path, f"v{version.number}")
    warnings = [f"v{version.number}: {problem}" for problem in report.warnings]
    if storage_note is not None:
        if storage == "refuse" and not dry_run:
            raise RefusedError(
                f"{change}: rolling back would move this tool "
                "and the gateway to another store; nothing was written",
                hint="--storage keep rolls back everything else and keeps the current section; "
                "--storage switch takes the version's",
            )
        warnings.append(storage_note)

    record_scan = secrets_guard.scan(new_text)
    extra = [f for f in record_scan.findings if f.describe() not in set(supplied)]
    if extra and not redact:
        refuse_secrets(extra, f"v{version.number}")
    record_text, record_redactions = redaction.redact(new_text, record_scan)

    plan = RollbackPlan(
        config_path=config_path,
        target=version,
        current=current,
        current_version=current_version,
        new_text=new_text,
        record_text=record_text,
        record_redactions=record_redactions,
        current_findings=current_findings,
        diff="",
        changes=None,
        warnings=warnings,
        supplied=supplied,
        secrets_missing=missing,
    )
    if plan.needs_snapshot and not plan.noop:
        assert current is not None
        if current_findings and not redact:
            refuse_secrets(current_findings, f"{config_path} (snapshotted before the rollback)")
        plan.snapshot_text, plan.snapshot_redactions = redaction.redact(current.text)
    shown_current = masked_current if masked_current is not None else ""
    shown_new = redaction.display_mask(new_text)
    label = (
        f"{config_path.name} (on disk)" if current is not None else f"{config_path.name} (missing)"
    )
    plan.diff = config_diff.unified(shown_current, shown_new, label, f"v{version.number}")
    try:
        plan.changes = config_diff.changes(shown_current, shown_new, label, f"v{version.number}")
    except InvalidDataError:
        plan.changes = None  # the current file is not valid YAML: the text diff says it all
    return plan


def _gather_secrets(
    version: Version, current: ConfigFile | None, supply: SecretSupply, dry_run: bool
) -> tuple[dict[str, Any], list[str], list[str]]:
    """Values for the target's redacted paths: given, from the current file, or asked for.

    Returns the values, the paths, and (dry run only) the paths still missing,
    which keep the marker.
    """
    wanted = redaction.needed(list(version.redacted))
    if not wanted:
        return {}, [], []
    values: dict[str, Any] = {}
    for path in wanted:
        if path in supply.values:
            values[path] = supply.values[path]
    if supply.from_current and current is not None:
        from_file = _current_values(current)
        for path in wanted:
            if path not in values and path in from_file:
                values[path] = from_file[path]
    if supply.prompt is not None and not dry_run:
        for path in wanted:
            if path not in values:
                answer = supply.prompt(path)
                if answer != "":
                    values[path] = answer
    missing = [path for path in wanted if path not in values]
    if missing and dry_run:
        values.update({path: secrets_guard.MARKER for path in missing})
    elif missing:
        raise RefusedError(
            f"v{version.number} was stored with redacted values at {', '.join(missing)}; "
            "they must be supplied again",
            hint="--secrets-from-current, --secrets-file FILE, or run it on a TTY to be asked",
        )
    return values, wanted, missing


def parse_secret_values(text: str, origin: str) -> dict[str, Any]:
    """A secrets file: dotted path -> value, flat or nested like the config itself.

    ``channels.telegram.botToken: ...`` and ``channels: {telegram: {botToken: ...}}``
    mean the same. Parse errors name line and column, never a value.
    """
    values: dict[str, Any] = {}
    for key, value in parse_yaml_mapping(text, origin).items():
        if isinstance(value, (dict, list)):
            values.update(yaml_paths.leaves({key: value}))
        else:
            values[str(key)] = value
    return values


def _current_values(current: ConfigFile) -> dict[str, Any]:
    try:
        document = parse_yaml_mapping(current.text, str(current.path))
    except InvalidDataError:
        return {}
    return {
        path: value
        for path, value in yaml_paths.leaves(document).items()
        if isinstance(value, (str, int, float))
        and not isinstance(value, bool)
        and value != secrets_guard.MARKER
    }


def apply_rollback(
    provider: StorageProvider, plan: RollbackPlan, *, reason: str | None = None
) -> dict[str, Any]:
    """Carry out a plan (see the module docstring); the result as a JSON-able object."""
    check_reason(reason)
    result = plan.as_dict()
    if plan.noop:
        return result
    path = plan.config_path
    with config_lock(path):
        now = read_config(path, missing_ok=True)
        before = plan.current.text if plan.current is not None else None
        if (now.text if now is not None else None) != before:
            raise BusyError(
                f"{path} changed since the rollback was planned; nothing was written",
                hint="run the rollback again to see the new diff",
            )
        if plan.current is not None and plan.needs_snapshot:
            snap, evicted = store_version(
                provider,
                plan.snapshot_text,
                source="snapshot",
                redacted=plan.snapshot_redactions,
                reason=f"before rollback to v{plan.target.number}",
                target=str(path),
            )
            result["snapshot"] = snap.number
            result["evicted"] += evicted
        mode = plan.current.mode if plan.current is not None else NEW_FILE_MODE
        try:
            if plan.current is not None and plan.current_findings:
                result["backup_copy"] = str(write_backup_copy(plan.current))
        except TriggerfishError as exc:
            raise TriggerfishError(
                f"rollback not written: {exc.message}; {path} is unchanged"
            ) from None
        # Recorded before the file is written: a run killed (or failing) from here on
        # is finished by the next config command (finish_pending).
        pending = Pending(
            str(path),
            plan.target.number,
            sha256_text(plan.new_text),
            plan.record_text,
            [f.as_record() for f in plan.record_redactions],
            reason or f"rollback to v{plan.target.number}",
            result["backup_copy"],
            now_iso(),
        )
        provider.set(PENDING_KEY, pending.dump())
        try:
            _write_file(path, plan.new_text, mode)
        except TriggerfishError as exc:
            with contextlib.suppress(TriggerfishError):
                provider.delete(PENDING_KEY)  # nothing to finish: nothing was written
            # the same kind (disk full: exit 9, cannot write)
            raise type(exc)(f"rollback not written: {exc.message}; {path} is unchanged") from None
        result["written"] = True
        try:
            version, evicted = _record(provider, pending)
        except TriggerfishError as exc:
            raise type(exc)(
                f"{path} was rolled back to v{plan.target.number}, but recording it as a "
                f"version failed: {exc.message}",
                hint="the next config command records it (`config history` will do)",
            ) from None
    result["version"] = version.number
    result["evicted"] += evicted
    return result


# -- a rollback interrupted between writing the file and recording it ---------------

#: The journal of a rollback under way: written before the file, removed once the
#: rollback is recorded as a version (our own key namespace, never the gateway's).
PENDING_KEY = "tfadmin:config-rollback"


def _write_file(path: Path, text: str, mode: int) -> None:
    """The new text, atomically (the kill tests stop the rollback just before this).

    A symlinked config (kept in git elsewhere) stays a link and its target is
    written, when the link cannot have been planted by someone else; a link that
    could have been is replaced, the file it names untouched (fileio.atomic_writer).
    """
    with atomic_writer(path, mode=mode, binary=True) as handle:
        handle.write(text.encode("utf-8"))


@dataclass
class Pending:
    """What a rollback under way will record: enough to record it without its plan."""

    path: str
    target: int
    #: sha256 of the text written to the file: shows whether the write happened.
    sha256: str
    record_text: str
    redactions: list[dict[str, Any]]
    reason: str
    backup_copy: str | None
    started: str

    def dump(self) -> str:
        return dumps(self.__dict__)

    @classmethod
    def load(cls, text: str) -> Pending | None:
        try:
            return cls(**loads(text))
        except (ValueError, TypeError):
            return None


def _record(provider: StorageProvider, pending: Pending) -> tuple[Version, list[int]]:
    """Record the rollback as a version, unless a run before did; then drop the journal."""
    listing = list_versions(provider)
    done = [
        v
        for v in listing.versions
        if v.source == "rollback"
        and v.restored_from == pending.target
        and v.sha256 == sha256_text(pending.record_text)
        and v.created_at >= pending.started
    ]
    evicted: list[int] = []
    if done:
        version = done[-1]
    else:
        version, evicted = store_version(
            provider,
            pending.record_text,
            source="rollback",
            redacted=tuple(pending.redactions),
            reason=pending.reason,
            restored_from=pending.target,
            target=pending.path,
            audit_details={"backupCopy": pending.backup_copy} if pending.backup_copy else None,
        )
    _drop_journal(provider)
    return version, evicted


def _drop_journal(provider: StorageProvider) -> None:
    """The rollback is recorded: its journal goes (the kill tests stop just before)."""
    provider.delete(PENDING_KEY)


def finish_pending(provider: StorageProvider) -> str | None:
    """Finish a rollback that was killed or failed after its journal was written.

    The file holds the rollback's text (its write happened): record the version
    now. It does not: the write never happened (or the file changed since), so
    there is nothing to record; the journal goes either way. Returns what was
    done, for the operator; None when no rollback was pending.
    """
    text = provider.get(PENDING_KEY)
    if text is None:
        return None
    pending = Pending.load(text)
    if pending is None:
        provider.delete(PENDING_KEY)
        return f"dropped an unreadable {PENDING_KEY} record"
    path = Path(pending.path)
    with config_lock(path):
        current = read_config(path, missing_ok=True)
        if current is not None and sha256_text(current.text) == pending.sha256:
            version, _ = _record(provider, pending)
            return (
                f"finished an interrupted rollback of {path} to v{pending.target}: "
                f"recorded as v{version.number}"
            )
        provider.delete(PENDING_KEY)
        return (
            f"an interrupted rollback of {path} to v{pending.target} had not written the "
            "file: nothing to finish"
        )
