"""Encrypted backups: age, through ``pyrage`` (the Python bindings of rage).

Recipients are age public keys (``age1...``) or SSH public keys
(``ssh-ed25519 ...``, ``ssh-rsa ...``): backing up needs only those.
Verifying or restoring the contents needs an identity file: an age
identity file (``AGE-SECRET-KEY-1...`` lines, as ``age-keygen`` or
``backup keygen`` write) or an unencrypted OpenSSH private key.

The payload goes through age as one stream (age's STREAM: 64 KiB chunks,
each authenticated), pushed by the compressor and pulled by the
decompressor, so memory stays bounded whatever the store's size. pyrage
holds the GIL while it encrypts, so the stream runs on a thread of its own
beside the compression threads (zstd releases the GIL).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli.errors import (
    InvalidDataError,
    NotFoundError,
    RefusedError,
    UsageError,
    VerificationError,
    write_error,
)
from triggerfish_cli.fileio import make_directory
from triggerfish_cli.threads import background

AGE_MAGIC = b"age-encryption.org/v1\n"
#: The environment variable that names an identity file (never the key itself).
IDENTITY_ENV = "TRIGGERFISH_BACKUP_IDENTITY_FILE"
SSH_TYPES = ("ssh-ed25519", "ssh-rsa")
#: Ciphertext blocks queued between the compressor and age (each up to a frame).
QUEUE_DEPTH = 4
#: Plaintext handed from age to the reading side in blocks of this size.
DELIVER_SIZE = 1 << 20


@dataclass(frozen=True)
class Recipient:
    """One public key an archive is encrypted to."""

    text: str
    key: Any = field(compare=False, repr=False)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.text)


def fingerprint(text: str) -> str:
    """A short name of a recipient: ``SHA256:...`` for an SSH key (as ``ssh-keygen -l``
    prints it), ``age:<16 hex>`` (sha256 of the key) for an age key."""
    parts = text.split()
    if parts and parts[0] in SSH_TYPES and len(parts) > 1:
        try:
            blob = base64.b64decode(parts[1], validate=True)
        except ValueError:
            blob = parts[1].encode()
        digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
        return f"SHA256:{digest}"
    return "age:" + hashlib.sha256(text.strip().encode()).hexdigest()[:16]


def parse_recipient(text: str, origin: str) -> Recipient:
    """An ``age1...`` or ``ssh-ed25519``/``ssh-rsa`` public key; bad ones are exit 2."""
    # lazy: pyrage (a Rust extension) only for encrypted backups
    import pyrage

    text = text.strip()
    kind = text.split(maxsplit=1)[0] if text else ""
    try:
        if text.startswith("age1"):
            key = pyrage.x25519.Recipient.from_str(text)
        elif kind in SSH_TYPES:
            key = pyrage.ssh.Recipient.from_str(text)
            text = " ".join(text.split()[:2])  # the comment is no part of the key
        else:
            raise UsageError(
                f"{origin}: {_short(text)!r} is not an age public key (age1...) "
                "or an SSH public key (ssh-ed25519, ssh-rsa)"
            )
    except pyrage.RecipientError as exc:
        raise UsageError(f"{origin}: {_short(text)!r}: not a valid public key ({exc})") from None
    return Recipient(text, key)


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def read_recipients_file(path: Path) -> list[Recipient]:
    """One public key a line; blank lines and ``#`` comments skipped (as ``age -R``)."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such recipients file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidDataError(f"{path}: cannot read the recipients file ({exc})") from None
    found = [
        parse_recipient(line, f"{path}:{number}")
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not found:
        raise UsageError(f"{path}: no public key in the recipients file")
    return found


def recipients_of(texts: Iterable[str], files: Iterable[Path], origin: str) -> list[Recipient]:
    """The recipients named by ``--recipient`` values and ``--recipients-file`` files,
    each once."""
    found: dict[str, Recipient] = {}
    for text in texts:
        recipient = parse_recipient(text, origin)
        found.setdefault(recipient.text, recipient)
    for path in files:
        for recipient in read_recipients_file(path):
            found.setdefault(recipient.text, recipient)
    return list(found.values())


@dataclass
class Identities:
    """The private keys of one or more identity files."""

    keys: list[Any]
    files: list[str]

    def describe(self) -> str:
        return ", ".join(self.files)


def load_identities(paths: Iterable[Path]) -> Identities:
    """Read age identity files and unencrypted OpenSSH private keys."""
    # lazy: pyrage only for encrypted backups
    import pyrage

    keys: list[Any] = []
    files: list[str] = []
    for path in paths:
        path = path.expanduser()
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"{path}: no such identity file") from None
        except IsADirectoryError:
            raise InvalidDataError(f"{path}: a directory, not an identity file") from None
        except OSError as exc:
            raise InvalidDataError(
                f"{path}: cannot read the identity file: {exc.strerror}"
            ) from None
        files.append(str(path))
        if b"-----BEGIN" in data:
            try:
                keys.append(pyrage.ssh.Identity.from_buffer(data))
            except pyrage.IdentityError as exc:
                raise InvalidDataError(f"{path}: not a usable SSH private key ({exc})") from None
            continue
        lines = [
            line.strip()
            for line in data.decode("utf-8", "replace").splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if not lines:
            raise InvalidDataError(f"{path}: no key in the identity file")
        for number, line in enumerate(lines, 1):
            try:
                keys.append(pyrage.x25519.Identity.from_str(line))
            except pyrage.IdentityError:
                raise InvalidDataError(
                    f"{path}: line {number} is not an age identity (AGE-SECRET-KEY-1...)"
                ) from None
    return Identities(keys, files)


def identities_from(paths: list[Path] | None) -> Identities | None:
    """``--identity`` files, else the file ``$TRIGGERFISH_BACKUP_IDENTITY_FILE`` names."""
    if not paths:
        named = os.environ.get(IDENTITY_ENV)
        if not named:
            return None
        paths = [Path(named)]
    return load_identities(paths)


def new_identity(*, created: str) -> tuple[str, str]:
    """A new age identity: its public key, and the identity file's text (age-keygen's)."""
    # lazy: pyrage only for encrypted backups
    import pyrage

    identity = pyrage.x25519.Identity.generate()
    public = str(identity.to_public())
    return public, f"# created: {created}\n# public key: {public}\n{identity}\n"


def keygen(path: Path, *, created: str) -> str:
    """Write a new age identity to ``path`` (0600, never over a file); its public key.

    Missing directories on the way are made 0700; the one it goes in is never a
    symbolic link (exit 9), and the file is never written through one."""
    public, text = new_identity(created=created)
    make_directory(path.parent, no_link=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise RefusedError(
            f"{path}: already exists: an identity is never overwritten",
            hint="choose another path, or move the old one away first",
        ) from None
    except OSError as exc:
        raise write_error(path, exc) from exc
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise write_error(path, exc) from exc
    return public


# -- one-shot (the sealed manifest) ---------------------------------------------------


def seal(data: bytes, recipients: list[Recipient]) -> bytes:
    # lazy: pyrage only for encrypted backups
    import pyrage

    return bytes(pyrage.encrypt(data, [r.key for r in recipients]))


def unseal(data: bytes, identities: Identities, name: str, recipients: list[str]) -> bytes:
    """Decrypt the sealed manifest; a key that opens none of it is exit 4, damage exit 5."""
    # lazy: pyrage only for encrypted backups
    import pyrage

    try:
        return bytes(pyrage.decrypt(data, identities.keys))
    except pyrage.DecryptError as exc:
        raise decrypt_error(exc, name, identities, recipients) from None


def decrypt_error(
    exc: Exception, name: str, identities: Identities, recipients: list[str]
) -> Exception:
    if "no matching keys" in str(exc).lower():
        return RefusedError(
            f"{name}: encrypted to {', '.join(recipients) or 'other keys'}; "
            f"no key of {identities.describe()} opens it",
            hint="give the identity of one of its recipients (--identity FILE)",
        )
    return VerificationError(f"{name}: age: {exc} (the archive is damaged)")


# -- streams --------------------------------------------------------------------------

_END = object()
_ABORT = object()


class Encryptor:
    """A file-like sink: what is written is age-encrypted (one stream) into ``sink``.

    age runs on a thread of its own, fed through a short queue; :meth:`close`
    finishes the stream and raises what went wrong on that thread.
    """

    def __init__(self, sink: Any, recipients: list[Recipient]) -> None:
        # lazy: pyrage only for encrypted backups
        import pyrage

        self._queue: queue.Queue[Any] = queue.Queue(QUEUE_DEPTH)
        self._current = memoryview(b"")
        self._failed: list[BaseException] = []
        self._stopped = threading.Event()
        keys = [r.key for r in recipients]

        def run() -> None:
            try:
                pyrage.encrypt_io(self, sink, keys)
            except BaseException as exc:  # handed to the writing side
                self._failed.append(exc)
                self._stopped.set()

        self._thread = background(run, name="backup-age")

    # the writing side
    def write(self, data: bytes | memoryview) -> int:
        block = data if isinstance(data, bytes) else bytes(data)  # views may be reused
        self._put(block)
        return len(block)

    def flush(self) -> None:
        return None

    def _put(self, item: Any) -> None:
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        self._raise()

    def close(self) -> None:
        self._put(_END)
        self._thread.join()
        self._raise()

    def abort(self) -> None:
        """Stop age part way (the archive is thrown away): it may wait for input."""
        self._stopped.set()
        while self._thread.is_alive():
            try:
                self._queue.put_nowait(_ABORT)
            except queue.Full:
                with contextlib.suppress(queue.Empty):
                    self._queue.get_nowait()
            self._thread.join(0.05)

    def _raise(self) -> None:
        if self._failed:
            exc = self._failed[0]
            if isinstance(exc, OSError | VerificationError):
                raise exc
            raise VerificationError(f"age: {exc}") from exc

    # age's side (pyrage reads the plaintext from here)
    def read(self, size: int = -1) -> bytes:
        while not self._current:
            item = self._queue.get()
            if item is _ABORT:
                raise _Cancelled
            if item is _END:
                self._current = memoryview(b"")
                self._queue.put(_END)  # every later read is the end too
                return b""
            self._current = memoryview(item)
        if size is None or size < 0:
            size = len(self._current)
        out = bytes(self._current[:size])
        self._current = self._current[size:]
        return out


class Decryptor:
    """A file-like source: the plaintext of the age stream ``source`` reads.

    age runs on a thread of its own; :meth:`read` returns exactly ``size``
    bytes unless the stream ends. A wrong key, damage or a cut stream raise
    (:func:`decrypt_error`) where the reader meets them.
    """

    def __init__(
        self, source: Any, identities: Identities, name: str, recipients: list[str]
    ) -> None:
        # lazy: pyrage only for encrypted backups
        import pyrage

        self._queue: queue.Queue[Any] = queue.Queue(16)  # blocks of DELIVER_SIZE: 16 MiB
        self._gathered = bytearray()
        self._pending: list[bytes] = []
        self._held = 0
        self._ended = False
        self._cancelled = threading.Event()

        def end(last: Any) -> None:
            """What was authenticated before the end (or the damage), then ``last``."""
            with contextlib.suppress(_Cancelled):  # the reader stopped reading
                self._hand_over()
                self._deliver(last)

        def run() -> None:
            try:
                pyrage.decrypt_io(source, self, identities.keys)
            except _Cancelled:
                return
            except (pyrage.DecryptError, OSError) as exc:  # OSError: a chunk fails to open
                end(decrypt_error(exc, name, identities, recipients))
            except BaseException as exc:
                end(exc)
            else:
                end(_END)

        self._thread = background(run, name="backup-unage")

    # age's side: it writes 8 KiB at a time; they are handed over in blocks, so the
    # queue (and the GIL it takes) is met once per block, not once per 8 KiB.
    def write(self, data: bytes) -> int:
        self._gathered += data
        if len(self._gathered) >= DELIVER_SIZE:
            self._hand_over()
        return len(data)

    def _hand_over(self) -> None:
        if self._gathered:
            block = bytes(self._gathered)
            self._gathered.clear()
            self._deliver(block)

    def flush(self) -> None:
        return None

    def _deliver(self, item: Any) -> None:
        while True:
            if self._cancelled.is_set():
                raise _Cancelled
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    # the reading side
    def read(self, size: int = -1) -> bytes:
        want = float("inf") if size is None or size < 0 else size
        while self._held < want and not self._ended:
            item = self._queue.get()
            if item is _END:
                self._ended = True
            elif isinstance(item, BaseException):
                self._ended = True
                self._thread.join()
                raise item
            else:
                self._pending.append(item)
                self._held += len(item)
        data = b"".join(self._pending)
        if want < len(data):
            cut = int(want)
            data, rest = data[:cut], data[cut:]
            self._pending, self._held = [rest], len(rest)
        else:
            self._pending, self._held = [], 0
        return data

    def finish(self) -> int:
        """Read to the end of the stream (raising what age met); the bytes left over."""
        left = 0
        while True:
            data = self.read(1 << 20)
            if not data:
                break
            left += len(data)
        self._thread.join()
        return left

    def close(self) -> None:
        """Stop age (it may be blocked on a full queue) and wait for it."""
        self._cancelled.set()
        while self._thread.is_alive():
            try:
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(0.05)

    def __enter__(self) -> Decryptor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Cancelled(Exception):
    pass
