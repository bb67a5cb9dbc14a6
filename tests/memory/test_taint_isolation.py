"""The taint rule, whole: what a session at level L sees is a function of the records at or below L.

Hits, their order, scores, snippets and highlights, counts and errors of
``search``, and the answers of ``list``, ``get``, ``history`` and ``stats``
must be identical on a store and on that store plus any set of records above
L (issue 15: bm25's corpus statistics made a PUBLIC memory's score, and the
order of two tied PUBLIC hits, depend on RESTRICTED rows). Checked on SQLite
with the gateway's FTS5 index, on SQLite without it (the in-RAM index), on S3
and on Postgres (our tsvector table).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.gateway import memory_record, write_gateway_store
from triggerfish_cli.classification import Level
from triggerfish_cli.errors import TriggerfishError
from triggerfish_cli.memory import keys as memory_keys
from triggerfish_cli.memory import records as memory
from triggerfish_cli.memory import upkeep as memory_upkeep
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

AGENTS = ("main-session", "scheduler-slack-1712000000000")
KEYS = ("name", "plan", "trigger:city", "deploy-notes")
WORDS = ("deploy", "stack", "alice", "tea", "oslo", "merger")
QUERIES = ("deploy", "stack", "deploy stack", "alice tea", "oslo", "merger deploy", "absent")
RAW_QUERIES = ("deploy OR tea", "stack*", "alice NOT tea")

content = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)
tags = st.lists(st.sampled_from(("work", "deploy")), unique=True)
#: Rows that are no well-formed memory (reported by key at their level, never above it).
MALFORMED = ("{broken", '{"content": "deploy stack", "tags": [], "expired": false}', "[]")
record = st.one_of(st.tuples(content, tags, st.booleans()), st.sampled_from(MALFORMED))


def _rows(spec: dict[tuple[str, Level, str], Any]) -> dict[str, str]:
    return {
        memory_keys.storage_key(agent, level, key): value
        if isinstance(value, str)
        else memory_record(
            key, level.name, value[0], agent=agent, tags=value[1], expired=value[2]
        )
        for (agent, level, key), value in spec.items()
    }


@st.composite
def stores(draw: Any) -> tuple[Level, dict[str, str], dict[str, str]]:
    """A taint, the records at or below it, and records above it (maybe none)."""
    taint = draw(st.sampled_from([Level.PUBLIC, Level.INTERNAL, Level.CONFIDENTIAL]))
    low = [level for level in Level if level <= taint]
    high = [level for level in Level if level > taint]
    visible = draw(
        st.dictionaries(
            st.tuples(st.sampled_from(AGENTS), st.sampled_from(low), st.sampled_from(KEYS)),
            record,
            max_size=12,
        )
    )
    hidden = draw(
        st.dictionaries(
            st.tuples(st.sampled_from(AGENTS), st.sampled_from(high), st.sampled_from(KEYS)),
            record,
            min_size=1,
            max_size=12,
        )
    )
    return taint, _rows(visible), _rows(hidden)


def observe(provider: Any, taint: Level) -> dict[str, Any]:
    """Everything a reader at ``taint`` can learn (audit records aside)."""
    seen: dict[str, Any] = {}

    def attempt(name: str, work: Callable[..., Any], *args: Any) -> None:
        try:
            seen[name] = work(*args)
        except TriggerfishError as exc:
            seen[name] = (type(exc).__name__, str(exc))

    def hits(text: str, raw: bool, agent: str | None, limit: int) -> Any:
        result = memory.search(provider, text, taint=taint, agent=agent, raw=raw, limit=limit)
        return ([h.as_dict() for h in result.hits], result.stale, result.malformed)

    def get(agent: str, key: str) -> Any:
        found = memory.get_memory(provider, key, taint=taint, agent=agent)
        shadowed = [r.as_dict() for r in found.shadowed]
        deleted = [r.as_dict() for r in found.deleted]
        return found.record.as_dict() if found.record else None, shadowed, deleted, found.malformed

    def history(key: str) -> Any:
        return [v.as_dict() for v in memory.history(provider, key, taint=taint, agent=None)]

    def listing(agent: str | None, limit: int, tag: str | None = None) -> Any:
        found = memory.list_memories(provider, taint=taint, agent=agent, limit=limit, tag=tag)
        return [r.as_dict() for r in found.records], found.malformed

    for text in QUERIES:
        for agent in (None, AGENTS[0]):
            attempt(f"search {text} {agent}", hits, text, False, agent, 3)
            attempt(f"search {text} {agent} all", hits, text, False, agent, 50)
    if provider.backend != "postgres":  # FTS5 syntax (Postgres has to_tsquery's)
        for text in RAW_QUERIES:
            attempt(f"raw {text}", hits, text, True, None, 50)
    for agent in AGENTS:
        for key in KEYS:
            attempt(f"get {agent} {key}", get, agent, key)
    for key in KEYS:
        attempt(f"history {key}", history, key)
    attempt("list", listing, None, 0)
    attempt("list 2", listing, AGENTS[0], 2)
    attempt("list 1", listing, AGENTS[1], 1)
    attempt("list tag", listing, AGENTS[0], 0, "deploy")
    attempt("list tag 1", listing, None, 1, "work")
    attempt(
        "stats agent", lambda: memory_upkeep.stats(provider, taint=taint, agent=AGENTS[0]).as_dict()
    )
    attempt("stats", lambda: memory_upkeep.stats(provider, taint=taint).as_dict())
    return seen


SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _indexed(rows: dict[str, str]) -> tuple[tuple[str, str, str], ...]:
    out = []
    for skey, value in rows.items():
        parts = memory_keys.split_key(skey)
        assert parts is not None
        if value not in MALFORMED:  # the gateway indexes what it saved: records
            out.append((parts[0], parts[1].name, parts[2]))
    return tuple(out)


def interleaved(low: dict[str, str], high: dict[str, str]) -> dict[str, str]:
    """Hidden rows written before and between the visible ones (rowids shift)."""
    out: dict[str, str] = {}
    lows, highs = list(low.items()), list(high.items())
    while lows or highs:
        if highs:
            out.__setitem__(*highs.pop())
        if lows:
            out.__setitem__(*lows.pop(0))
    return out


@SETTINGS
@given(stores())
def test_sqlite_fts5_output_ignores_records_above_the_taint(
    case: tuple[Level, dict[str, str], dict[str, str]],
) -> None:
    taint, low, high = case
    with tempfile.TemporaryDirectory() as tmp:
        full_rows = interleaved(low, high)
        a = SqliteStorage(write_gateway_store(Path(tmp) / "a.db", low, _indexed(low)))
        b = SqliteStorage(write_gateway_store(Path(tmp) / "b.db", full_rows, _indexed(full_rows)))
        try:
            assert observe(b, taint) == observe(a, taint)
        finally:
            a.close()
            b.close()


@SETTINGS
@given(stores())
def test_sqlite_without_index_output_ignores_records_above_the_taint(
    case: tuple[Level, dict[str, str], dict[str, str]],
) -> None:
    taint, low, high = case
    with tempfile.TemporaryDirectory() as tmp:
        stores_ = []
        for name, rows in (("a.db", low), ("b.db", interleaved(low, high))):
            path = Path(tmp) / name
            provider = SqliteStorage(path, create=True)
            provider.set_many(rows.items())
            assert "memory_fts" not in provider.tables()
            stores_.append(provider)
        try:
            assert observe(stores_[1], taint) == observe(stores_[0], taint)
        finally:
            for provider in stores_:
                provider.close()


@pytest.fixture
def s3_pair(s3: Any) -> Iterator[Callable[[], tuple[Any, Any]]]:
    from triggerfish_cli.storage.s3.backend import S3Storage

    opened: list[Any] = []

    def make() -> tuple[Any, Any]:
        pair = tuple(
            S3Storage(
                s3.new_bucket(), "tf/", endpoint_url=s3.endpoint_url, region=s3.region, create=True
            )
            for _ in range(2)
        )
        opened.extend(pair)
        return pair  # type: ignore[return-value]

    yield make
    for provider in opened:
        provider.close()


@settings(SETTINGS, max_examples=10)
@given(case=stores())
def test_s3_output_ignores_records_above_the_taint(
    s3_pair: Callable[[], tuple[Any, Any]], case: tuple[Level, dict[str, str], dict[str, str]]
) -> None:
    taint, low, high = case
    a, b = s3_pair()
    a.set_many(low.items())
    b.set_many({**low, **high}.items())
    assert observe(b, taint) == observe(a, taint)


@pytest.fixture
def pg_pair(postgres: Any) -> Iterator[Callable[[], tuple[Any, Any]]]:
    from triggerfish_cli.storage.postgres.backend import PostgresStorage

    schemas: list[str] = []
    opened: list[Any] = []

    def make() -> tuple[Any, Any]:
        pair = []
        for _ in range(2):
            schema = postgres.new_schema()
            schemas.append(schema)
            pair.append(PostgresStorage(postgres.dsn, schema=schema, create=True))
        opened.extend(pair)
        return pair[0], pair[1]

    yield make
    for provider in opened:
        provider.close()
    for schema in schemas:
        postgres.drop_schema(schema)


@settings(SETTINGS, max_examples=10)
@given(case=stores())
def test_postgres_output_ignores_records_above_the_taint(
    pg_pair: Callable[[], tuple[Any, Any]], case: tuple[Level, dict[str, str], dict[str, str]]
) -> None:
    taint, low, high = case
    a, b = pg_pair()
    for provider, rows in ((a, low), (b, interleaved(low, high))):
        provider.set_many(rows.items())
        memory_upkeep.reindex(provider, taint=Level.RESTRICTED)  # our tsvector table
    assert observe(b, taint) == observe(a, taint)


def test_the_reported_case_a_public_score_no_longer_moves(tmp_path: Path) -> None:
    """0 / 1 / 2 / 5 / 20 RESTRICTED memories holding the word: one PUBLIC score."""
    scores = []
    for hidden in (0, 1, 2, 5, 20):
        rows = {
            memory_keys.storage_key("main-session", Level.PUBLIC, "fact"): memory_record(
                "fact", "PUBLIC", "the deploy runs nightly"
            )
        }
        for n in range(hidden):
            skey = memory_keys.storage_key("main-session", Level.RESTRICTED, f"s{n}")
            rows[skey] = memory_record(f"s{n}", "RESTRICTED", "deploy the secret")
        path = write_gateway_store(tmp_path / f"{hidden}.db", rows, _indexed(rows))
        with SqliteStorage(path) as provider:
            hits = memory.search(provider, "deploy", taint=Level.PUBLIC, agent=None).hits
            scores.append(hits[0].score)
    assert len(set(scores)) == 1 and scores[0] > 0


# -- the commands that name or count memory keys beside the memory commands ----------

#: Always hidden below RESTRICTED: keys whose level cannot be read (soft-deleted and due).
ODD_KEYS = {
    "memory:main-session:SECRET:odd": memory_record(
        "odd", "SECRET", "deploy", expired=True, updated="2026-01-01T00:00:00.000Z"
    ),
    "memory:main-session:restricted:odd": "{broken",
}
#: What both stores hold besides memories.
OTHER_ROWS = {
    "sessions:0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f": '{"createdAt":"2026-01-02T03:04:05.000Z"}',
    "prefs:owner:bumpers_default": "true",
}
AS_OF = "2026-06-01T00:00:00Z"


def _sweep_document(text: str) -> dict[str, Any]:
    """A sweep's JSON summary less what differs between any two runs (store, clock)."""
    import json

    document = json.loads(text)
    for name in ("store", "started_at", "finished_at", "seconds", "audit_key", "gate"):
        document.pop(name)
    return document  # type: ignore[no-any-return]


