"""The SQLite memory index's search: FTS5 MATCH, scores in SQL, kv checks on the few best.

Search lets FTS5 rank every match and filters agent, level and tag in SQL as
the rows stream out in rank order; the rows that pass are checked against kv
in small batches until ``limit`` hits are found (see the module docstring of
:mod:`triggerfish_cli.storage.sqlite.fts`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from triggerfish_cli.classification import Level
from triggerfish_cli.memory.index import (
    IndexRow,
    SearchRequest,
    SearchResult,
    accept_rows,
    column_sizes,
    rank_score,
)
from triggerfish_cli.memory.keys import PREFIX, visible_levels
from triggerfish_cli.storage.sqlite.fts_query import (
    fts_query,
    fts_string,
    has_tokens,
    level_match,
    query_phrases,
)
from triggerfish_cli.storage.sqlite.fts_snippet import PART, long_snippet, snippet_sql
from triggerfish_cli.storage.sqlite.fts_tables import Fts5Tables

#: bm25 weights (agent_id, classification, key, content, tags) that isolate one
#: searched column each: key, content, tags.
COLUMN_WEIGHTS = ("0, 0, 1, 0, 0", "0, 0, 0, 1, 0", "0, 0, 0, 0, 1")


def _narrowed(match: str, request: SearchRequest) -> str:
    """``match`` limited inside the full-text index to the visible levels and the agent
    (by their tokens: necessary, not sufficient; the exact checks come after)."""
    narrowed = level_match(match, request.taint)
    if request.agent is not None and has_tokens(request.agent):
        narrowed = f"({narrowed}) AND {{agent_id}} : {fts_string(request.agent)}"
    return narrowed


#: How many of the best matches SQLite keeps at first (then 8 times more, and so on).
WINDOW = 1024

_ROWIDS_MATCHING = "SELECT rowid FROM memory_fts WHERE memory_fts MATCH"

#: The SQL function that scores a row (see ``rank_score``), registered per search.
RANK_FUNCTION = "triggerfish_rank"


def _ranker() -> Callable[[int, int, int, bytes | None], float]:
    """``rank_score`` from bm25's column booleans and a docsize blob, negated (the
    best sorts first); rows alike (most of them) share one computation."""
    scores: dict[tuple[int, int, int, bytes | None], float] = {}

    def rank(key: int, content: int, tags: int, sizes: bytes | None) -> float:
        shape = (key, content, tags, sizes)
        found = scores.get(shape)
        if found is None:
            found = scores[shape] = -rank_score(shape[:3], column_sizes(sizes, (2, 3, 4)))
        return found

    return rank


class Fts5Search(Fts5Tables):
    """Ranked search on the index tables (they must exist: see ``Fts5Index.search``)."""

    def search(self, request: SearchRequest) -> SearchResult:
        """Hits at the taint, ranked from the matching rows alone (see ``rank_score``).

        The level (and agent) filter is part of the MATCH expression (the
        gateway indexes ``classification`` and ``agent_id`` as full-text
        columns, weighted 0 in every score), so FTS5 itself drops the rows
        above the taint while it intersects its doclists: they are never
        read, scored or sorted. Every visible match is scored in SQL from
        its own row (which of key, content and tags it matches, and their
        lengths in tokens from ``memory_fts_docsize``), never from
        statistics over the whole table, and SQLite sorts the scores; only
        the best rows, whole groups of equal score, reach Python, where
        ties go by storage key and the exact level, agent and kv checks
        run. The result is a function of the visible rows alone.
        """
        narrowed = _narrowed(fts_query(request.text, request.raw), request)
        params: dict[str, Any] = {"match": narrowed}
        tagged = ""
        if request.tag is not None and has_tokens(request.tag):
            # A second cursor on the table: its phrase never counts in the scores.
            tagged = f" AND memory_fts.rowid IN ({_ROWIDS_MATCHING} :tag)"
            params["tag"] = f"{{tags}} : {fts_string(request.tag)}"
        sql = (
            f"SELECT memory_fts.rowid, {RANK_FUNCTION}({self._matched(request, params)}, "
            f"{'d.sz' if self._docsize else 'NULL'}) AS score FROM memory_fts "
            + ("LEFT JOIN memory_fts_docsize d ON d.id = memory_fts.rowid " * self._docsize)
            + f"WHERE memory_fts MATCH :match{tagged} ORDER BY score LIMIT :window"
        )
        self.conn.create_function(RANK_FUNCTION, 4, _ranker(), deterministic=True)
        result = SearchResult(self.kind)
        seen: set[str] = set()
        levels = visible_levels(request.taint)
        with self._errors("search", request.text):
            for group in self._ranked(sql, params, request.limit):
                self._accept(group, narrowed, request, levels, result, seen)
                if len(result.hits) >= request.limit:
                    break
        return result

    @staticmethod
    def _matched(request: SearchRequest, params: dict[str, Any]) -> str:
        """SQL for whether the row matches in key, content, tags (0 or 1 each).

        bm25 with the weight of one column only is below zero exactly when a
        matched phrase occurs there (its corpus statistics only scale it;
        they are never used). A plain query's phrases are its words, and all
        lie in those three columns: a row matches in key (tags) when it is
        among the rows one of the words matches there, and a row that
        matches in neither matches in content. Two small rowid sets then
        stand in for bm25 on most rows.
        """
        if request.raw:
            return ", ".join(f"bm25(memory_fts, {weights}) < 0" for weights in COLUMN_WEIGHTS)
        words = " OR ".join(query_phrases(request.text))
        for name, column in (("in_key", "key"), ("in_tags", "tags")):
            # Narrowed as the search itself: the sets never hold a row above the taint.
            params[name] = _narrowed(f"{{{column}}} : ({words})", request)
        in_key, in_tags = (
            f"memory_fts.rowid IN ({_ROWIDS_MATCHING} :{name})" for name in ("in_key", "in_tags")
        )
        in_content = f"bm25(memory_fts, {COLUMN_WEIGHTS[1]}) < 0"
        content = f"CASE WHEN {in_key} OR {in_tags} THEN {in_content} ELSE 1 END"
        return f"{in_key}, {content}, {in_tags}"

    def _ranked(
        self, sql: str, params: dict[str, Any], size: int
    ) -> Iterator[list[tuple[int, float]]]:
        """(rowid, negated score) in score order, in groups of at least ``size`` rows
        (doubling up to 256) that never split a run of equal scores: ties are
        ordered later, by storage key.

        SQLite keeps the best ``:window`` rows (a heap, not a sort of every
        match); the last run of equal scores may be cut there, so it is left
        for the next, wider window, which skips what was already given.
        """
        done: float | None = None
        window = WINDOW
        group: list[tuple[int, float]] = []
        while True:
            rows = self.conn.execute(sql, {**params, "window": window}).fetchall()
            complete = len(rows) < window
            if not complete:
                cut = rows[-1][1]
                rows = [row for row in rows if row[1] != cut]
            for row in rows:
                if done is not None and row[1] <= done:
                    continue  # given from the narrower window
                if len(group) >= size and row[1] != group[-1][1]:
                    yield group
                    done, group, size = group[-1][1], [], min(size * 2, 256)
                group.append(row)
            if group:  # whole runs: every score in it is better than the cut
                yield group
                done, group, size = group[-1][1], [], min(size * 2, 256)
            if complete:
                return
            window *= 8

    def _accept(
        self,
        group: list[tuple[int, float]],
        match: str,
        request: SearchRequest,
        levels: tuple[Level, ...],
        result: SearchResult,
        seen: set[str],
    ) -> None:
        """Keep the rows whose kv record is the live, visible top version.

        ``group``: (rowid, negated score) in score order, whole groups of equal
        score; their columns, memory_meta record and snippet are read here, and
        rows of equal score go by storage key.
        """
        rowids = [rowid for rowid, _ in group]
        score_of = dict(group)
        marks = ",".join("?" * len(rowids))
        names = {level.name for level in levels}
        rows: list[tuple[float, str, int, IndexRow]] = []
        # rowid IN (...) without a MATCH: one lookup per row, never the doclists.
        for rowid, agent, level, key, tags, meta in self.conn.execute(
            "SELECT rowid, agent_id, classification, key, tags, (SELECT record_json "
            "FROM memory_meta m WHERE m.agent_id = memory_fts.agent_id "
            "AND m.classification = memory_fts.classification AND m.key = memory_fts.key) "
            f"FROM memory_fts WHERE rowid IN ({marks})",
            rowids,
        ):
            # The exact filters (the MATCH narrowed by tokens only).
            if level not in names or (request.agent is not None and agent != request.agent):
                continue
            if request.tag is not None and f" {request.tag} " not in f" {tags} ":
                continue  # necessary; the record's own tags are checked exactly below
            skey = f"{PREFIX}{agent}:{level}:{key}"
            score = score_of[rowid]
            snippet = functools.partial(self._snippet, match, request, rowid)
            rows.append((score, skey, rowid, (skey, agent, level, key, meta, -score, snippet)))
        rows.sort(key=lambda row: row[:3])
        accept_rows([row[3] for row in rows], self._kv, request, levels, result, seen)

    def _snippet(self, match: str, request: SearchRequest, rowid: int) -> str:
        """The marked snippet of one hit's content (a seek in the doclists: rowid = ?).

        FTS5's own, on a content of at most ``PART`` characters; a longer one
        gets :func:`~triggerfish_cli.storage.sqlite.fts_snippet.long_snippet`
        (FTS5's snippet() takes time in the square of the row's matches).
        """
        short = self.conn.execute(
            f"SELECT length(content) <= {PART} FROM memory_fts WHERE rowid = ?", (rowid,)
        ).fetchone()
        if short is None:
            return ""
        if not short[0]:
            columns = self.conn.execute(
                "SELECT agent_id, classification, key, content, tags FROM memory_fts "
                "WHERE rowid = ?",
                (rowid,),
            ).fetchone()
            words = None if request.raw else " OR ".join(query_phrases(request.text))
            return long_snippet(tuple(str(cell or "") for cell in columns), match, words)
        row = self.conn.execute(snippet_sql("memory_fts"), (match, rowid)).fetchone()
        return "" if row is None else str(row[0] or "")
