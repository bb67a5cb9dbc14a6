"""The S3 backend against a real (moto) server: what the contract suite cannot show."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CliFn
from tests.helpers.services import S3
from triggerfish_cli.errors import BackendUnavailableError, InvalidDataError, RefusedError
from triggerfish_cli.storage.provider import PrefixStats
from triggerfish_cli.storage.s3.backend import S3Storage


def open_store(s3: S3, bucket: str, prefix: str = "tf/", **kwargs: Any) -> S3Storage:
    return S3Storage(bucket, prefix, endpoint_url=s3.endpoint_url, region=s3.region, **kwargs)


@pytest.fixture
def bucket(s3: S3) -> str:
    return s3.new_bucket()


@pytest.fixture
def store(s3: S3, bucket: str) -> Iterator[S3Storage]:
    provider = open_store(s3, bucket, create=True)
    yield provider
    provider.close()


def object_names(s3: S3, bucket: str) -> list[str]:
    listed = s3.client().list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]
    return [item["Key"] for item in listed.get("Contents", [])]


def test_any_key_round_trips_and_names_fit(s3: S3, bucket: str, store: S3Storage) -> None:
    keys = {
        "sessions:3f2a": "a",
        "a/b/../c": "slashes",
        "100% done": "percent",
        "trailing space ": "t",
        "..": "dots",
        "": "the empty key",
        "memory:main-session:PUBLIC:" + "日本語" * 200: "long unicode",  # 1800 bytes
        "x" * 3000: "very long",
        "é:" + "y" * 1100: "long after a non-ASCII byte",
    }
    store.set_many(keys.items())
    assert store.list() == sorted(keys)
    assert dict(store.scan(batch_size=3)) == keys
    for key, value in keys.items():
        assert store.get(key) == value
    assert all(len(name.encode()) <= 1024 for name in object_names(s3, bucket))
    assert all(name.startswith("tf/") for name in object_names(s3, bucket))
    assert store.prefix_stats(["x"]) == {"x": PrefixStats(1, len("very long"))}
    assert store.list("memory:") == ["memory:main-session:PUBLIC:" + "日本語" * 200]
    assert store.list("x" * 2000) == ["x" * 3000]
    assert list(store.scan_keys(start_after="x" * 2999)) == ["x" * 3000, "é:" + "y" * 1100]
    assert list(store.scan_keys(start_after="x" * 3000)) == ["é:" + "y" * 1100]
    store.delete("x" * 3000)
    assert store.get("x" * 3000) is None
    assert store.delete_many(["", "..", "missing"]) == 2


_long_keys = st.text(st.sampled_from("ab:/é"), min_size=0, max_size=60)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), _long_keys, st.text(st.sampled_from("xyz"), max_size=3)),
        st.tuples(st.just("delete"), _long_keys, st.just("")),
    ),
    max_size=12,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_ops, prefix=st.text(st.sampled_from("ab:é"), max_size=30), after=_long_keys)
def test_long_keys_on_a_real_server_behave_like_a_sorted_dict(
    s3: S3, bucket: str, ops: list[tuple[str, str, str]], prefix: str, after: str
) -> None:
    """A tiny name budget makes most keys long: listing, prefixes and resuming stay exact."""
    provider = open_store(s3, bucket, name_limit=90, create=True)
    try:
        provider.clear()
        model: dict[str, str] = {}
        for op, key, value in ops:
            if op == "set":
                provider.set(key, value)
                model[key] = value
            else:
                provider.delete(key)
                model.pop(key, None)
        assert provider.list() == sorted(model)
        assert list(provider.scan(batch_size=2)) == sorted(model.items())
        under = sorted(k for k in model if k.startswith(prefix))
        assert provider.list(prefix) == under
        assert provider.count(prefix) == len(under)
        assert list(provider.scan_keys(start_after=after)) == sorted(k for k in model if k > after)
        assert list(provider.scan_keys(prefix, start_after=after)) == [
            k for k in under if k > after
        ]
    finally:
        provider.close()


def test_clear_keeps_objects_outside_the_prefix(s3: S3, bucket: str, store: S3Storage) -> None:
    client: Any = s3.client()
    client.put_object(Bucket=bucket, Key="other/keep", Body=b"x")
    client.put_object(Bucket=bucket, Key="tf", Body=b"not under tf/")
    store.set_many((f"k{i}", "v") for i in range(1001))  # two DeleteObjects requests
    store.clear()
    # the store's identity object stays: the prefix is still a store, and the same one
    assert object_names(s3, bucket) == ["other/keep", "tf", "tf/#tfadmin-store"]


def test_foreign_objects_under_the_prefix_are_an_error(
    s3: S3, bucket: str, store: S3Storage
) -> None:
    client: Any = s3.client()
    client.put_object(Bucket=bucket, Key="tf/", Body=b"")  # a console "folder": ignored
    store.set("a", "1")
    assert store.list() == ["a"]
    client.put_object(Bucket=bucket, Key="tf/notes.txt", Body=b"hello")
    with pytest.raises(InvalidDataError, match="not a Triggerfish key"):
        store.list()
    client.put_object(Bucket=bucket, Key="tf/bad", Body=b"\xff\xfe")
    with pytest.raises(InvalidDataError, match="not UTF-8"):
        store.get("bad")


def test_compare_and_delete_keeps_a_record_rewritten_meanwhile(
    store: S3Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.set("sessions:1", "old")
    store.set("sessions:2", "old")
    real_delete = store.client.delete_object

    def gateway_writes_first(**kwargs: Any) -> Any:
        if kwargs["Key"].endswith("sessions:1"):
            store.client.put_object(Bucket=kwargs["Bucket"], Key=kwargs["Key"], Body=b"new")
        return real_delete(**kwargs)

    monkeypatch.setattr(store.client, "delete_object", gateway_writes_first)
    deleted = store.delete_if_unchanged([("sessions:1", "old"), ("sessions:2", "old")])
    assert deleted == 1
    assert store.get("sessions:1") == "new" and store.get("sessions:2") is None


def test_delete_many_counts_only_existing_keys_among_many(store: S3Storage) -> None:
    store.set_many((f"k:{i:04d}", "v") for i in range(300))
    doomed = [f"k:{i:04d}" for i in range(0, 300, 10)] + [f"k:{i:04d}x" for i in range(5)]
    store.list_budget = 0  # a sparse batch: list a little, then HEAD the rest
    assert store.delete_many(doomed, batch_size=20) == 30
    assert store.count() == 270
    store.list_budget = 1000
    assert store.delete_many([f"k:{i:04d}" for i in range(300)]) == 270


def test_read_only_store_refuses_writes(s3: S3, bucket: str) -> None:
    open_store(s3, bucket, create=True).close()
    provider = open_store(s3, bucket, read_only=True)
    for write in (
        lambda: provider.set("a", "1"),
        lambda: provider.set_many([("a", "1")]),
        lambda: provider.delete("a"),
        provider.clear,
        lambda: provider.delete_many(["a"]),
    ):
        with pytest.raises(RefusedError, match="read-only"):
            write()
    assert object_names(s3, bucket) == ["tf/#tfadmin-store"]


# -- configuration and failures through the CLI ------------------------------------------


def config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "s3.yaml"
    path.write_text("storage:\n  backend: s3\n" + body, encoding="utf-8")
    return str(path)


def test_configured_store_through_the_cli(cli: CliFn, s3: S3, bucket: str, tmp_path: Path) -> None:
    yaml = config(
        tmp_path,
        f"  bucket: {bucket}\n  prefix: prod\n  endpoint_url: {s3.endpoint_url}\n"
        f"  region: {s3.region}\n",
    )
    missing = cli("--config", yaml, "kv", "set", "a/b", '{"x":1}')
    assert missing.exit_code == 7 and "nothing under the prefix" in missing.stderr
    assert object_names(s3, bucket) == []  # no store made by a typo
    open_store(s3, bucket, "prod", create=True).close()
    assert cli("--config", yaml, "kv", "set", "a/b", '{"x":1}').exit_code == 0
    assert cli("--config", yaml, "kv", "get", "a/b").stdout == '{"x":1}'
    assert "prod/a.2Fb" in object_names(s3, bucket)


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ("  bucket: b1\n  aws_secret_access_key: x\n", 4, "credentials never go"),
        ("  bucket: b1\n  endpoint_url: http://me:pw@127.0.0.1:9/\n", 4, "never go in the URL"),
        ("  prefix: x/\n", 8, "storage.bucket: required"),
        ("  bucket: b1\n  colour: red\n", 8, "unknown setting"),
        ("  bucket: 'no/slash'\n", 8, "not a bucket name"),
        ("  bucket: b1\n  prefix: /abs\n", 8, "must not start with /"),
        ("  bucket: b1\n  endpoint_url: ftp://x\n", 8, "http(s)://"),
    ],
)
def test_settings_are_checked(
    cli: CliFn, tmp_path: Path, body: str, code: int, message: str
) -> None:
    result = cli("--config", config(tmp_path, body), "kv", "list")
    assert result.exit_code == code, result.stderr
    assert message in result.stderr


def test_backend_s3_without_settings_is_a_usage_error(cli: CliFn) -> None:
    result = cli("--backend", "s3", "kv", "list")
    assert result.exit_code == 2 and "storage.bucket" in result.stderr


def test_missing_bucket_is_exit_7(cli: CliFn, s3: S3, tmp_path: Path) -> None:
    yaml = config(tmp_path, f"  bucket: no-such-bucket\n  endpoint_url: {s3.endpoint_url}\n")
    result = cli("--config", yaml, "kv", "list")
    assert result.exit_code == 7
    assert "no-such-bucket" in result.stderr and "not found" in result.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_endpoint_is_exit_7(cli: CliFn, s3: S3, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = cli(
        "--config", config(tmp_path, f"  bucket: b1\n  endpoint_url: {url}\n"), "kv", "list"
    )
    assert result.exit_code == 7
    assert url in result.stderr and "cannot reach S3" in result.stderr
    assert "Traceback" not in result.stderr


def test_silent_endpoint_times_out_with_exit_7(cli: CliFn, s3: S3, tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        yaml = config(tmp_path, f"  bucket: b1\n  endpoint_url: {url}\n  connect_timeout: 1\n")
        result = cli("--config", yaml, "kv", "list")
    assert result.exit_code == 7
    assert url in result.stderr and "timeout" in result.stderr.lower()


def test_missing_credentials_is_exit_7_with_the_chain(
    cli: CliFn, s3: S3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    yaml = config(tmp_path, f"  bucket: {bucket}\n  endpoint_url: {s3.endpoint_url}\n")
    result = cli("--config", yaml, "kv", "list")
    assert result.exit_code == 7
    assert "no AWS credentials" in result.stderr and "AWS_PROFILE" in result.stderr


def test_errors_are_backend_unavailable_in_the_core(s3: S3) -> None:
    with pytest.raises(BackendUnavailableError):
        open_store(s3, "no-such-bucket")


def test_compare_and_swap_loses_a_race_inside_its_read_and_put(
    s3: S3, bucket: str, store: S3Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway writing between our GET and our conditional PUT wins (If-Match)."""
    store.set("k", "old")
    store.set("gone", "old")
    other = open_store(s3, bucket)
    read = store._read

    def read_then_race(name: str) -> Any:
        found = read(name)
        other.set("k", "gateway")
        other.delete("gone")
        return found

    monkeypatch.setattr(store, "_read", read_then_race)
    assert store.replace_if_unchanged([("k", "old", "new"), ("gone", "old", "new")]) == 0
    monkeypatch.undo()
    assert dict(store.scan()) == {"k": "gateway"}


