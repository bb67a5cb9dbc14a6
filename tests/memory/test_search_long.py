"""Search hits on long memories: snippets in time linear in the memory's length.

FTS5's snippet() takes time in the square of its row's matches (a 10 MB
memory holding a common word took minutes). These tests never time
anything: they count what FTS5 is given, or run the installed command under
a CPU limit a hundred times above what the linear search needs and a
hundred times below what the quadratic one did.
"""

from __future__ import annotations

import itertools
import resource
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.gateway import memory_record, write_gateway_store
from tests.helpers.terminal import SCRIPT
from triggerfish_cli.classification import Level
from triggerfish_cli.memory import records as memory
from triggerfish_cli.memory.index import HIGHLIGHT_END, HIGHLIGHT_START, Hit
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.sqlite import fts_snippet
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.fts_snippet import OVERLAP, PART, parts

AGENT = "main-session"


def store_with(tmp_path: Path, backend: str, **contents: str) -> BaseStorage:
    rows = {
        f"memory:{AGENT}:PUBLIC:{key}": memory_record(key, "PUBLIC", text)
        for key, text in contents.items()
    }
    if backend == "memory":
        return MemoryStorage(rows)
    indexed = tuple((AGENT, "PUBLIC", key) for key in contents)
    return SqliteStorage(write_gateway_store(tmp_path / "gw.db", rows, indexed=indexed))


