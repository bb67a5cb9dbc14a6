"""The payload of a backup as it is written: a logical one's JSON Lines, the sink the
compressed stream goes into (straight into the archive, or through age), and the
trailer that closes it (archive.py has the layout)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.backup.archive import MAX_LINE, sealed_outer, trailer_bytes
from triggerfish_cli.backup.counts import KeyCounter
from triggerfish_cli.backup.crypt import Encryptor, Recipient, seal
from triggerfish_cli.backup.manifest import Manifest, manifest_json
from triggerfish_cli.backup.streams import HashingWriter
from triggerfish_cli.errors import RefusedError


def finish_payload(sink: HashingWriter, manifest: Manifest) -> None:
    manifest.payload_bytes = sink.count
    manifest.payload_sha256 = sink.sha.hexdigest()


class Payload:
    """Where the compressed payload goes: straight into the archive, or through age."""

    def __init__(self, recipients: list[Recipient]) -> None:
        self.recipients = recipients
        #: Encrypted: hashes and counts the encrypted bytes (the outer manifest's).
        self.outer: HashingWriter | None = None

    @contextlib.contextmanager
    def into(self, out: Any) -> Iterator[HashingWriter]:
        """A sink for the payload (hashing the plaintext); encrypted once the block ends."""
        if not self.recipients:
            self.outer = None
            yield HashingWriter(out)
            return
        self.outer = HashingWriter(out)
        encryptor = Encryptor(self.outer, self.recipients)
        try:
            yield HashingWriter(encryptor)
        except BaseException:
            encryptor.abort()
            raise
        encryptor.close()

    def trailer(self, manifest: Manifest) -> bytes:
        if self.outer is None:
            return trailer_bytes(manifest)
        sealed = seal(manifest_json(manifest), self.recipients)
        fingerprints = [recipient.fingerprint for recipient in self.recipients]
        outer = sealed_outer(manifest, self.outer, sealed, fingerprints)
        manifest.recipients, manifest.outer = fingerprints, outer
        return sealed + trailer_bytes(outer)


def json_lines(
    rows: Iterable[tuple[str, str]],
    counter: KeyCounter,
    on_progress: Callable[[int], None] | None,
    notes: list[str] | None = None,
) -> Iterator[bytes]:
    """The logical payload: ``{"key", "value"}`` lines, ASCII; a cell that is not UTF-8
    text in its JSON form (cells.py, ``{"$bytes": <base64>, "type": ...}``), named in ``notes``."""
    encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
    buffer: list[str] = []
    size = 0
    for key, value in rows:
        counter.add(key)
        if cells.is_plain(key) and cells.is_plain(value):
            line = encode({"key": key, "value": value})
        else:
            if notes is not None:
                notes.append(cells.note(key, value, "backed up"))
            line = encode({"key": cells.to_json(key), "value": cells.to_json(value)})
        if len(line) > MAX_LINE:
            raise too_long(key, len(line))
        buffer.append(line)
        size += len(line)
        if size >= 1 << 20:
            yield ("\n".join(buffer) + "\n").encode("ascii")
            if on_progress is not None:
                on_progress(len(buffer))
            buffer, size = [], 0
    if buffer:
        yield ("\n".join(buffer) + "\n").encode("ascii")
        if on_progress is not None:
            on_progress(len(buffer))


def too_long(key: str, length: int) -> RefusedError:
    """A row whose line would pass archive.MAX_LINE: verify would refuse the backup."""
    return RefusedError(
        f"key {cells.name(key)}: its line in a logical backup would be {length} bytes, "
        f"more than the {MAX_LINE} a backup may hold (verify would refuse it): "
        "no backup made",
        hint="a physical backup (without --logical) of a SQLite store has no such bound",
    )