def test_a_lease_is_not_a_key_and_is_gone_after_the_block(
    s3: S3, bucket: str, store: S3Storage
) -> None:
    store.set("a", "1")
    with store.lock("retention-sweep"):
        assert any("#tfadmin-lock/" in name for name in object_names(s3, bucket))
        assert store.list() == ["a"] and store.count() == 1
        assert dict(store.scan()) == {"a": "1"}
        assert store.any_keys([("", None), ("a", "a")]) == [True, False]
    assert object_names(s3, bucket) == ["tf/#tfadmin-store", "tf/a"]


def test_an_expired_lease_of_a_crashed_holder_is_taken_over(
    s3: S3, bucket: str, store: S3Storage
) -> None:
    import json
    import time

    from triggerfish_cli.errors import BusyError
    from triggerfish_cli.storage.s3.lease import lease_name

    client: Any = s3.client()
    name = "tf/" + lease_name("job")
    crashed = {"holder": "x", "pid": 1, "host": "gone", "since": 0, "expires": time.time() + 60}
    client.put_object(Bucket=bucket, Key=name, Body=json.dumps(crashed).encode())
    with pytest.raises(BusyError) as info, store.lock("job"):
        pass
    assert info.value.exit_code == 6 and "pid 1 on gone" in str(info.value)
    crashed["expires"] = time.time() - 1  # its holder died and never renewed it
    client.put_object(Bucket=bucket, Key=name, Body=json.dumps(crashed).encode())
    with store.lock("job"):
        body = json.loads(client.get_object(Bucket=bucket, Key=name)["Body"].read())
        assert body["holder"] != "x" and body["expires"] > time.time()
    assert name not in object_names(s3, bucket)


