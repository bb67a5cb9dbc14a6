"""The storage contract: the definition of a backend.

Every backend runs every test here. A backend is done when it passes this
suite, not before. The hypothesis tests compare each backend with a plain
sorted dict: same keys, same order, same prefix results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.backends import BACKENDS, Provider
from triggerfish_cli.errors import InvalidDataError
from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.provider import PrefixStats, StorageProvider, value_size

Factory = Callable[[], Provider]


@pytest.fixture(params=sorted(BACKENDS))
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    opened: list[Provider] = []

    def factory() -> Provider:
        provider = BACKENDS[request.param](tmp_path, request)
        opened.append(provider)
        return provider

    yield factory
    for provider in opened:
        provider.close()


@pytest.fixture
def kv(make: Factory) -> Provider:
    return make()


TRICKY = [
    "a",
    "A",
    "a:b",
    "a_b",
    "a%b",
    "a%",
    "a_",
    "ab",
    "aB",
    "a:",
    "a::c",
    "é",
    "e",
    "日本",
    "日",
    "😀",
    "\U0010ffff",
    "\U0010ffffx",
    "z",
    "Z",
    "%",
    "_",
    "*",
    "a*",
    "memory:main-session:PUBLIC:trigger:instructions",
    "sessions:1",
    "Sessions:1",
]


def fill(kv: Provider, keys: list[str]) -> None:
    for key in keys:
        kv.set(key, f"v:{key}")


def model_list(keys: list[str], prefix: str | None) -> list[str]:
    return sorted(k for k in set(keys) if prefix is None or k.startswith(prefix))


def test_is_a_storage_provider(kv: Provider) -> None:
    assert isinstance(kv, StorageProvider)
    assert kv.backend in ("memory", "sqlite", "minimal", "postgres", "s3")
    assert kv.describe()


def test_the_write_gate_bulk_writes_and_checkpoint_capabilities(kv: Provider) -> None:
    """SQLite alone has a write gate (and a WAL to checkpoint); elsewhere the three are
    no-ops, so a job such as the sweep asks the provider instead of its class."""
    gate = kv.write_gate
    assert (gate is not None) == (kv.backend == "sqlite")
    with kv.bulk_writes():
        kv.set("bulk", "1")
    assert kv.get("bulk") == "1"
    if gate is not None:
        assert gate.durable  # restored after the bulk job
    busy, frames, done = kv.checkpoint("PASSIVE")
    if kv.backend != "sqlite":
        assert (busy, frames, done) == (0, 0, 0)
    else:  # busy when another connection of the store is mid-transaction: never an error
        assert busy in (0, 1) and (busy or 0 <= done <= frames)


def test_get_set_overwrite_delete(kv: Provider) -> None:
    assert kv.get("k") is None
    kv.set("k", "1")
    assert kv.get("k") == "1"
    kv.set("k", "2")
    assert kv.get("k") == "2"
    kv.delete("k")
    assert kv.get("k") is None
    kv.delete("k")  # deleting an absent key is a no-op
    assert kv.list() == []


@pytest.mark.parametrize(
    "value", ["", "bare string", '{"a":1}', "line\nbreak", "ünïcødé 日本 😀", "x" * 200_000]
)
def test_values_round_trip_exactly(kv: Provider, value: str) -> None:
    kv.set("key", value)
    assert kv.get("key") == value
    assert dict(kv.scan()) == {"key": value}


def test_list_is_binary_order(kv: Provider) -> None:
    fill(kv, TRICKY)
    assert kv.list() == sorted(TRICKY)
    assert kv.list(None) == sorted(TRICKY)
    assert kv.list("") == sorted(TRICKY)


@pytest.mark.parametrize(
    "prefix",
    [
        "a",
        "a_",
        "a%",
        "A",
        "a:",
        "é",
        "日",
        "\U0010ffff",
        "%",
        "_",
        "*",
        "sessions:",
        "memory:main-session:PUBLIC:trigger:",
        "nothing",
        "aB",
    ],
)
def test_prefix_is_literal_and_case_sensitive(kv: Provider, prefix: str) -> None:
    fill(kv, TRICKY)
    expected = model_list(TRICKY, prefix)
    assert kv.list(prefix) == expected
    assert list(kv.scan_keys(prefix)) == expected
    assert [key for key, _ in kv.scan(prefix)] == expected
    assert kv.count(prefix) == len(expected)


def test_underscore_and_percent_are_not_wildcards(kv: Provider) -> None:
    fill(kv, ["a_b", "axb", "a%b", "a%%", "AXB"])
    assert kv.list("a_") == ["a_b"]
    assert kv.list("a%") == ["a%%", "a%b"]
    assert kv.list("ax") == ["axb"]


def test_scan_pages_and_resumes(kv: Provider) -> None:
    keys = [f"n:{i:03d}" for i in range(25)] + ["m:1", "o:1"]
    fill(kv, keys)
    for batch in (1, 2, 7, 1000):
        got = list(kv.scan("n:", batch_size=batch))
        assert [k for k, _ in got] == [f"n:{i:03d}" for i in range(25)]
        assert all(v == f"v:{k}" for k, v in got)
    assert [k for k, _ in kv.scan("n:", start_after="n:010", batch_size=3)] == [
        f"n:{i:03d}" for i in range(11, 25)
    ]
    # start_after before the prefix starts at the prefix
    assert next(iter(kv.scan_keys("n:", start_after="a"))) == "n:000"
    assert list(kv.scan_keys(None, start_after="n:023")) == ["n:024", "o:1"]


def test_head_is_the_first_rows_of_scan(kv: Provider) -> None:
    fill(kv, TRICKY + [f"n:{i:03d}" for i in range(25)])
    for prefix in ("n:", "a", "日", "%", "a_", "nothing", "n:00"):
        expected = list(kv.scan(prefix))
        for limit in (1, 3, 10, 1000):
            assert kv.head(prefix, limit) == expected[:limit]
    assert kv.head("n:", 0) == []


def test_scan_many_reads_each_key_under_the_prefixes_once(kv: Provider) -> None:
    fill(kv, TRICKY)
    for prefixes in (["a", "日", "%"], ["sessions:", "memory:"], ["nothing"], [], ["a_", "a%"]):
        expected = sorted(k for k in TRICKY if any(k.startswith(p) for p in prefixes))
        got = list(kv.scan_many(prefixes, batch_size=2))
        assert sorted(got) == [(k, f"v:{k}") for k in expected]
        assert len(got) == len(expected)
    kv.set("a", "changed")  # the snapshot has ended: the store is writable again
    assert dict(kv.scan_many(["a"]))["a"] == "changed"


def test_scan_many_on_a_large_share_and_a_small_share(kv: Provider) -> None:
    fill(kv, [f"big:{i:04d}" for i in range(300)] + [f"small:{i}" for i in range(5)])
    assert len(list(kv.scan_many(["big:", "small:"], batch_size=50))) == 305
    assert sorted(k for k, _ in kv.scan_many(["small:"])) == [f"small:{i}" for i in range(5)]
    stream = kv.scan_many(["big:"], batch_size=10)
    next(stream)
    stream.close()  # stopping early ends the snapshot
    kv.set("big:0000", "new")
    assert kv.get("big:0000") == "new"


def test_snapshot_scan_is_every_key_in_key_order(kv: Provider) -> None:
    fill(kv, TRICKY)
    got = list(kv.snapshot_scan(batch_size=2))
    assert got == [(k, f"v:{k}") for k in sorted(TRICKY)]
    stream = kv.snapshot_scan(batch_size=1)
    next(stream)
    stream.close()  # stopping early ends the snapshot
    kv.set("a", "changed")
    assert dict(kv.snapshot_scan())["a"] == "changed"


def test_any_keys_probes_prefixes_after_a_key(kv: Provider) -> None:
    fill(kv, ["conv:a:001", "conv:a:002", "conv:b:001", "conv:bb:001", "x", "a_b", "\U0010ffff"])
    probes: list[tuple[str, str | None]] = [
        ("conv:a:", None),
        ("conv:a:", "conv:a:001"),
        ("conv:a:", "conv:a:002"),  # nothing after the last one
        ("conv:b:", None),  # conv:bb: is not under conv:b:
        ("conv:b:", "conv:b:001"),
        ("conv:c:", None),
        ("a%", None),  # literal, not a wildcard
        ("a_", None),
        ("\U0010ffff", None),
        ("conv:", "a"),  # after before the prefix: any key under it
    ]
    assert kv.any_keys(probes) == [True, True, False, True, False, False, False, True, True, True]
    assert kv.any_keys([]) == []
    many = [(f"p{i}:", None) for i in range(700)]
    fill(kv, ["p3:x", "p699:y"])
    answers = kv.any_keys(many)
    assert [i for i, hit in enumerate(answers) if hit] == [3, 699]


def test_get_many(kv: Provider) -> None:
    fill(kv, ["a", "b", "c"])
    assert kv.get_many(["a", "c", "missing"]) == {"a": "v:a", "c": "v:c"}
    assert kv.get_many([]) == {}
    many = [f"k{i}" for i in range(1200)]
    fill(kv, many)
    assert len(kv.get_many(many)) == 1200


def test_set_many(kv: Provider) -> None:
    assert kv.set_many([("a", "1"), ("b", "2"), ("a", "3")]) >= 2
    assert dict(kv.scan()) == {"a": "3", "b": "2"}


def test_delete_many_batches_and_reports(kv: Provider) -> None:
    fill(kv, [f"d:{i}" for i in range(10)] + ["keep"])
    batches: list[int] = []
    deleted = kv.delete_many(
        [f"d:{i}" for i in range(10)] + ["absent"], batch_size=3, on_batch=batches.append
    )
    assert deleted == 10
    assert sum(batches) == 10 and len(batches) == 4
    assert kv.list() == ["keep"]


def test_delete_if_unchanged_keeps_rewritten_records(kv: Provider) -> None:
    kv.set("same", "old")
    kv.set("changed", "new")
    kv.set("other", "x")
    deleted = kv.delete_if_unchanged([("same", "old"), ("changed", "old"), ("gone", "old")])
    assert deleted == 1
    assert kv.list() == ["changed", "other"]
    assert kv.get("changed") == "new"


def test_replace_if_unchanged_is_compare_and_swap(kv: Provider) -> None:
    kv.set("same", "old")
    kv.set("changed", "new")
    kv.set("other", "x")
    batches: list[int] = []
    replaced = kv.replace_if_unchanged(
        [("same", "old", "trimmed"), ("changed", "old", "trimmed"), ("gone", "old", "trimmed")],
        batch_size=2,
        on_batch=batches.append,
    )
    assert replaced == 1
    assert sum(batches) == 1 and len(batches) == 2
    assert dict(kv.scan()) == {"same": "trimmed", "changed": "new", "other": "x"}
    assert kv.get("gone") is None  # a missing key is never created
    assert kv.replace_if_unchanged([]) == 0


def test_compare_and_swap_loses_to_a_concurrent_write(make: Factory) -> None:
    """A write from another connection after the plan was made wins over our swap."""
    mine, theirs = make(), make()
    for key in ("a", "b", "c", "d"):
        mine.set(key, "old")

    def replacements() -> Iterator[tuple[str, str, str]]:
        yield "a", "old", "new"
        theirs.set("b", "gateway")  # rewritten between our read and our swap
        theirs.delete("c")  # deleted meanwhile: never re-created
        yield "b", "old", "new"
        yield "c", "old", "new"
        yield "d", "old", "new"

    assert mine.replace_if_unchanged(replacements(), batch_size=1) == 2
    assert dict(theirs.scan()) == {"a": "new", "b": "gateway", "d": "new"}

    def deletions() -> Iterator[tuple[str, str]]:
        yield "a", "new"
        theirs.set("d", "gateway again")
        yield "d", "new"
        yield "b", "gateway"

    assert mine.delete_if_unchanged(deletions(), batch_size=1) == 2
    assert dict(theirs.scan()) == {"d": "gateway again"}


def test_lock_is_exclusive_per_name_and_store(make: Factory) -> None:
    from triggerfish_cli.errors import BusyError

    first, second = make(), make()
    with first.lock("retention-sweep"):
        with pytest.raises(BusyError) as info, second.lock("retention-sweep"):
            pass
        assert info.value.exit_code == 6
        with second.lock("other-job"):  # another name is another lock
            pass
    with second.lock("retention-sweep"):  # released at the end of the block
        pass


def test_lock_is_released_when_the_block_fails(make: Factory) -> None:
    first, second = make(), make()
    with pytest.raises(KeyboardInterrupt), first.lock("job"):
        raise KeyboardInterrupt
    with second.lock("job"):
        pass


def test_lock_waits_for_the_holder(make: Factory) -> None:
    import threading

    first, second = make(), make()
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with first.lock("job"):
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(10)
    threading.Timer(0.2, release.set).start()
    with second.lock("job", wait=30):
        assert release.is_set()  # we got it only once the holder let go
    holder.join(10)


@pytest.mark.parametrize(("key", "value"), [("nul:value", "a\x00b"), ("nul\x00key", "v")])
def test_nul_character_round_trips_or_is_refused(kv: Provider, key: str, value: str) -> None:
    """A NUL either round-trips exactly or is refused (exit 8) with nothing written."""
    kv.set("before", "1")
    try:
        kv.set(key, value)
    except InvalidDataError:
        assert kv.get(key) is None
        with pytest.raises(InvalidDataError):
            kv.set_many([("other", "2"), (key, value)] + [(f"n{i}", "x") for i in range(100)])
        assert dict(kv.scan()) == {"before": "1"}
        assert kv.list(key) == [] and kv.count(key) == 0
        return
    assert kv.get(key) == value
    assert dict(kv.scan()) == {"before": "1", key: value}
    assert kv.list(key) == [key]
    assert list(kv.scan_keys()) == sorted(["before", key])


def test_clear(kv: Provider) -> None:
    fill(kv, TRICKY)
    kv.clear()
    assert kv.list() == []
    assert kv.count() == 0


def test_prefix_stats_counts_utf8_bytes(kv: Provider) -> None:
    kv.set("s:1", "abc")
    kv.set("s:2", "日本")  # 6 bytes
    kv.set("t:1", "x")
    stats = kv.prefix_stats(["s:", "t:", "u:"])
    assert stats == {"s:": PrefixStats(2, 9), "t:": PrefixStats(1, 1), "u:": PrefixStats(0, 0)}
    assert value_size("日本") == 6


def test_other_stats_groups_unknown_keys_by_first_segment(kv: Provider) -> None:
    fill(kv, ["s:1", "s:2", "x:1", "x:2:3", "y:", "plain", "other", "t:1", "ta:1"])
    groups = kv.other_stats(["s:", "t:"])
    assert set(groups) == {"x:", "y:", "", "ta:"}
    assert groups["x:"].count == 2
    assert groups[""].count == 2
    assert groups["y:"] == PrefixStats(1, len("v:y:"))
    assert kv.other_stats([]).keys() == {"s:", "x:", "y:", "", "t:", "ta:"}


_key_chars = st.sampled_from([*"aAbB:_%*é日😀", "\U0010ffff"])
_keys = st.text(_key_chars, min_size=1, max_size=6)
# NUL is left out here: PostgreSQL text cannot hold it (see test_nul_character).
_values = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=5)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), _keys, _values),
        st.tuples(st.just("delete"), _keys, st.just("")),
    ),
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_ops, prefixes=st.lists(st.text(_key_chars, max_size=3), min_size=1, max_size=5))
def test_behaves_like_a_sorted_dict(
    make: Factory, ops: list[tuple[str, str, str]], prefixes: list[str]
) -> None:
    kv = make()
    try:
        check_against_model(kv, ops, prefixes)
    finally:
        kv.close()


def check_against_model(kv: Provider, ops: list[tuple[str, str, str]], prefixes: list[str]) -> None:
    kv.clear()
    model: dict[str, str] = {}
    for op, key, value in ops:
        if op == "set":
            kv.set(key, value)
            model[key] = value
        else:
            kv.delete(key)
            model.pop(key, None)
    assert kv.list() == sorted(model)
    assert list(kv.scan(batch_size=2)) == sorted(model.items())
    for prefix in prefixes:
        expected = sorted(k for k in model if k.startswith(prefix))
        assert kv.list(prefix) == expected
        assert [k for k, _ in kv.scan(prefix, batch_size=3)] == expected
        assert kv.count(prefix) == len(expected)
        size = sum(value_size(model[k]) for k in expected)
        if prefix:
            assert kv.prefix_stats([prefix])[prefix] == PrefixStats(len(expected), size)


# -- capabilities with a generic fallback (provider.py) -------------------------------------


def test_scan_stored_is_every_key_with_its_utf8_bytes(kv: Provider) -> None:
    kv.set_many([("b", "é"), ("a", "1"), ("c:d", "日本")])
    assert list(kv.scan_stored(batch_size=2)) == [
        ("a", b"1"),
        ("b", "é".encode()),
        ("c:d", "日本".encode()),
    ]


def test_unmapped_changes_no_result(kv: Provider) -> None:
    kv.set_many([("a", "1"), ("b", "2")])
    with kv.unmapped():
        assert list(kv.scan()) == [("a", "1"), ("b", "2")]
    assert kv.get("b") == "2"


def test_fill_loads_an_empty_store(kv: Provider) -> None:
    fts = [("main", "PUBLIC", "k", "some words", "")]
    meta = [("main", "PUBLIC", "k", '{"content": "some words"}')]
    indexed = kv.fill(iter([("b", "2"), ("a", "1")]), fts, meta)
    assert list(kv.scan()) == [("a", "1"), ("b", "2")]
    assert indexed in (0, 1)  # 1 where the backend keeps the gateway's memory tables


def test_is_same_store_through_two_handles_and_not_another(make: Factory) -> None:
    first, second = make(), make()  # the same store, opened twice
    assert first.is_same_store(first)
    assert first.is_same_store(second) and second.is_same_store(first)
    assert not first.is_same_store(MemoryStorage())
