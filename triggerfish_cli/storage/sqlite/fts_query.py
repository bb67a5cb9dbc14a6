"""FTS5 queries, shared by the SQLite index and the scan index (fts.py): plain
words as FTS5 strings, the level filter inside the MATCH, and SQLite's own
tokenizer asked whether a word holds a token."""

from __future__ import annotations

import functools
import sqlite3

from triggerfish_cli.classification import Level
from triggerfish_cli.errors import UsageError

#: The columns plain-word queries search: never agent_id or classification,
#: whose values (``main``, ``PUBLIC``) would otherwise match every record.
SEARCHED_COLUMNS = "{key content tags}"


def fts_string(text: str) -> str:
    """``text`` as an FTS5 string: one phrase of its tokens, whatever it holds."""
    return '"' + text.replace('"', '""') + '"'


@functools.lru_cache(maxsize=1)
def _probe() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE VIRTUAL TABLE probe USING fts5(t, tokenize='porter unicode61')")
    return conn


@functools.lru_cache(maxsize=4096)
def has_tokens(text: str) -> bool:
    """Whether the index's tokenizer finds any token in ``text`` (SQLite's own answer)."""
    conn = _probe()
    conn.execute("DELETE FROM probe")
    conn.execute("INSERT INTO probe (t) VALUES (?)", (text,))
    row = conn.execute("SELECT count(*) FROM probe WHERE probe MATCH ?", (fts_string(text),))
    return bool(row.fetchone()[0])


def fts_query(text: str, raw: bool) -> str:
    """The FTS5 MATCH expression for a query.

    Plain words: each whitespace-separated word becomes an FTS5 string (so
    quotes, ``-``, ``'`` and unicode are never syntax), words without any
    token are dropped, and all of them must occur in the key, content or
    tags columns. Raw: the text itself.
    """
    if raw:
        if not text.strip():
            raise UsageError("the query is empty")
        return text
    return f"{SEARCHED_COLUMNS} : ({' '.join(query_phrases(text))})"


def query_phrases(text: str) -> list[str]:
    """The FTS5 strings of a plain query: one per word that holds a token."""
    words = [word for word in text.split() if has_tokens(word)]
    if not words:
        raise UsageError(
            f"nothing to search for in {text!r}", hint="give at least one word or number"
        )
    return [fts_string(word) for word in words]


def level_match(match: str, taint: Level) -> str:
    """``match`` restricted to the visible levels inside the full-text index itself.

    The gateway indexes ``classification`` as a full-text column, so FTS5
    can drop the rows above the taint while it intersects its doclists: they
    are never read from the table, scored or sorted (the SQL level filter
    stays, exact). At RESTRICTED every level is visible: nothing to add.
    """
    levels = [level for level in Level if level <= taint]
    if len(levels) == len(Level):
        return match
    names = " OR ".join(fts_string(level.name) for level in levels)
    return f"({match}) AND {{classification}} : ({names})"