def test_a_long_job_renews_its_lease(s3: S3, bucket: str, store: S3Storage) -> None:
    import json
    import time

    from triggerfish_cli.storage.s3.lease import lease_name

    store.lease_ttl = 0.4  # renewed every 0.1 s
    client: Any = s3.client()
    name = "tf/" + lease_name("job")
    with store.lock("job"):
        first = json.loads(client.get_object(Bucket=bucket, Key=name)["Body"].read())
        for _ in range(100):
            time.sleep(0.05)
            now = json.loads(client.get_object(Bucket=bucket, Key=name)["Body"].read())
            if now["expires"] > first["expires"]:
                break
        assert now["expires"] > first["expires"] and now["holder"] == first["holder"]


class FreezingProxy:
    """TCP to a server until frozen; from then on it accepts connections, holds them
    open and passes nothing either way: an endpoint that never answers."""

    def __init__(self, port: int) -> None:
        import threading

        self.port = port
        self.frozen = threading.Event()
        self.stopped = threading.Event()
        self.held: list[socket.socket] = []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        import threading

        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.held.append(conn)
            if self.frozen.is_set():
                continue
            upstream = socket.create_connection(("127.0.0.1", self.port))
            self.held.append(upstream)
            for a, b in ((conn, upstream), (upstream, conn)):
                thread = threading.Thread(target=self._pipe, args=(a, b), daemon=True)
                thread.start()
                self._threads.append(thread)

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        a.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                data = a.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    b.shutdown(socket.SHUT_WR)
                return
            if self.frozen.is_set():
                continue  # swallowed: no request reaches the server, no answer comes back
            try:
                b.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        for thread in self._threads:
            thread.join(timeout=5)
        for sock in self.held:
            sock.close()


