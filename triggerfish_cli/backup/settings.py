"""The ``backup:`` section of triggerfish.yaml: encryption and S3 server-side encryption.

::

    backup:
      recipients:                  # age or SSH public keys: every backup is encrypted
        - age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p
        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... ops@example
      recipients_file: keys.txt    # or/and a file of them (relative to this file)
      require_encryption: true     # implied by recipients: a plain archive is refused
                                   # (exit 4) unless `backup create --no-encrypt`
      sse: aws:kms                 # S3 destinations: AES256 | aws:kms
      sse_kms_key_id: arn:aws:kms:eu-west-1:111122223333:key/...

Only public keys go here: the identity that decrypts stays elsewhere
(``--identity FILE`` or ``TRIGGERFISH_BACKUP_IDENTITY_FILE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triggerfish_cli.backup.crypt import (
    Recipient,
    parse_recipient,
    read_recipients_file,
    recipients_of,
)
from triggerfish_cli.errors import InvalidDataError, RefusedError, UsageError

if TYPE_CHECKING:
    from triggerfish_cli.settings import Settings

SSE_MODES = ("AES256", "aws:kms")
KEYS = {"recipients", "recipients_file", "require_encryption", "sse", "sse_kms_key_id"}


@dataclass
class BackupSettings:
    recipients: list[str] = field(default_factory=list)
    recipients_file: Path | None = None
    require_encryption: bool = False
    sse: str | None = None
    sse_kms_key_id: str | None = None

    @property
    def has_recipients(self) -> bool:
        return bool(self.recipients) or self.recipients_file is not None


def parse_section(section: Any, config_path: Path) -> BackupSettings:
    where = f"{config_path}: backup"
    if section is None:
        return BackupSettings()
    if not isinstance(section, Mapping):
        raise InvalidDataError(f"{where}: must be a mapping")
    unknown = sorted(str(key) for key in section if key not in KEYS)
    if unknown:
        raise InvalidDataError(
            f"{where}.{unknown[0]}: unknown setting (known: {', '.join(sorted(KEYS))})"
        )
    found = BackupSettings()
    recipients = section.get("recipients")
    if recipients is not None:
        if not isinstance(recipients, list) or not all(
            isinstance(item, str) and item.strip() for item in recipients
        ):
            raise InvalidDataError(f"{where}.recipients: must be a list of public keys")
        found.recipients = [item.strip() for item in recipients]
    raw_file = section.get("recipients_file")
    if raw_file is not None:
        if not isinstance(raw_file, str) or not raw_file.strip():
            raise InvalidDataError(f"{where}.recipients_file: must be a file path")
        path = Path(raw_file).expanduser()
        found.recipients_file = path if path.is_absolute() else config_path.parent / path
    required = section.get("require_encryption", False)
    if not isinstance(required, bool):
        raise InvalidDataError(f"{where}.require_encryption: must be true or false")
    found.require_encryption = required or found.has_recipients
    found.sse, found.sse_kms_key_id = check_sse(
        section.get("sse"), section.get("sse_kms_key_id"), f"{where}."
    )
    return found


def check_sse(sse: Any, key_id: Any, where: str) -> tuple[str | None, str | None]:
    """``sse`` (AES256 | aws:kms) and ``sse_kms_key_id`` (only with aws:kms)."""
    if sse is not None and sse not in SSE_MODES:
        raise InvalidDataError(f"{where}sse: {sse!r} is not one of {', '.join(SSE_MODES)}")
    if key_id is not None:
        if not isinstance(key_id, str) or not key_id.strip():
            raise InvalidDataError(f"{where}sse_kms_key_id: must be a KMS key id or ARN")
        if sse is None:
            sse = "aws:kms"
        elif sse != "aws:kms":
            raise InvalidDataError(f"{where}sse_kms_key_id: only with sse: aws:kms")
    return sse, key_id


def sse_args(sse: str | None, key_id: str | None) -> dict[str, str]:
    """The put_object / multipart arguments of S3 server-side encryption."""
    extra: dict[str, str] = {}
    if sse:
        extra["ServerSideEncryption"] = sse
    if key_id:
        extra["SSEKMSKeyId"] = key_id
    return extra


def check_section(section: Any, config_path: Path) -> None:
    """Validator of ``backup:`` for ``settings.OUR_SECTIONS`` (the keys parse, too)."""
    found = parse_section(section, config_path)
    for text in found.recipients:
        try:
            parse_recipient(text, f"{config_path}: backup.recipients")
        except UsageError as exc:
            raise InvalidDataError(exc.message) from None
    if found.recipients_file is not None:
        read_recipients_file(found.recipients_file)


def backup_settings(settings: Settings) -> BackupSettings:
    if not settings.text or "backup" not in settings.text:
        return BackupSettings()
    return parse_section(settings.section("backup"), settings.path)


def configured_recipients(found: BackupSettings, origin: str) -> list[Recipient]:
    files = [found.recipients_file] if found.recipients_file is not None else []
    try:
        return recipients_of(found.recipients, files, origin)
    except UsageError as exc:
        raise InvalidDataError(exc.message) from None


def choose_recipients(
    found: BackupSettings,
    texts: list[str],
    files: list[Path],
    *,
    no_encrypt: bool,
    origin: str,
) -> list[Recipient]:
    """The recipients of a new backup: ``--recipient``/``--recipients-file`` when given
    (they replace the configured ones), else ``backup: recipients``; none with
    ``no_encrypt``. A plain archive where the settings require encryption is refused
    (exit 4) unless ``no_encrypt`` says so."""
    if no_encrypt:
        if texts or files:
            raise UsageError("--no-encrypt and --recipient/--recipients-file exclude each other")
        return []
    if texts or files:
        return recipients_of(texts, files, "--recipient")
    if found.has_recipients:
        return configured_recipients(found, origin)
    if found.require_encryption:
        raise RefusedError(
            f"{origin}: backup.require_encryption is set and no recipient is given: "
            "no unencrypted backup written",
            hint="pass --recipient/--recipients-file, or --no-encrypt to write a plain one",
        )
    return []
