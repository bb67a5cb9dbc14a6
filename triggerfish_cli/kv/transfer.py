"""``kv export`` and ``kv import``: every key and value, out to lines or a table and
back (JSON Lines, a JSON list, CSV, TSV)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, cast

from triggerfish_cli import audit, cells
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import InvalidDataError, RefusedError
from triggerfish_cli.kv.keys import RawReads, raw_rows
from triggerfish_cli.memory.keys import PREFIX as MEMORY_PREFIX
from triggerfish_cli.memory.keys import naming_level, split_key
from triggerfish_cli.serialization import dumps
from triggerfish_cli.storage.provider import StorageProvider

# -- export / import -----------------------------------------------------------


def flat_memory(provider: StorageProvider) -> contextlib.AbstractContextManager[None]:
    """For a listing of every value (kv list, kv export): a resident set that stays flat.

    SQLite reads through its page cache instead of its memory map meanwhile
    (``StorageProvider.unmapped``); other backends hold no map.
    """
    return provider.unmapped()


def export_lines(
    provider: StorageProvider,
    prefix: str | None = None,
    reads: RawReads | None = None,
    notes: list[str] | None = None,
) -> Iterator[str]:
    """JSON Lines, one ``{"key": ..., "value": ...}`` per key, value exactly as stored.

    A cell that is not UTF-8 text is written in its JSON form (cells.py),
    ``{"$bytes": <base64>, "type": "text"|"blob"}`` (a NULL key: ``null``),
    and named in ``notes``.
    """
    rows = provider.scan(prefix, batch_size=2000)
    for key, value in rows if reads is None else raw_rows(rows, reads):
        if cells.is_plain(key) and cells.is_plain(value):
            yield dumps({"key": key, "value": value}) + "\n"
            continue
        if notes is not None:
            notes.append(cells.note(key, value, "exported"))
        yield dumps({"key": cells.to_json(key), "value": cells.to_json(value)}) + "\n"


def noting(
    rows: Iterable[tuple[str, str]], notes: list[str], verb: str = "exported"
) -> Iterator[tuple[str, str]]:
    """``rows`` as they are; each holding a cell that is not UTF-8 text named in ``notes``."""
    for key, value in rows:
        if not (cells.is_plain(key) and cells.is_plain(value)):
            notes.append(cells.note(key, value, verb))
        yield key, value


@dataclass
class ImportResult:
    lines: int = 0
    new: int = 0
    replaced: int = 0
    unchanged: int = 0
    #: Memory rows among the lines (each at or below the taint).
    memories: int = 0
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "new": self.new,
            "replaced": self.replaced,
            "unchanged": self.unchanged,
            "memories": self.memories,
            "written": 0 if self.dry_run else self.new + self.replaced,
            "dry_run": self.dry_run,
        }


def parse_import(stream: IO[str], origin: str) -> dict[str, str]:
    """Read and check every line first: a bad line imports nothing and is named."""
    items: dict[str, str] = {}
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
        except ValueError as exc:
            raise InvalidDataError(f"{origin}: line {number}: not valid JSON ({exc})") from None
        key, value = _import_item(document, f"{origin}: line {number}")
        items[key] = value
    return items


#: The formats ``kv import`` reads, as :func:`import_format` tells them apart.
IMPORT_FORMATS = ("jsonl", "json", "csv", "tsv")


def read_import(stream: BinaryIO, origin: str) -> tuple[str, dict[str, str]]:
    """The format of ``stream`` (one of :data:`IMPORT_FORMATS`) and the items it holds."""
    buffered: Any = stream if hasattr(stream, "peek") else io.BufferedReader(cast(Any, stream))
    head = buffered.peek(65536)
    if b"\n" not in head.lstrip() and head:
        # A pipe's first chunk can end before the first line does: the format is
        # told by that line, so read it all (every format but JSON Lines is read
        # whole anyway, and a JSON Lines input without a newline is one line).
        buffered = io.BufferedReader(cast(Any, io.BytesIO(buffered.read())), 65536)
        head = buffered.peek(65536)
    fmt = import_format(head)
    if fmt in ("csv", "tsv"):
        while buffered.peek(1)[:1] in (b"\r", b"\n"):  # blank lines before the header
            buffered.read(1)
    if fmt != "jsonl":
        return fmt, parse_table_import(buffered, origin, fmt)
    text = io.TextIOWrapper(buffered, encoding="utf-8")
    try:
        return fmt, parse_import(text, origin)
    finally:
        text.detach()  # the caller's stream (stdin, say) stays open


def import_format(head: bytes) -> str:
    """The format of an import from its first bytes: ``[`` a JSON list (``kv export
    --format json``), ``{`` JSON Lines (``kv export``), else CSV, or TSV when its
    header line holds a tab and no comma outside quotes before it."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return "json"
    if text.startswith(b"{") or not text:
        return "jsonl"
    header = text.split(b"\n", 1)[0]
    return "tsv" if b"\t" in header and b"," not in header else "csv"


def parse_table_import(stream: BinaryIO, origin: str, fmt: str) -> dict[str, str]:
    """A JSON list of {"key", "value"} objects, or CSV/TSV with a key,value header,
    read and checked whole first: a bad row imports nothing and is named."""
    # The limit is process-wide: raised for this read (values > 128 KiB), then given back.
    previous = csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    try:
        return _read_rows(stream, origin, fmt)
    finally:
        csv.field_size_limit(previous)


def _read_rows(stream: BinaryIO, origin: str, fmt: str) -> dict[str, str]:
    # sqlite-utils parses these (its rows_from_file: the BOM, the dialect, rows with
    # more fields than the header).
    # lazy: 90-180 ms (click, pluggy, dateutil, its plugin scan), more than a whole `kv get`
    from sqlite_utils.utils import Format, RowError, RowsFromFileBadJSON, rows_from_file

    chosen = {"json": Format.JSON, "csv": Format.CSV, "tsv": Format.TSV}[fmt]
    what = "item" if fmt == "json" else "row"
    items: dict[str, str] = {}
    number = 0
    try:
        rows, _ = rows_from_file(stream, format=chosen, encoding="utf-8-sig")
        for number, row in enumerate(rows, start=1):
            if fmt != "json" and set(row) != {"key", "value"}:
                raise InvalidDataError(
                    f"{origin}: {what} {number}: expected the columns key and value "
                    f"(found {', '.join(sorted(map(str, row)))})"
                )
            key, value = _import_item(row, f"{origin}: {what} {number}")
            items[key] = value
    except (RowError, csv.Error) as exc:
        where = f"{origin}: {what} {number + 1}"
        raise InvalidDataError(f"{where}: not valid {fmt.upper()} ({exc})") from None
    except UnicodeDecodeError:
        raise  # the caller's "not UTF-8 text"
    except RowsFromFileBadJSON:
        raise InvalidDataError(f"{origin}: expected a JSON list of objects") from None
    except ValueError as exc:  # json.load's JSONDecodeError
        raise InvalidDataError(f"{origin}: not valid JSON ({exc})") from None
    return items


def _import_item(document: Any, where: str) -> tuple[str, str]:
    """The key and value one imported object names, checked."""
    if not isinstance(document, dict) or "key" not in document or "value" not in document:
        raise InvalidDataError(
            f'{where}: expected an object with a string "key" and a string "value"'
        )
    found: dict[str, str] = {}
    for field_name in ("key", "value"):
        text = document[field_name]
        if isinstance(text, str) and not cells.is_plain(text):
            index = next(i for i, char in enumerate(text) if not cells.is_plain(char))
            raise InvalidDataError(
                f"{where}: the {field_name} holds a lone surrogate "
                f"({text[index]!r} at character {index + 1}): not valid Unicode, "
                "so it cannot be stored as text"
            )
        try:
            found[field_name] = cells.from_json(text, null=field_name == "key")
        except ValueError:
            raise InvalidDataError(
                f'{where}: expected an object with a string "key" and a string "value" '
                '(or {"$bytes": <base64>, "type": "text"|"blob"} for one that is not '
                "UTF-8 text)"
            ) from None
    return found["key"], found["value"]


def row_level(key: str, value: str) -> Level:
    """The level a memory row is imported at, failing closed: the highest of the level
    in its key (RESTRICTED when it cannot be read there) and the one its record states
    (RESTRICTED when that is no level name)."""
    # lazy: backup.partial (+namespaces) only for an import that holds memory rows
    from triggerfish_cli.backup.partial import level_of

    level = naming_level(key)
    states, stated = level_of(value)
    if states:
        level = max(level, stated if stated is not None else Level.RESTRICTED)
    return level


@dataclass
class CheckedImport:
    """An import read and checked whole (:func:`check_import`), nothing written yet."""

    items: dict[str, str]
    origin: str
    taint: Level
    #: Memory rows among the items (each at or below the taint).
    memories: int


def check_import(items: dict[str, str], taint: Level, origin: str) -> CheckedImport:
    """Refuse (exit 4, before anything is written or made) memory rows above ``taint``."""
    memories = 0
    above: list[str] = []
    for key, value in items.items():
        if not (isinstance(key, str) and key.startswith(MEMORY_PREFIX)):
            continue
        memories += 1
        if row_level(key, value) > taint:
            above.append(key)
    if above:
        more = f" and {len(above) - 5} more" if len(above) > 5 else ""
        raise RefusedError(
            f"{origin}: {len(above)} memory row(s) above the taint {taint.name}: "
            f"{', '.join(above[:5])}{more}; nothing was written",
            hint="import at the level of the export (--taint RESTRICTED for a whole store), "
            "or export at this taint (kv export --taint LEVEL)",
        )
    return CheckedImport(items, origin, taint, memories)


def import_items(
    provider: StorageProvider | None,
    checked: CheckedImport,
    *,
    dry_run: bool,
    fresh: bool = False,
) -> ImportResult:
    """Write the items that differ from the store, with the memory search index kept
    in step (None: a store still to be made, for a dry run: every item is new).

    ``fresh``: the store was made for this import (``--create``): every row is
    loaded in batches and the index is built from them at the end. Else each
    memory row is written with its index rows in one transaction, as
    ``memory save`` writes, after the merge checks of a store that may hold
    memories (no write-down: ``memory.records.refuse_write_down``).
    """
    items = checked.items
    result = ImportResult(lines=len(items), memories=checked.memories, dry_run=dry_run)
    existing = provider.get_many(items) if provider is not None else {}
    changed: list[tuple[str, str]] = []
    for key, value in items.items():
        old = existing.get(key)
        if old is None:
            result.new += 1
        elif old == value:
            result.unchanged += 1
            continue
        else:
            result.replaced += 1
        changed.append((key, value))
    if provider is None:
        return result
    if not fresh:
        # lazy: memory.records (+7 modules) only for an import into a store with data
        from triggerfish_cli.memory.records import refuse_write_down

        memory_rows = ((k, v) for k, v in changed if _indexed(k, v))
        refuse_write_down(memory_rows, provider, checked.origin)
    if dry_run:
        return result
    _write(provider, changed, fresh)
    if changed:
        audit.record(
            provider,
            "kv_import",
            target=checked.origin,
            counts={
                "new": result.new,
                "replaced": result.replaced,
                "unchanged": result.unchanged,
                "memories": result.memories,
            },
            details={"taint": checked.taint.name, "created": fresh},
        )
    return result


def _indexed(key: str, value: str) -> bool:
    """A memory row the index holds (a text key naming agent, level and key)."""
    return cells.is_plain(key) and cells.is_plain(value) and split_key(key) is not None


def _write(provider: StorageProvider, rows: list[tuple[str, str]], fresh: bool) -> None:
    """The rows in batches, then the index rows of the memories among them."""
    # lazy: memory.indexes (+the backend table's index) only for an import that writes
    from triggerfish_cli.memory.indexes import index_for
    from triggerfish_cli.memory.keys import visible_levels

    provider.set_many(rows)
    index = index_for(provider)
    if fresh:  # makes the tables and indexes every row
        index.repair(visible_levels(Level.RESTRICTED))
    else:
        index.reindex([key for key, value in rows if _indexed(key, value)])