@pytest.fixture
def freezing_proxy(s3: S3) -> Iterator[FreezingProxy]:
    from urllib.parse import urlsplit

    proxy = FreezingProxy(int(urlsplit(s3.endpoint_url).port or 80))
    yield proxy
    proxy.close()


@pytest.mark.timeout(60)  # a guard against a hang, not a measure
def test_an_endpoint_frozen_mid_migrate_fails_in_bounded_time_with_exit_7(
    cli: CliFn,
    s3: S3,
    bucket: str,
    tmp_path: Path,
    freezing_proxy: FreezingProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 15: 124-155 s with connect_timeout 3 (30 s reads, 3 tries, then more
    requests). Each request now gives up after max_attempts reads of read_timeout."""
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    source = tmp_path / "source.db"
    with SqliteStorage(source, create=True) as provider:
        provider.set_many((f"conv:s:{n:04}", f'{{"n": {n}}}') for n in range(300))
    yaml = config(
        tmp_path,
        f"  bucket: {bucket}\n  prefix: tf/\n  endpoint_url: {freezing_proxy.url}\n"
        f"  region: {s3.region}\n  connect_timeout: 1\n  read_timeout: 1\n  max_attempts: 2\n",
    )
    real = S3Storage.set_batched

    def frozen_before_the_second_batch(self: S3Storage, items: Any) -> int:
        if freezing_proxy.url == self.endpoint_url and getattr(self, "_batches", 0) == 1:
            freezing_proxy.frozen.set()
        self._batches = getattr(self, "_batches", 0) + 1  # type: ignore[attr-defined]
        return real(self, items)

    monkeypatch.setattr(S3Storage, "set_batched", frozen_before_the_second_batch)
    result = cli("migrate", "--from", str(source), "--to", yaml, "--batch-size", "100")
    assert freezing_proxy.frozen.is_set()
    assert result.exit_code == 7, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "timeout" in lines[0].lower() and "2 attempt(s)" in lines[0]
    assert "read_timeout 1 s" in lines[0] and "Traceback" not in result.stderr