def observe_commands(cli: Any, db: Path, config: Path, taint: Level) -> dict[str, Any]:
    """What `kv namespaces`, `retention plan` (--list) and `retention sweep` say at ``taint``
    (stdout, stderr, exit code; the sweep's summary less its clock); the sweep runs last."""
    store = ("--db", str(db), "--config", str(config))
    by_flag = ("--taint", taint.name)
    by_env = {"TRIGGERFISH_TAINT": taint.name}
    runs: dict[str, tuple[str, ...]] = {
        "namespaces": ("kv", "namespaces", *by_flag),
        "namespaces ages": ("kv", "namespaces", "--ages", "-f", "json"),
        "plan": ("retention", "plan", "--as-of", AS_OF),
        "plan json": ("retention", "plan", "--as-of", AS_OF, "-f", "json", *by_flag),
        "plan list": ("retention", "plan", "--list", "--as-of", AS_OF),
        "plan list json": ("retention", "plan", "--list", "--as-of", AS_OF, "-f", "jsonl"),
        "plan memory": ("retention", "plan", "-l", "-N", "memory", "--as-of", AS_OF, *by_flag),
        "exit code": ("retention", "plan", "--exit-code", "-q", "-N", "memory", "--as-of", AS_OF),
        "dry run": ("retention", "sweep", "--dry-run", "--as-of", AS_OF),
        "no --yes": ("retention", "sweep", "-N", "memory", "--as-of", AS_OF),
    }
    seen: dict[str, Any] = {}
    for name, args in runs.items():
        env = None if by_flag[0] in args else by_env
        run = cli(*store, *args, env=env)
        seen[name] = (run.exit_code, run.stdout, run.stderr)
    sweep = cli(*store, "retention", "sweep", "--yes", "--as-of", AS_OF, "-f", "json", env=by_env)
    seen["sweep"] = (sweep.exit_code, _sweep_document(sweep.stdout), sweep.stderr)
    table = cli(*store, "retention", "sweep", "--yes", "--as-of", AS_OF, *by_flag)
    seen["sweep again"] = (table.exit_code, table.stdout.split("swept ")[0], table.stderr)
    return seen


