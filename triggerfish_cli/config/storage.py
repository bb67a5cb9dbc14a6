"""The ``storage:`` section of a versioned triggerfish.yaml, when rolling back.

The storage section says where the store is: the store that holds the
config versions themselves and the gateway's data. A rollback that changed
it would move this tool (and the gateway at its next start) to another
store underneath the operator: an empty one, or one holding other versions.
So when the version's section differs from the file's, a rollback must be
told what to do (:data:`CHOICES`):

``refuse`` (the default)
    exit 4, naming both backends, nothing written.
``keep``
    roll back everything else and keep the file's current storage section,
    spliced into the version's text (its own lines replaced, comments and
    order of the rest untouched).
``switch``
    take the version's section too: the store changes at the next run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from triggerfish_cli.config.yaml_paths import compose
from triggerfish_cli.errors import InvalidDataError, RefusedError
from triggerfish_cli.settings import Settings, parse_yaml_mapping

SECTION = "storage"
CHOICES = ("refuse", "keep", "switch")

_UNREADABLE = object()


def section_of(text: str | None) -> Any:
    """The parsed storage section of ``text`` (None: absent; a sentinel: unreadable)."""
    if text is None:
        return None
    try:
        return parse_yaml_mapping(text, "config").get(SECTION)
    except InvalidDataError:
        return _UNREADABLE


def readable(value: Any) -> bool:
    return value is not _UNREADABLE


def describe(section: Any) -> str:
    """``postgres (schema triggerfish)``, ``sqlite (the default file)``, ..."""
    if section is None:
        return "no storage: section (the default SQLite file)"
    if not isinstance(section, dict):
        return "an invalid storage: section"
    backend = str(section.get("backend", "sqlite"))
    where = [
        f"{name} {section[name]}"
        for name in ("path", "schema", "bucket", "prefix", "endpoint_url")
        if section.get(name) not in (None, "")
    ]
    return backend + (f" ({', '.join(where)})" if where else "")


def _span(text: str) -> tuple[int, int] | None:
    """Where the top-level storage block of ``text`` is: ``[start, end)`` of whole lines."""
    # lazy: yaml (+20 modules) only where YAML is parsed (TID253)
    from yaml import MappingNode, ScalarNode

    root = compose(text)
    if not isinstance(root, MappingNode):
        return None
    for key, value in root.value:
        if isinstance(key, ScalarNode) and key.value == SECTION:
            if key.start_mark.column != 0:
                raise RefusedError(
                    "cannot keep the storage: section: the file is not a block mapping",
                    hint="use --storage switch, or edit the file by hand",
                )
            start = key.start_mark.index
            end = value.end_mark.index
            if end > 0 and text[end - 1] != "\n":
                newline = text.find("\n", end)
                end = len(text) if newline < 0 else newline + 1
            # Comments at column 0 and blank lines after the block belong to what follows.
            lines = text[start:end].splitlines(keepends=True)
            while len(lines) > 1 and (not lines[-1].strip() or lines[-1].startswith("#")):
                end -= len(lines.pop())
            return start, end
    return None


def keep_current(new_text: str, current_text: str | None) -> str:
    """``new_text`` with its storage block replaced by the one of ``current_text``."""
    current_span = _span(current_text) if current_text is not None else None
    block = ""
    if current_text is not None and current_span is not None:
        block = current_text[current_span[0] : current_span[1]]
        if not block.endswith("\n"):
            block += "\n"
    span = _span(new_text)
    if span is not None:
        return new_text[: span[0]] + block + new_text[span[1] :]
    if not block:
        return new_text
    separator = "" if not new_text or new_text.endswith("\n") else "\n"
    return new_text + separator + block


def salvage_block(text: str) -> str | None:
    """The lines of the top-level ``storage:`` block of a file that does not parse.

    From the ``storage:`` line at column 0 to the next line that starts
    another top-level entry (a character at column 0 that is not ``#``),
    without the comment lines at column 0 just before it.
    None when there is no such line. The block may still not parse.
    """
    match = re.search(r"(?m)^storage\s*:", text)
    if match is None:
        return None
    following = re.compile(r"(?m)^[^\s#]").search(text, match.end())
    lines = text[match.start() : following.start() if following else len(text)]
    kept = lines.splitlines(keepends=True)
    while len(kept) > 1 and (not kept[-1].strip() or kept[-1].startswith("#")):
        kept.pop()
    return "".join(kept)


def fallback_settings(config_path: Path, *, store_named: bool) -> tuple[Settings, bool]:
    """What to find the store by when ``config_path`` does not load (3 a.m., a broken file).

    Its top-level ``storage:`` block on its own, when it has one and the
    command line does not name the store (``store_named``: --db or
    --backend); else no sections at all (the default store, or what the
    command line names). The flag says whether the block was used.
    """
    try:
        text = config_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    block = salvage_block(text)
    if not store_named and block is not None:
        return Settings(config_path, block), True
    return Settings(config_path), False