@pytest.fixture(params=["sqlite", "memory"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def search(store: BaseStorage, text: str, *, raw: bool = False) -> list[Hit]:
    return memory.search(store, text, taint=Level.PUBLIC, agent=None, raw=raw).hits


def marked(hit: Hit) -> list[str]:
    return [hit.snippet[start:end] for start, end in hit.highlights]


def fts5_snippet(content: str, query: str) -> str:
    """FTS5's own snippet of ``content`` as one row (what the search showed before)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='porter unicode61')")
    conn.execute("INSERT INTO t VALUES (?)", (content,))
    row = conn.execute(
        f"SELECT snippet(t, 0, '{HIGHLIGHT_START}', '{HIGHLIGHT_END}', '…', 16) FROM t "
        "WHERE t MATCH ?",
        (query,),
    ).fetchone()
    conn.close()
    return str(row[0])


FILLER = "the quick brown fox jumps over the lazy dog and runs home. "


# -- the parts of a long content ----------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "bb", "ccccccc", " ", "\n", "x" * 300, "é"]), max_size=3000))
def test_parts_cover_the_text_in_bounded_overlapping_pieces(pieces: list[str]) -> None:
    text = "".join(pieces)
    spans = list(parts(text))
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for start, end in spans:
        assert end - start <= PART
    for (start, end), (after, _) in itertools.pairwise(spans):
        assert end - start >= PART // 2  # every part but the last moves on by half a part
        assert start < after <= end and end - after <= OVERLAP  # no gap, a bounded overlap


# -- the snippet of a long memory ---------------------------------------------------------


def test_a_short_memory_keeps_fts5s_own_snippet(tmp_path: Path, backend: str) -> None:
    # the longest content still snipped on the whole row
    with_word = (FILLER * 16 + "a zanzibarite. " + FILLER * 30)[:PART]
    store = store_with(tmp_path, backend, short=with_word)
    [hit] = search(store, "zanzibarite")
    assert HIGHLIGHT_START not in hit.snippet
    shown = fts5_snippet(with_word, "zanzibarite")
    assert hit.snippet == shown.replace(HIGHLIGHT_START, "").replace(HIGHLIGHT_END, "")
    assert marked(hit) == ["zanzibarite"]


@pytest.mark.parametrize("where", [0, 1, 5, 40, 79])
def test_a_long_memory_shows_the_window_fts5_would(
    tmp_path: Path, backend: str, where: int
) -> None:
    """A word that occurs once: the same window, marks and ellipses as FTS5 on the whole row."""
    sentences = [FILLER] * 80
    sentences[where] = "the quick brown fox found a zanzibarite over the lazy dog today. "
    content = "".join(sentences)
    assert len(content) > 2 * PART
    store = store_with(tmp_path, backend, long=content)
    [hit] = search(store, "zanzibarite")
    shown = fts5_snippet(content, "zanzibarite")
    assert hit.snippet == shown.replace(HIGHLIGHT_START, "").replace(HIGHLIGHT_END, "")
    assert marked(hit) == ["zanzibarite"]


def test_the_part_shown_holds_every_word_when_one_does(tmp_path: Path, backend: str) -> None:
    content = FILLER * 60 + "a zanzibarite alone. " + FILLER * 60
    content += "the quokkaberry and the zanzibarite together. " + FILLER * 60
    store = store_with(tmp_path, backend, long=content)
    [hit] = search(store, "zanzibarite quokkaberry")
    assert sorted(marked(hit)) == ["quokkaberry", "zanzibarite"]
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")


def test_words_far_apart_show_the_first_part_with_one(tmp_path: Path, backend: str) -> None:
    content = FILLER * 60 + "a zanzibarite here. " + FILLER * 60 + "a quokkaberry there. "
    store = store_with(tmp_path, backend, long=content + FILLER * 60)
    [hit] = search(store, "quokkaberry zanzibarite")
    assert marked(hit) == ["zanzibarite"]


def test_a_word_only_in_the_key_shows_the_start(tmp_path: Path, backend: str) -> None:
    content = FILLER * 100
    store = store_with(tmp_path, backend, zanzibarite=content)
    [hit] = search(store, "zanzibarite")
    assert hit.highlights == ()  # the first 16 tokens, as FTS5 shows a row matched elsewhere
    assert hit.snippet == FILLER + "the quick brown fox…"


def test_raw_queries_on_a_long_memory(tmp_path: Path, backend: str) -> None:
    content = FILLER * 60 + "the zanzibarite sleeps here. " + FILLER * 60
    store = store_with(tmp_path, backend, long=content)
    [hit] = search(store, "content: zanzibar*", raw=True)
    assert marked(hit) == ["zanzibarite"]
    [hit] = search(store, '"zanzibarite sleeps" NOT quokkaberry', raw=True)
    assert marked(hit) == ["zanzibarite sleeps"]
    [hit] = search(store, "key: long", raw=True)  # matches in the key only
    assert hit.highlights == () and hit.snippet.startswith("the quick")


# -- linear: what FTS5 is given, counted --------------------------------------------------


class Counting(sqlite3.Connection):
    """A RAM connection that counts the text it indexes and the snippets it computes."""

    indexed: ClassVar[list[int]] = []
    snippets = 0

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        if "snippet(" in sql:
            Counting.snippets += 1
        return super().execute(sql, *args)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:  # type: ignore[override]
        rows = list(rows)
        Counting.indexed += [len(row[4]) for row in rows]
        return super().executemany(sql, rows)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Counting]]:
    Counting.indexed, Counting.snippets = [], 0
    monkeypatch.setattr(fts_snippet, "_ram", lambda: sqlite3.connect(":memory:", factory=Counting))
    yield Counting


@pytest.mark.parametrize("last", [False, True])
def test_snippet_work_is_linear_in_the_memory(
    tmp_path: Path, counted: type[Counting], last: bool
) -> None:
    """FTS5's snippet() only ever sees a row of at most PART characters, once per hit,
    and the text indexed to find it is at most a few times the memory's length:
    whatever the number of matches, the work is linear in the memory."""
    content = "Tea. " * 20_000  # 100,000 characters, every word a match
    if last:
        content = "Cake. " * 20_000 + "The tea is at the end."
    store = store_with(tmp_path, "sqlite", long=content)
    assert isinstance(store, SqliteStorage)
    statements: list[str] = []
    store.connection.set_trace_callback(statements.append)
    [hit] = search(store, "tea")
    store.close()
    assert marked(hit)[0].lower() == "tea"
    assert not [sql for sql in statements if "snippet(" in sql]  # never on the whole row
    assert counted.snippets == 1
    assert max(counted.indexed) <= PART
    assert sum(counted.indexed) <= 3 * len(content)
    if not last:
        assert sum(counted.indexed) <= 9 * PART  # a common word: the first group, and the part


def _cpu_limit(seconds: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))


def test_the_installed_command_searches_a_10_mb_memory(tmp_path: Path) -> None:
    """10 MB, every word a match: about 0.5 s of CPU here; the quadratic snippet took
    hours (3.5e-9 s times the square of the matches: 2 million squared). The CPU
    limit (not the clock: other work on the machine does not count) is 100 times
    the first and far below the second."""
    path = tmp_path / "gw.db"
    content = "Tea. " * 2_000_000
    key = f"memory:{AGENT}:PUBLIC:big"
    write_gateway_store(
        path, {key: memory_record("big", "PUBLIC", content)}, indexed=((AGENT, "PUBLIC", "big"),)
    )
    done = subprocess.run(
        [SCRIPT, "--db", str(path), "--format", "jsonl", "memory", "search", "tea", "-A"],
        capture_output=True,
        text=True,
        preexec_fn=lambda: _cpu_limit(60),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert '"key":"big"' in done.stdout and '"snippet":"Tea. Tea.' in done.stdout
