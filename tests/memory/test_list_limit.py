"""``memory list --limit N`` for one agent stops after N, and answers as a full read does.

The limited listing is a merge of the agent's range at each visible level
(issue 15: it read every memory of the agent to apply shadowing). Its
records must be exactly those of the full read (every row of the agent
parsed, shadowed, sorted, then cut at N), for any store: shadowing across
levels, soft-deleted and malformed versions, tag filters, keys holding ``:``
and characters on either side of it, other agents whose ids share a prefix.
The malformed records it names are those of the full read up to the key of
the last memory shown (it reads no further); when the store holds N or
fewer memories the answers are identical in every field.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.gateway import memory_record
from triggerfish_cli.classification import Level
from triggerfish_cli.memory import keys as memory_keys
from triggerfish_cli.memory import listing
from triggerfish_cli.memory import records as memory
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

AGENT = "main-session"
OTHER_AGENTS = ("main", "main-session-2", "main-sessio")
# Keys around ':' (0x3a) and beyond ASCII, so key order is tested, not assumed.
key_text = st.one_of(
    st.sampled_from(["a", "a:b", "a-b", "a;", "b", "é", "日", ""]),  # shared across levels
    st.text(alphabet="a-:9;Z_éø日", min_size=0, max_size=4),
)
TAGS = ("work", "persona")

good = st.tuples(st.lists(st.sampled_from(TAGS), unique=True), st.booleans())  # tags, expired
malformed = st.sampled_from(
    ["{broken", '{"content":"x","tags":[],"expired":false}', '"a string"', "[]"]
)
version = st.one_of(good, good, good, malformed)
levels = st.sampled_from([*(level.name for level in Level), "SECRET"])
rows_strategy = st.builds(
    lambda mine, others: {**others, **mine},
    st.dictionaries(st.tuples(st.just(AGENT), levels, key_text), version, min_size=4, max_size=30),
    st.dictionaries(
        st.tuples(st.sampled_from(OTHER_AGENTS), levels, key_text), version, max_size=8
    ),
)
case_strategy = st.tuples(
    rows_strategy,
    st.sampled_from(list(Level)),
    st.integers(min_value=1, max_value=6),
    st.sampled_from([None, "work"]),
)


def kv_rows(spec: dict[tuple[str, str, str], Any]) -> dict[str, str]:
    rows = {}
    for (agent, level, key), value in spec.items():
        skey = f"memory:{agent}:{level}:{key}"
        if isinstance(value, str):
            rows[skey] = value
        else:
            tags, expired = value
            rows[skey] = memory_record(
                key, level, f"about {key}", agent=agent, tags=list(tags), expired=expired
            )
    return rows


def check(provider: Any, taint: Level, limit: int, tag: str | None) -> None:
    full = listing._read_all(provider, taint=taint, agent=AGENT, tag=tag, limit=0)
    limited = memory.list_memories(provider, taint=taint, agent=AGENT, tag=tag, limit=limit)
    assert limited.records == full.records[:limit]
    if limited.malformed == full.malformed:
        return
    # Stopped at the limit: the malformed rows up to the last key shown.
    assert len(limited.records) == limit
    last = limited.records[-1].key
    expected = []
    for item in full.malformed:
        parts = memory_keys.split_key(item.storage_key)
        if parts is not None and parts[2] <= last:
            expected.append(item)
    assert limited.malformed == expected


SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(case=case_strategy)
def test_sqlite_limited_list_is_the_full_listing_cut(case: Any) -> None:
    spec, taint, limit, tag = case
    with tempfile.TemporaryDirectory() as tmp:
        provider = SqliteStorage(Path(tmp) / "s.db", create=True)
        try:
            provider.set_many(kv_rows(spec).items())
            check(provider, taint, limit, tag)
        finally:
            provider.close()


@pytest.fixture
def fresh_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], Any]]:
    opened: list[Any] = []
    cleanup: list[Callable[[], None]] = []
    backend = request.param

    def make() -> Any:
        if backend == "postgres":
            from triggerfish_cli.storage.postgres.backend import PostgresStorage

            server = request.getfixturevalue("postgres")
            schema = server.new_schema()
            cleanup.append(lambda: server.drop_schema(schema))
            provider: Any = PostgresStorage(server.dsn, schema=schema, create=True)
        else:
            from triggerfish_cli.storage.s3.backend import S3Storage

            server = request.getfixturevalue("s3")
            provider = S3Storage(
                server.new_bucket(),
                "tf/",
                endpoint_url=server.endpoint_url,
                region=server.region,
                create=True,
            )
        opened.append(provider)
        return provider

    yield make
    for provider in opened:
        provider.close()
    for step in cleanup:
        step()


@pytest.mark.parametrize("fresh_store", ["postgres", "s3"], indirect=True)
@settings(SETTINGS, max_examples=12)
@given(case=case_strategy)
def test_other_backends_limited_list_is_the_full_listing_cut(
    fresh_store: Callable[[], Any], case: Any
) -> None:
    spec, taint, limit, tag = case
    provider = fresh_store()
    provider.set_many(kv_rows(spec).items())
    check(provider, taint, limit, tag)


def test_a_limited_list_reads_only_the_first_rows_of_each_level(tmp_path: Path) -> None:
    """200 memories at each level; --limit 3 reads 4 rows per level range, in one query each."""
    provider = SqliteStorage(tmp_path / "s.db", create=True)
    provider.set_many(
        (
            memory_keys.storage_key(AGENT, level, f"k{n:03}"),
            memory_record(f"k{n:03}", level.name, "x", agent=AGENT),
        )
        for level in Level
        for n in range(200)
    )
    statements: list[str] = []
    provider.connection.set_trace_callback(statements.append)
    listing = memory.list_memories(provider, taint=Level.INTERNAL, agent=AGENT, limit=3)
    provider.connection.set_trace_callback(None)
    assert [(r.key, r.level) for r in listing.records] == [
        ("k000", Level.INTERNAL),
        ("k001", Level.INTERNAL),
        ("k002", Level.INTERNAL),
    ]
    scans = [s for s in statements if s.startswith("SELECT key, value FROM kv")]
    assert len(scans) == 2 and all(s.rstrip().endswith("LIMIT 4") for s in scans), scans
    provider.close()
