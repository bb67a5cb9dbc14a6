"""``backup verify``: prove that an archive restores to what its manifest says.

One pass over the payload hashes it (sha256 against the manifest) while
decompressing it: a physical backup into a scratch SQLite file that then
passes SQLite's integrity check (``PRAGMA integrity_check``, in pieces on
every core: storage/sqlite/integrity.py), the FTS5 integrity check of the memory
index when the store has one, and the key counts per namespace and memories
per level of the manifest; a logical backup line by line (valid JSON, keys
strictly increasing, the same counts). The verdict is recorded beside the
archive (``<name>.verified``) for ``backup list``, ``prune``, ``status --check``;
a keyless verify of an encrypted archive as such (``contents_checked: false``),
never over the verdict of a verify with the key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli import cells
from triggerfish_cli.backup.archive import MAX_LINE, open_sealed, read_manifest
from triggerfish_cli.backup.big_buffers import reuse_big_buffers
from triggerfish_cli.backup.counts import Counts, KeyCounter
from triggerfish_cli.backup.crypt import AGE_MAGIC, Decryptor, Identities
from triggerfish_cli.backup.decompress import decompress_chunks, decompress_into
from triggerfish_cli.backup.dest import Destination, temp_dir
from triggerfish_cli.backup.manifest import Manifest
from triggerfish_cli.backup.partial import left_out
from triggerfish_cli.backup.scratch import create_private, memory_dir
from triggerfish_cli.backup.streams import LimitedHashingReader
from triggerfish_cli.classification import parse_level
from triggerfish_cli.errors import InvalidDataError, VerificationError
from triggerfish_cli.progress import SILENT, Reporter, counted
from triggerfish_cli.serialization import now_iso
from triggerfish_cli.storage.backends import physical
from triggerfish_cli.threads import cpu_workers


@dataclass
class Verified:
    """The verdict on one archive: what was checked, and what failed."""

    name: str
    manifest: Manifest | None
    failures: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    invalid: bool = False
    #: An encrypted archive checked without its key: the contents were not checked.
    sealed: bool = False

    @property
    def ok(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "kind": self.manifest.kind if self.manifest else None,
            "created": self.manifest.created if self.manifest else None,
            "keys": self.manifest.keys if self.manifest and not self.sealed else None,
            "encrypted": bool(self.manifest and self.manifest.encrypted),
            "contents_checked": not self.sealed,
            "store_id": self.manifest.store_id if self.manifest else None,
            "source": self.manifest.source if self.manifest else None,
            "host": self.manifest.host if self.manifest else None,
            "partial": self.manifest.partial if self.manifest else None,
            "max_taint": self.manifest.max_taint if self.manifest else None,
            "checks": self.checks,
            "failures": self.failures,
        }

    def marker(self, size: int | None = None) -> dict[str, Any]:
        """The verdict beside the archive (``<name>.verified``); a keyless one says so."""
        return {
            "at": now_iso(),
            "size": size,
            "ok": self.ok,
            "sha256": self.manifest.archive_sha256 if self.manifest else None,
            "contents_checked": not self.sealed,
            "checks": self.checks,
            "failures": self.failures,
        }


def verify_file(
    path: Path,
    name: str | None = None,
    *,
    snapshot: Path | Callable[[int], Path] | None = None,
    durable: bool = False,
    progress: Reporter | None = None,
    identities: Identities | None = None,
) -> Verified:
    """Verify a local archive. ``snapshot``: where to decompress a physical one (kept),
    or a function of its size in bytes that says where; ``durable``: fsync it (it is to
    become a store); ``progress``: told each phase.

    An encrypted archive is decrypted with ``identities`` (a key that opens
    none of it is exit 4); without them only what is outside the encryption
    is checked (sizes, the sha256 of the encrypted parts) and the verdict
    says the contents were not."""
    reuse_big_buffers()  # the payload streams in 8 MiB chunks (backup/big_buffers.py)
    progress = progress or SILENT
    name = name or path.name
    outer = read_manifest(path)
    if outer.sealed and identities is None:
        return _verify_sealed(path, name, outer)
    with path.open("rb") as handle:
        manifest = outer
        if outer.sealed:
            assert identities is not None
            manifest = open_sealed(outer, _range_reader(handle), identities, name)
        result = Verified(name, manifest)
        progress.phase(f"checking {name}", manifest.content_bytes or None, unit="bytes")
        handle.seek(0)
        stream = _Stream(handle, outer, manifest, identities, name)
        reader = stream.plain
        try:
            try:
                if manifest.kind == "physical":
                    if snapshot is None:
                        raise ValueError("a physical backup needs a scratch file to verify")
                    if callable(snapshot):
                        snapshot = snapshot(manifest.content_bytes)
                    size = _write_snapshot(reader, manifest, snapshot, durable, progress)
                    counts = None
                else:
                    chunks = decompress_chunks(
                        reader, manifest.compression, manifest.frames, limit=manifest.content_bytes
                    )
                    size, counts = _read_lines(counted(chunks, progress), manifest, result)
            except VerificationError as exc:
                damage = stream.damage()
                if damage:
                    result.failures.append(damage)
                    return result
                if not outer.sealed:  # (encrypted: damage() found its bytes intact, age shut)
                    reader.drain()
                    if reader.sha.hexdigest() != manifest.payload_sha256:
                        result.failures.append(_checksum_failure(manifest, reader))
                        return result
                result.failures.append(f"decompress: {exc.message}")
                return result
            try:
                reader.drain()
                damage = stream.finish()
            except VerificationError as exc:
                damage = stream.damage() or exc.message
            if damage:
                result.failures.append(damage)
                return result
        finally:
            stream.close()
    if outer.sealed:
        result.checks.append(
            f"sha256 {outer.payload_sha256[:16]}... of the encrypted payload matches"
        )
    if reader.sha.hexdigest() != manifest.payload_sha256:
        result.failures.append(_checksum_failure(manifest, reader))
        return result
    result.checks.append(f"sha256 {manifest.payload_sha256[:16]}... matches")
    if size != manifest.content_bytes:
        result.failures.append(
            f"size: {size} bytes decompressed, the manifest says {manifest.content_bytes}"
        )
        return result
    result.checks.append(f"{size} bytes decompressed")
    if manifest.kind == "physical":
        assert isinstance(snapshot, Path)
        progress.phase(f"integrity check of {name}")
        counts = _check_physical(snapshot, manifest, result)
    if counts is not None:
        _compare_counts(manifest, counts, result)
    return result


def _range_reader(handle: Any) -> Any:
    def read_range(offset: int, length: int) -> bytes:
        handle.seek(offset)
        return bytes(handle.read(length))

    return read_range


class _Stream:
    """The payload of an archive as read: the plaintext (hashed), and for an encrypted
    archive the encrypted bytes (hashed) with age between them."""

    def __init__(
        self,
        handle: Any,
        outer: Manifest,
        manifest: Manifest,
        identities: Identities | None,
        name: str,
    ) -> None:
        self.outer = outer
        self.cipher: LimitedHashingReader | None = None
        self.decryptor: Decryptor | None = None
        if outer.sealed:
            assert identities is not None
            self.cipher = LimitedHashingReader(handle, outer.payload_bytes)
            self.decryptor = Decryptor(self.cipher, identities, name, outer.recipients or [])
            self.plain = LimitedHashingReader(self.decryptor, manifest.payload_bytes)  # type: ignore[arg-type]
        else:
            self.plain = LimitedHashingReader(handle, manifest.payload_bytes)

    def close(self) -> None:
        if self.decryptor is not None:
            self.decryptor.close()

    def damage(self) -> str | None:
        """For an encrypted archive that failed: whether its encrypted bytes are damaged."""
        if self.cipher is None:
            return None
        self.close()
        self.cipher.drain()
        return _cipher_failure(self.outer, self.cipher)

    def finish(self) -> str | None:
        """After the plaintext was read: the rest of age's stream, the encrypted bytes' sha."""
        if self.decryptor is None or self.cipher is None:
            return None
        left = self.decryptor.finish()
        if left:
            return f"size: {left} bytes after the payload the manifest describes"
        return _cipher_failure(self.outer, self.cipher)


@contextlib.contextmanager
def payload_stream(
    handle: Any, manifest: Manifest, identities: Identities | None, name: str
) -> Iterator[LimitedHashingReader]:
    """The (decrypted) payload of an archive already verified, as a reader."""
    outer = manifest.outer or manifest
    handle.seek(0)
    stream = _Stream(handle, outer, manifest, identities, name)
    try:
        yield stream.plain
    finally:
        stream.close()


def _cipher_failure(outer: Manifest, cipher: LimitedHashingReader) -> str | None:
    found = cipher.sha.hexdigest()
    if found == outer.payload_sha256:
        return None
    return (
        f"checksum: encrypted payload sha256 is {found[:16]}..., "
        f"the manifest says {outer.payload_sha256[:16]}... (the archive is damaged)"
    )


def _verify_sealed(path: Path, name: str, outer: Manifest) -> Verified:
    """What a keyless verify of an encrypted archive can check: both encrypted parts'
    sizes and sha256, and that each is an age file."""
    result = Verified(name, outer, sealed=True)
    with path.open("rb") as handle:
        reader = LimitedHashingReader(handle, outer.payload_bytes)
        head = reader.read(len(AGE_MAGIC))
        reader.drain()
        sealed = handle.read(outer.sealed_bytes)
    if head != AGE_MAGIC or not sealed.startswith(AGE_MAGIC):
        result.failures.append("format: the encrypted parts are not age files")
        return result
    failure = _cipher_failure(outer, reader)
    if failure:
        result.failures.append(failure)
        return result
    if hashlib.sha256(sealed).hexdigest() != outer.sealed_sha256:
        result.failures.append(
            "checksum: the encrypted manifest's sha256 is not the one recorded "
            "(the archive is damaged)"
        )
        return result
    result.checks.append(f"sha256 {outer.payload_sha256[:16]}... of the encrypted payload matches")
    result.checks.append(f"{outer.payload_bytes + outer.sealed_bytes} encrypted bytes")
    return result


def _checksum_failure(manifest: Manifest, reader: LimitedHashingReader) -> str:
    return (
        f"checksum: payload sha256 is {reader.sha.hexdigest()[:16]}..., "
        f"the manifest says {manifest.payload_sha256[:16]}... (the archive is damaged)"
    )


def _write_snapshot(
    reader: LimitedHashingReader,
    manifest: Manifest,
    snapshot: Path,
    durable: bool,
    progress: Reporter,
) -> int:
    size = 0
    fd = create_private(snapshot)
    try:
        chunks = decompress_into(
            reader, manifest.compression, manifest.frames, fd, limit=manifest.content_bytes
        )
        for count in chunks:
            progress.advance(count)
            size += count
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    return size


def _read_lines(
    chunks: Iterator[bytes | memoryview], manifest: Manifest, result: Verified
) -> tuple[int, Counts]:
    """Size and counts of a logical payload; a partial one holds only rows whose level is
    established and at or below its own (backup/partial.py)."""
    counter = KeyCounter()
    size = 0
    previous: str | None = None
    number = 0
    ceiling = parse_level(manifest.max_taint) if manifest.max_taint else None
    above_it = 0
    for key, value, number, size_so_far in iter_lines(chunks):
        if previous is not None and not cells.before(previous, key):
            raise_line(number, f"key {cells.name(key)} out of order (after {cells.name(previous)})")
        previous = key
        counter.add(key)
        size = size_so_far
        if ceiling is not None and left_out(key, value, ceiling):
            above_it += 1
    if ceiling is not None:
        if above_it:
            result.failures.append(
                f"partial: {above_it} row(s) classified above {ceiling.name} or of a level "
                "that cannot be established, which this partial backup must not hold"
            )
        else:
            result.checks.append(f"partial: nothing above {ceiling.name} (--max-taint)")
    return size, counter.counts()


def raise_line(number: int, what: str) -> None:
    raise VerificationError(f"line {number}: {what}")


def iter_lines(
    chunks: Iterator[bytes | memoryview], max_line: int = MAX_LINE
) -> Iterator[tuple[str, str, int, int]]:
    """``(key, value, line number, bytes so far)`` of a logical payload; a line longer
    than ``max_line`` bytes raises VerificationError as soon as it passes that (it is
    never held whole)."""
    decode = json.JSONDecoder().decode
    pending = bytearray()
    size = 0
    number = 0
    for chunk in chunks:
        size += len(chunk)
        data = bytes(chunk)
        if b"\n" not in data:  # the line goes on
            pending += data
            if len(pending) > max_line:
                raise_line(number + 1, f"longer than {max_line} bytes")
            continue
        lines = data.split(b"\n")
        if pending:
            pending += lines[0]
            lines[0] = bytes(pending)
        pending = bytearray(lines.pop())
        for raw in lines:
            number += 1
            if len(raw) > max_line:
                raise_line(number, f"longer than {max_line} bytes")
            try:
                document = decode(raw.decode("utf-8"))
            except ValueError as exc:
                raise VerificationError(f"line {number}: not valid JSON ({exc})") from None
            key = document.get("key") if isinstance(document, dict) else None
            value = document.get("value") if isinstance(document, dict) else None
            if not isinstance(key, str) or not isinstance(value, str):
                # Not UTF-8 text (cells.py): {"$bytes": ..., "type": ...}, a NULL key.
                try:
                    key = cells.from_json(
                        key, null=isinstance(document, dict) and "key" in document
                    )
                    value = cells.from_json(value)
                except ValueError:
                    raise VerificationError(
                        f"line {number}: not a {{key, value}} pair of strings"
                    ) from None
            yield key, value, number, size
        if len(pending) > max_line:
            raise_line(number + 1, f"longer than {max_line} bytes")
    if pending:
        raise VerificationError(f"line {number + 1}: incomplete (no newline at the end)")


def _check_physical(snapshot: Path, manifest: Manifest, result: Verified) -> Counts | None:
    """The backend's own checks of a physical copy (SQLite: its integrity check in
    pieces on every core, and the other checks beside it)."""
    backend = physical(manifest.backend)
    check_copy, count_copy = backend.check_copy, backend.count_copy
    assert check_copy is not None and count_copy is not None
    counts: Counts | None = check_copy(
        snapshot, manifest.page_count, count_copy, cpu_workers(), result.checks, result.failures
    )
    return counts


def _compare_counts(manifest: Manifest, counts: Counts, result: Verified) -> None:
    before = len(result.failures)
    for label, expected, found in (
        ("namespace", manifest.namespaces, counts.namespaces),
        ("memories at", manifest.memories, counts.memories),
    ):
        for name in sorted(set(expected) | set(found)):
            want, got = expected.get(name, 0), found.get(name, 0)
            if want != got:
                result.failures.append(
                    f"{label} {name!r}: {got} in the backup, the manifest says {want}"
                )
    if counts.keys != manifest.keys:
        result.failures.append(
            f"keys: {counts.keys} in the backup, the manifest says {manifest.keys}"
        )
    if len(result.failures) == before:
        result.checks.append(
            f"{counts.keys} keys in {len(counts.namespaces)} namespace(s) match the manifest"
        )


def verify_in(
    dest: Destination,
    name: str,
    *,
    scratch: Path | None = None,
    progress: Reporter | None = None,
    identities: Identities | None = None,
) -> Verified:
    """Verify one archive of a destination and record the verdict beside it (a keyless
    check of an encrypted one as such, never over a verify with the key).

    A physical backup is decompressed into ``scratch`` when given; else in memory
    when it fits (backup/scratch.py), else beside the backups (else the system temp)."""
    if progress is not None:
        progress.phase(f"fetching {name}")
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(temp_dir(scratch or dest.scratch_dir(), "verify"))
        path = stack.enter_context(dest.local_copy(name, work))

        def snapshot(content_bytes: int) -> Path:
            memory = None if scratch is not None else memory_dir(content_bytes)
            if memory is None:
                return work / "snapshot.db"
            return stack.enter_context(temp_dir(memory, "verify")) / "snapshot.db"

        size = path.stat().st_size
        try:
            result = verify_file(
                path, name, snapshot=snapshot, progress=progress, identities=identities
            )
        except InvalidDataError as exc:
            result = Verified(name, None, [exc.message], invalid=True)
        except VerificationError as exc:  # the sealed manifest is damaged
            result = Verified(name, None, [exc.message])
    if result.manifest is not None and not _keeps_full_verdict(dest, name, result, size):
        dest.write_marker(name, result.marker(size))
    return result


def _keeps_full_verdict(dest: Destination, name: str, result: Verified, size: int) -> bool:
    """A keyless pass leaves a verify with the key (of this very archive, perhaps made on
    another host) as it is: it checked less."""
    if not (result.sealed and result.ok):
        return False
    marker = dest.entry(name).marker or {}
    return (
        marker.get("contents_checked", True) is not False
        and result.manifest is not None
        and marker.get("sha256") == result.manifest.archive_sha256
        and marker.get("size") in (None, size)
    )


def check(results: list[Verified]) -> None:
    """Raise for the first failed archive (exit 8 for a non-backup, else 5), naming what."""
    failed = [result for result in results if not result.ok]
    if not failed:
        return
    first = failed[0]
    more = f" (and {len(failed) - 1} more backup(s))" if len(failed) > 1 else ""
    message = f"{first.name}: verification failed: {'; '.join(first.failures)}{more}"
    if all(result.invalid for result in failed):
        raise InvalidDataError(message)
    raise VerificationError(message)