def _due_memories(cli: Any, db: Path, config: Path) -> list[str]:
    """The memory keys a sweep as of AS_OF deletes, at every level."""
    import json

    run = cli("--db", str(db), "--config", str(config), "retention", "plan", "-l", "-N",
              "memory", "--as-of", AS_OF, "--taint", "RESTRICTED", "-f", "json")  # fmt: skip
    assert run.exit_code == 0, run.stderr
    return [row["key"] for row in json.loads(run.stdout) if row["action"] == "delete"]


@settings(SETTINGS, max_examples=12)
@given(case=stores())
def test_namespace_counts_retention_plans_and_sweeps_ignore_memories_above_the_taint(
    cli: Any, case: tuple[Level, dict[str, str], dict[str, str]]
) -> None:
    """Issue 35: `retention plan --list` named (and sized) memory keys above a set taint,
    and `kv namespaces` counted them. At each taint, nothing above it is named, counted
    or sized: the outputs are those of the same store without them. The sweep still
    deletes what the policies say at every level: retention is not a read."""
    taint, low, high = case
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "triggerfish.yaml"
        config.write_text("retention:\n  memory: 30d\n")
        a = write_gateway_store(Path(tmp) / "a.db", {**OTHER_ROWS, **low})
        full = {**OTHER_ROWS, **high, **ODD_KEYS, **low}
        b = write_gateway_store(Path(tmp) / "b.db", full)
        due = _due_memories(cli, write_gateway_store(Path(tmp) / "c.db", full), config)
        assert "memory:main-session:SECRET:odd" in due
        assert observe_commands(cli, b, config, taint) == observe_commands(cli, a, config, taint)
        with SqliteStorage(b) as store:
            assert not store.get_many(due)  # hidden or not, every due memory is gone
            for key, value in store.scan("audit:"):
                if key.endswith(":admin_kv_raw_read"):  # what --list named above PUBLIC
                    assert not any(hidden in value for hidden in (*high, *ODD_KEYS)), value
