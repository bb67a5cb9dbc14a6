"""The snippet of a long memory, in time linear in its length.

FTS5's ``snippet()`` scores a window at every match of the row by walking
every match of the row again (and every sentence start before it): its
time grows with the square of the matches, so a search whose hit was a
10 MB memory holding a common word ran for minutes. A memory of at most
:data:`PART` characters keeps FTS5's snippet of the row itself; a longer
one is cut at whitespace into overlapping parts of at most :data:`PART`
characters, and its snippet is FTS5's snippet of one part, taken from a
private RAM table with the index's tokenizer and the row's other columns:

- the first part that matches the search's own MATCH (plain words: and
  whose content holds one of the words),
- else (plain words) the first part whose content holds one of the words,
- else the first part (no highlights, as FTS5 shows a row that matches in
  its key or tags only).

Parts are indexed a group at a time (the group doubles up to :data:`GROUP`
parts) and the search of parts stops at the first group that holds the
part, so a common word costs one small group and a word near the end one
pass over the text; the RAM table never holds more than a group.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from triggerfish_cli.memory.index import HIGHLIGHT_END, HIGHLIGHT_START
from triggerfish_cli.storage.sqlite.sql import private_transaction

#: The longest content whose snippet FTS5 computes on the whole row (and the longest part).
PART = 2048
#: Characters each part shares with the one before (a phrase across a cut is still found).
OVERLAP = 256
#: The most parts in the RAM table at a time.
GROUP = 256
#: Tokens in a snippet, and the mark of text left out.
SNIPPET_TOKENS = 16
ELLIPSIS = "…"

_SPACES = (" ", "\n", "\t")
_TABLE = (
    "CREATE VIRTUAL TABLE part USING fts5("
    "agent_id, classification, key, content, tags, anchor, tokenize='porter unicode61')"
)
_INSERT = (
    "INSERT INTO part (rowid, agent_id, classification, key, content, tags, anchor) "
    "VALUES (?, ?, ?, ?, ?, ?, 'anchor')"
)
#: Matches every part (through the anchor column, never highlighted).
_ANY_PART = "{anchor} : anchor"


def snippet_sql(table: str) -> str:
    """SQL for the marked snippet of the content of row ``?`` of ``table`` that matches ``?``."""
    return (
        f"SELECT snippet({table}, 3, '{HIGHLIGHT_START}', '{HIGHLIGHT_END}', '{ELLIPSIS}', "
        f"{SNIPPET_TOKENS}) FROM {table} WHERE {table} MATCH ? AND rowid = ?"
    )


def _cut(text: str, low: int, high: int) -> int:
    """The last whitespace in ``text[low:high]``, or ``high`` when there is none."""
    found = max(text.rfind(space, low, high) for space in _SPACES)
    return high if found < 0 else found


def _next_start(text: str, low: int, high: int) -> int:
    """Just past the first whitespace in ``text[low:high]``, or ``low`` when there is none."""
    found = [at for at in (text.find(space, low, high) for space in _SPACES) if at >= 0]
    return min(found) + 1 if found else low


def parts(text: str) -> Iterator[tuple[int, int]]:
    """``[start, end)`` of the parts of ``text``: at most :data:`PART` characters, each
    at least half that (but the last), cut at whitespace where there is some, each
    sharing up to :data:`OVERLAP` characters with the one before."""
    start = 0
    while len(text) - start > PART:
        end = _cut(text, start + PART // 2, start + PART)
        yield start, end
        start = _next_start(text, end - OVERLAP, end)
    yield start, len(text)


def _ram() -> sqlite3.Connection:
    return sqlite3.connect(":memory:", isolation_level=None)


def _fill(conn: sqlite3.Connection, row: tuple[str, ...], spans: list[tuple[int, int]]) -> None:
    """The RAM table holds exactly the parts ``spans`` of ``row``'s content (rowids 1...)."""
    agent, level, key, content, tags = row
    with private_transaction(conn):
        conn.execute("DROP TABLE IF EXISTS part")
        conn.execute(_TABLE)
        conn.executemany(
            _INSERT,
            (
                (n, agent, level, key, content[start:end], tags)
                for n, (start, end) in enumerate(spans, 1)
            ),
        )


def _first(conn: sqlite3.Connection, match: str) -> int | None:
    found = conn.execute("SELECT min(rowid) FROM part WHERE part MATCH ?", (match,)).fetchone()
    return None if found is None or found[0] is None else int(found[0])


def _choose(
    conn: sqlite3.Connection, row: tuple[str, ...], match: str, words: str | None
) -> tuple[tuple[int, int], str]:
    """The part the snippet comes from, and the MATCH that marks it."""
    in_content = None if words is None else f"{{content}} : ({words})"
    wanted = match if in_content is None else f"({match}) AND {in_content}"
    spans = list(parts(row[3]))
    fallback: tuple[tuple[int, int], str] | None = None
    done, size = 0, 8
    while done < len(spans):
        group = spans[done : done + size]
        _fill(conn, row, group)
        found = _first(conn, wanted)
        if found is not None:
            return group[found - 1], wanted
        if fallback is None and in_content is not None:
            found = _first(conn, in_content)
            if found is not None:
                fallback = group[found - 1], in_content
        done, size = done + len(group), min(size * 2, GROUP)
    return fallback or (spans[0], _ANY_PART)


def long_snippet(row: tuple[str, ...], match: str, words: str | None) -> str:
    """The marked snippet of a long content (see the module docstring).

    ``row``: the index row's (agent_id, classification, key, content, tags);
    ``match``: the search's MATCH expression; ``words``: a plain query's
    phrases joined by ``OR`` (None for a raw query).
    """
    conn = _ram()
    try:
        (start, end), marks = _choose(conn, row, match, words)
        _fill(conn, row, [(start, end)])
        found = conn.execute(snippet_sql("part"), (marks, 1)).fetchone()
    finally:
        conn.close()
    text = "" if found is None else str(found[0] or "")
    if start > 0 and not text.startswith(ELLIPSIS):
        text = ELLIPSIS + text
    if end < len(row[3]) and not text.endswith(ELLIPSIS):
        text += ELLIPSIS
    return text
