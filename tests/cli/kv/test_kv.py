"""`triggerfish-admin kv` on every persistent backend and on a gateway-written store."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliFn, StoreHandle
from tests.helpers.gateway import GATEWAY_ROWS, SESSION_ID, dump_tables


def without_audit(rows: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in rows.items() if not k.startswith("audit:")}


def audit_records(rows: dict[str, str]) -> list[dict[str, object]]:
    return [json.loads(v) for k, v in sorted(rows.items()) if k.startswith("audit:")]


# -- namespaces ---------------------------------------------------------------


def test_namespaces_on_a_gateway_store(cli: CliFn, gateway_db: Path) -> None:
    result = cli("kv", "namespaces", "-f", "json")
    assert result.exit_code == 0, result.stderr
    rows = {row["namespace"]: row for row in result.json()}  # type: ignore[union-attr]
    assert rows["memory:"]["keys"] == 5 and rows["memory:"]["known"] is True
    assert rows["conv:"]["keys"] == 2
    assert rows["lineage-hash:"]["keys"] == 1
    assert rows["main-session-id"]["keys"] == 1
    assert rows["custom:"] == {
        "namespace": "custom:",
        "known": False,
        "description": "unknown namespace",
        "keys": 1,
        "bytes": 1,
    }
    assert rows[""]["keys"] == 1  # "nocolon"
    assert sum(row["keys"] for row in rows.values()) == len(GATEWAY_ROWS)
    total_bytes = sum(len(v.encode()) for v in GATEWAY_ROWS.values())
    assert sum(row["bytes"] for row in rows.values()) == total_bytes
    assert list(rows) == sorted(rows)


def test_namespaces_ages(cli: CliFn, gateway_db: Path) -> None:
    rows = {r["namespace"]: r for r in cli("kv", "namespaces", "--ages", "-f", "json").json()}
    assert rows["conv:"]["oldest"] == "2026-03-28T14:05:41.000Z"
    assert rows["conv:"]["newest"] == "2026-03-28T14:05:43.250Z"
    assert rows["conv:"]["unknown_age"] == 0
    assert rows["cron-history:"]["newest"] == "2026-03-28T09:00:00.090Z"
    assert rows["lineage:"]["oldest"] == "2026-03-28T14:05:42.000Z"
    assert rows["main-session-id"]["unknown_age"] == 1  # a bare UUID has no age
    assert rows["browser:"]["unknown_age"] == 1
    assert rows["custom:"]["unknown_age"] == 1
    assert rows["memory:"]["newest"] == "2026-03-29T08:00:00.000Z"


def test_namespaces_ages_a_pending_code_is_a_deadline_not_an_age(
    cli: CliFn, tmp_path: Path
) -> None:
    from datetime import datetime, timedelta, timezone

    from tests.helpers.gateway import write_gateway_store

    soon = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    code = json.dumps(
        {"code": "271828", "channelType": "slack", "expiresAt": soon, "used": False},
        separators=(",", ":"),
    )
    rows = {**GATEWAY_ROWS, "pairing:slack:271828": code, "pairing:pending:slack": code}
    db = write_gateway_store(tmp_path / "p.db", rows)
    result = cli("--db", str(db), "kv", "namespaces", "--ages", "-f", "json")
    assert result.exit_code == 0, result.stderr
    found = {r["namespace"]: r for r in result.json()}  # type: ignore[union-attr]
    pairing = found["pairing:"]
    assert (pairing["keys"], pairing["pending"], pairing["unknown_age"]) == (4, 2, 0)
    # oldest and newest are the linked account and the expired code, never a future time
    assert (pairing["oldest"], pairing["newest"]) == (
        "2026-02-01T12:00:00.000Z",
        "2026-03-28T14:15:00.000Z",
    )
    assert all(row["pending"] == 0 for name, row in found.items() if name != "pairing:")
    table = cli("--db", str(db), "kv", "namespaces", "--ages")
    assert "pending" in table.stdout


def test_namespaces_table_and_csv(cli: CliFn, gateway_db: Path) -> None:
    table = cli("kv", "namespaces")
    assert table.exit_code == 0
    # Piped, the table is the header and the rows; the totals line only when asked.
    assert "memory:" in table.stdout and "total" not in table.stdout
    assert not table.stdout.startswith(" ")
    totals = cli("kv", "namespaces", "--totals").stdout.splitlines()
    assert totals[-1].split()[0] == "total" and totals[:-1] == table.stdout.splitlines()
    csv_out = cli("kv", "namespaces", "-f", "csv").stdout.splitlines()
    assert csv_out[0] == "namespace,known,description,keys,bytes"
    assert len(csv_out) == 1 + len(
        {r["namespace"] for r in cli("kv", "namespaces", "-f", "json").json()}
    )


def test_namespaces_empty_store(cli: CliFn, store: StoreHandle) -> None:
    result = cli(*store.args, "kv", "namespaces")
    assert result.exit_code == 0
    assert "the store is empty" in result.stderr
    assert cli(*store.args, "kv", "namespaces", "-f", "jsonl").stdout == ""


# -- list / get -------------------------------------------------------------------


def test_list_prefix_exact(cli: CliFn, store: StoreHandle) -> None:
    store.seed({"a_b": "1", "aXb": "22", "A_b": "3", "a_c": "4", "é:1": "5"})
    result = cli(*store.args, "kv", "list", "a_", "-f", "json")
    assert result.json() == [
        {"key": "a_b", "namespace": "", "bytes": 1},
        {"key": "a_c", "namespace": "", "bytes": 1},
    ]
    assert cli(*store.args, "kv", "list", "-k").stdout.splitlines() == [
        "A_b",
        "aXb",
        "a_b",
        "a_c",
        "é:1",
    ]
    assert cli(*store.args, "kv", "list", "-k", "-l", "2").stdout == "A_b\naXb\n"
    assert cli(*store.args, "kv", "list", "-k", "-f", "json", "é").json() == ["é:1"]
    assert cli(*store.args, "kv", "list", "-k", "-f", "jsonl", "a_").stdout == '"a_b"\n"a_c"\n'


def test_list_namespace(cli: CliFn, gateway_db: Path) -> None:
    keys = cli("kv", "list", "--namespace", "conv", "-k").stdout.splitlines()
    assert keys == [f"conv:{SESSION_ID}:000000000000", f"conv:{SESSION_ID}:000000000001"]
    bad = cli("kv", "list", "--namespace", "nosuch")
    assert bad.exit_code == 2 and "unknown namespace" in bad.stderr
    both = cli("kv", "list", "conv:", "--namespace", "conv")
    assert both.exit_code == 2


def test_get_raw_and_pretty(cli: CliFn, store: StoreHandle) -> None:
    value = '{"b":1,"a":"日本"}'
    store.seed({"k": value, "bare": "CONFIDENTIAL"})
    assert cli(*store.args, "kv", "get", "k", "--raw").stdout == value
    assert cli(*store.args, "kv", "get", "k").stdout == value  # not a TTY: exact
    assert cli(*store.args, "kv", "get", "bare").stdout == "CONFIDENTIAL"
    assert cli(*store.args, "kv", "get", "k", "-f", "json").json() == {"key": "k", "value": value}
    missing = cli(*store.args, "kv", "get", "nope")
    assert missing.exit_code == 3 and missing.stdout == ""


def test_pretty_json_on_a_tty(
    cli: CliFn, gateway_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.cli import output

    monkeypatch.setattr(output.Output, "stdout_is_tty", property(lambda self: True))
    result = cli("kv", "get", f"sessions:{SESSION_ID}")
    assert result.stdout.startswith('{\n  "id": ')


# -- set ----------------------------------------------------------------------------


def test_set_from_argument_file_and_stdin(cli: CliFn, store: StoreHandle, tmp_path: Path) -> None:
    assert cli(*store.args, "kv", "set", "a", '{"x":1}').exit_code == 0
    file = tmp_path / "v.json"
    file.write_text('{"y": 2}\n')
    assert cli(*store.args, "kv", "set", "b", "--file", str(file)).exit_code == 0
    assert cli(*store.args, "kv", "set", "c", input='["z"]\n').exit_code == 0
    assert cli(*store.args, "kv", "set", "d", "-", input="[1]").exit_code == 0
    rows = store.contents()
    assert without_audit(rows) == {"a": '{"x":1}', "b": '{"y": 2}', "c": '["z"]', "d": "[1]"}
    assert [r["action"] for r in audit_records(rows)] == ["kv_set"] * 4


def test_set_refuses_invalid_json_unless_raw(cli: CliFn, store: StoreHandle) -> None:
    result = cli(*store.args, "kv", "set", "k", "not json")
    assert result.exit_code == 8
    assert "not valid JSON" in result.stderr and "--raw" in result.stderr
    assert store.contents() == {}
    assert cli(*store.args, "kv", "set", "k", "not json", "--raw").exit_code == 0
    assert without_audit(store.contents()) == {"k": "not json"}


def test_set_reports_json(cli: CliFn, store: StoreHandle) -> None:
    cli(*store.args, "kv", "set", "k", "1")
    result = cli(*store.args, "kv", "set", "k", "22", "-f", "json")
    assert result.json() == {"key": "k", "bytes": 2, "replaced": True}


def test_audit_record_shape(cli: CliFn, store: StoreHandle) -> None:
    cli(*store.args, "kv", "set", "sessions:x", "{}")
    rows = store.contents()
    [(key, value)] = [(k, v) for k, v in rows.items() if k.startswith("audit:")]
    assert key.endswith(":admin_kv_set")
    record = json.loads(value)
    assert record["action"] == "kv_set" and record["target"] == "sessions:x"
    assert record["counts"] == {"set": 1}
    assert record["user"] and record["tool"].startswith("triggerfish-admin ")
    assert key == f"audit:{record['timestamp']}:admin_kv_set"
    assert value == json.dumps(record, separators=(",", ":"), ensure_ascii=False)


# -- delete --------------------------------------------------------------------------


def test_delete_one_key_needs_yes_off_a_tty(cli: CliFn, store: StoreHandle) -> None:
    store.seed({"a": "1", "b": "2"})
    refused = cli(*store.args, "kv", "delete", "a")
    assert refused.exit_code == 4 and "--yes" in refused.stderr
    assert store.contents() == {"a": "1", "b": "2"}
    dry = cli(*store.args, "kv", "delete", "a", "--dry-run", "-f", "json")
    assert dry.json()["deleted"] == 0 and store.contents() == {"a": "1", "b": "2"}
    assert cli(*store.args, "kv", "delete", "a", "--yes").exit_code == 0
    rows = store.contents()
    assert without_audit(rows) == {"b": "2"}
    assert audit_records(rows)[0]["action"] == "kv_delete"
    assert cli(*store.args, "kv", "delete", "a", "--yes").exit_code == 3


def test_delete_prefix_touches_nothing_else(cli: CliFn, gateway_db: Path) -> None:
    before = dump_tables(gateway_db)
    dry = cli("kv", "delete", "--prefix", "conv:", "--dry-run", "-f", "json")
    assert dry.exit_code == 0
    assert dry.json()["matched"] == 2 and dry.json()["deleted"] == 0
    assert dump_tables(gateway_db) == before
    refused = cli("kv", "delete", "--prefix", "conv:")
    assert refused.exit_code == 4
    assert dump_tables(gateway_db) == before
    done = cli("kv", "delete", "--prefix", "conv:", "--yes", "-f", "json")
    assert done.json()["deleted"] == 2
    after = dump_tables(gateway_db)
    expected = {k: v for k, v in GATEWAY_ROWS.items() if not k.startswith("conv:")}
    assert without_audit(dict(after["kv"])) == expected  # type: ignore[arg-type]
    assert after["memory_meta"] == before["memory_meta"]
    [record] = audit_records(dict(after["kv"]))  # type: ignore[arg-type]
    assert record["counts"] == {"planned": 2, "deleted": 2} and record["target"] == "conv:"


def test_delete_prefix_rests_between_transactions(
    cli: CliFn, gateway_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway has no busy timeout: a prefix delete leaves it room between its batches."""
    import itertools
    import time

    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    seed_rows = {f"bulk:{n:05d}": "x" for n in range(2500)}
    with SqliteStorage(gateway_db) as provider:
        provider.set_many(seed_rows.items())
    commits: list[tuple[float, int]] = []
    real = SqliteStorage.transaction

    def spy(self: SqliteStorage, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        import contextlib

        @contextlib.contextmanager
        def wrapped():  # type: ignore[no-untyped-def]
            with real(self, *args, **kwargs) as conn:  # type: ignore[arg-type]
                yield conn
            commits.append((time.monotonic(), len(commits)))

        return wrapped()

    monkeypatch.setattr(SqliteStorage, "transaction", spy)
    result = cli("kv", "delete", "--prefix", "bulk:", "--yes", "--pause", "0.05", "-f", "json")
    assert result.exit_code == 0 and result.json()["deleted"] == 2500
    deletes = [at for at, _ in commits][:3]  # 1000 + 1000 + 500 keys, then the audit record
    assert len(commits) >= 3
    assert all(b - a >= 0.05 for a, b in itertools.pairwise(deletes))
    with SqliteStorage(gateway_db) as provider:
        assert provider.count("bulk:") == 0 and provider.count("conv:") == 2


def test_delete_prefix_is_literal(cli: CliFn, store: StoreHandle) -> None:
    store.seed({"a_1": "x", "ab1": "x", "A_1": "x"})
    cli(*store.args, "kv", "delete", "--prefix", "a_", "--yes")
    assert without_audit(store.contents()) == {"ab1": "x", "A_1": "x"}


def test_delete_refuses_empty_prefix_and_bad_usage(cli: CliFn, store: StoreHandle) -> None:
    store.seed({"a": "1"})
    result = cli(*store.args, "kv", "delete", "--prefix", "", "--yes")
    assert result.exit_code == 4 and "kv clear" in result.stderr
    assert cli(*store.args, "kv", "delete", "--yes").exit_code == 2
    assert cli(*store.args, "kv", "delete", "a", "--prefix", "a", "--yes").exit_code == 2
    assert store.contents() == {"a": "1"}


def test_delete_confirmation_on_a_tty(
    cli: CliFn, store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.cli import output

    store.seed({"a": "1"})
    monkeypatch.setattr(output.Output, "stdin_is_tty", property(lambda self: True))
    no = cli(*store.args, "kv", "delete", "a", input="n\n")
    assert no.exit_code == 4 and store.contents() == {"a": "1"}
    yes = cli(*store.args, "kv", "delete", "a", input="y\n")
    assert yes.exit_code == 0 and without_audit(store.contents()) == {}


# -- clear -----------------------------------------------------------------------------


def test_clear_needs_yes(cli: CliFn, store: StoreHandle) -> None:
    store.seed({"a": "1", "b": "2"})
    assert cli(*store.args, "kv", "clear").exit_code == 4
    dry = cli(*store.args, "kv", "clear", "--dry-run", "-f", "json")
    assert dry.json()["matched"] == 2
    assert store.contents() == {"a": "1", "b": "2"}
    assert cli(*store.args, "kv", "clear", "--yes").exit_code == 0
    rows = store.contents()
    assert without_audit(rows) == {}
    assert audit_records(rows)[0]["counts"] == {"deleted": 2}


def test_clear_on_a_tty_asks_for_the_store_name(
    cli: CliFn, store: StoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.cli import output

    store.seed({"a": "1"})
    monkeypatch.setattr(output.Output, "stdin_is_tty", property(lambda self: True))
    wrong = cli(*store.args, "kv", "clear", "--yes", input="yes\n")
    assert wrong.exit_code == 4 and store.contents() == {"a": "1"}
    provider = store.open()
    name = provider.describe()  # type: ignore[attr-defined]
    provider.close()  # type: ignore[attr-defined]
    right = cli(*store.args, "kv", "clear", "--yes", input=f"{name}\n")
    assert right.exit_code == 0, right.stderr
    assert without_audit(store.contents()) == {}


# -- export / import ---------------------------------------------------------------------


def test_export_import_round_trip(cli: CliFn, gateway_db: Path, tmp_path: Path) -> None:
    exported = cli("kv", "export")
    lines = exported.stdout.splitlines()
    assert len(lines) == len(GATEWAY_ROWS)
    assert all(set(json.loads(line)) == {"key", "value"} for line in lines)
    assert dict((d["key"], d["value"]) for d in map(json.loads, lines)) == GATEWAY_ROWS
    assert "Hva er været" in exported.stdout  # non-ASCII unescaped
    target = tmp_path / "copy.db"  # import never creates a store: made here first
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    SqliteStorage(target, create=True).close()
    # memory: records are never written through kv (see test_memory_cli: no write-down)
    rest = "".join(line + "\n" for line in lines if not line.startswith('{"key":"memory:'))
    result = cli("--db", str(target), "kv", "import", "-", "-f", "json", input=rest)
    assert result.exit_code == 0, result.stderr
    expected = {k: v for k, v in GATEWAY_ROWS.items() if not k.startswith("memory:")}
    assert result.json()["new"] == len(expected)
    copied = dict(SqliteStorage(target).scan())
    assert without_audit(copied) == expected


def test_export_prefix_and_output_file(cli: CliFn, gateway_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "conv.jsonl"
    assert cli("kv", "export", "conv:", "-o", str(out)).exit_code == 0
    assert [json.loads(line)["key"] for line in out.read_text().splitlines()] == [
        f"conv:{SESSION_ID}:000000000000",
        f"conv:{SESSION_ID}:000000000001",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["conv.jsonl"]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"key": "k"}', 'string "key" and a string "value"'),
        ('{"key": 1, "value": "v"}', 'string "key"'),
        ('["k", "v"]', 'string "key"'),
        ('{"key": {"$bytes": "AA=="}, "value": "v"}', 'string "key"'),
    ],
)
def test_import_is_all_or_nothing(
    cli: CliFn, store: StoreHandle, bad_line: str, message: str
) -> None:
    store.seed({"existing": "1"})
    text = '{"key":"a","value":"1"}\n{"key":"existing","value":"2"}\n' + bad_line + "\n"
    result = cli(*store.args, "kv", "import", "-", input=text)
    assert result.exit_code == 8
    assert "line 3" in result.stderr and message in result.stderr
    assert store.contents() == {"existing": "1"}


def test_import_counts_and_dry_run(cli: CliFn, store: StoreHandle, tmp_path: Path) -> None:
    store.seed({"same": "1", "changed": "1"})
    file = tmp_path / "in.jsonl"
    file.write_text(
        '{"key":"same","value":"1"}\n\n{"key":"changed","value":"2"}\n{"key":"new","value":"3"}\n'
    )
    dry = cli(*store.args, "kv", "import", str(file), "--dry-run", "-f", "json")
    assert dry.json() == {
        "lines": 3,
        "new": 1,
        "replaced": 1,
        "unchanged": 1,
        "memories": 0,
        "written": 0,
        "dry_run": True,
    }
    assert store.contents() == {"same": "1", "changed": "1"}
    done = cli(*store.args, "kv", "import", str(file), "-f", "json")
    assert done.json()["written"] == 2
    assert without_audit(store.contents()) == {"same": "1", "changed": "2", "new": "3"}
    missing = cli(*store.args, "kv", "import", str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 3


ODD_VALUES = {
    "a,b": '{"x": "q\\"uo,te\\nnl"}',  # commas, quotes, a newline: CSV quoting
    "tab\tkey": "line one\nline two",
    "big": "x" * 200_000,  # above the csv module's default field limit (128 KiB)
    "unicode": "Hva er været",
}


@pytest.mark.parametrize("suffix", [".csv", ".json", ".jsonl"])
def test_export_picks_the_format_of_the_file_name_and_import_reads_it_back(
    cli: CliFn, store: StoreHandle, tmp_path: Path, suffix: str
) -> None:
    store.seed(ODD_VALUES)
    file = tmp_path / f"dump{suffix}"
    assert cli(*store.args, "kv", "export", "-o", str(file)).exit_code == 0
    head = file.read_text()[:12]
    assert head.startswith({".csv": "key,value", ".json": "[", ".jsonl": '{"key"'}[suffix])
    store.seed({key: "old" for key in ODD_VALUES})
    done = cli(*store.args, "kv", "import", str(file), "-f", "json")
    assert done.exit_code == 0, done.stderr
    assert done.json()["replaced"] == len(ODD_VALUES)
    assert {k: v for k, v in store.contents().items() if k in ODD_VALUES} == ODD_VALUES


def test_import_of_a_large_csv_field_gives_the_csv_limit_back(
    cli: CliFn, store: StoreHandle
) -> None:
    """The field limit is process-wide: raised only while an import reads."""
    before = csv.field_size_limit()
    done = cli(*store.args, "kv", "import", "-", input=f"key,value\nbig,{'y' * 200_000}\n")
    assert done.exit_code == 0, done.stderr
    assert csv.field_size_limit() == before
    assert store.contents()["big"] == "y" * 200_000


def test_import_reads_tsv_and_a_csv_with_a_byte_order_mark(cli: CliFn, store: StoreHandle) -> None:
    tsv = 'key\tvalue\nt1\t"one"\nt2\ttwo, with a comma\n'
    assert cli(*store.args, "kv", "import", "-", input=tsv).exit_code == 0
    csv_text = "\ufeffkey,value\nc1,1\n"
    assert cli(*store.args, "kv", "import", "-", input=csv_text).exit_code == 0
    assert without_audit(store.contents()) == {"t1": "one", "t2": "two, with a comma", "c1": "1"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("key,value\nk1,1\nk2,2,3\n", "row 2: not valid CSV"),
        ("name,value\nk1,1\n", "row 1: expected the columns key and value"),
        (
            '[{"key": "k1", "value": "1"}, ["k2", "2"]]',
            'item 2: expected an object with a string "key"',
        ),
        ('[{"key": "k1", "value": "1"}', "not valid JSON"),
        # a memory key without a level is RESTRICTED's: above the default taint
        ("key,value\nmemory:PUBLIC:x,1\n", "above the taint PUBLIC: memory:PUBLIC:x"),
    ],
)
def test_a_bad_csv_or_json_import_imports_nothing_and_names_the_row(
    cli: CliFn, store: StoreHandle, text: str, message: str
) -> None:
    store.seed({"k1": "old"})
    result = cli(*store.args, "kv", "import", "-", input=text)
    assert result.exit_code in (4, 8), result.stderr
    assert message in result.stderr
    assert store.contents() == {"k1": "old"}


def test_import_format_is_told_by_the_first_line() -> None:
    from triggerfish_cli.kv.transfer import import_format

    assert import_format(b'  \n{"key": "a", "value": "b"}\n') == "jsonl"
    assert import_format(b"[\n  {}\n]") == "json"
    assert import_format(b"\xef\xbb\xbfkey,value\n") == "csv"
    assert import_format(b'key\tvalue\nk\t{"a": 1, "b": 2}\n') == "tsv"
    assert import_format(b"") == "jsonl"


def test_import_format_waits_for_the_first_line_of_a_slow_pipe() -> None:
    """A pipe hands over what it has: the header line may come in pieces."""
    import io

    from triggerfish_cli.kv.transfer import read_import

    class Trickle(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self.data = data

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
            chunk, self.data = self.data[:3], self.data[3:]
            buffer[: len(chunk)] = chunk
            return len(chunk)

    tsv = b"\n\nkey\tvalue\nk1\tone, two\n"
    assert read_import(io.BufferedReader(Trickle(tsv)), "stdin") == ("tsv", {"k1": "one, two"})
    jsonl = b'{"key": "k1", "value": "1"}\n{"key": "k2", "value": "2"}\n'
    found = read_import(io.BufferedReader(Trickle(jsonl)), "stdin")
    assert found == ("jsonl", {"k1": "1", "k2": "2"})


def test_deleting_memory_records_takes_their_search_index_rows(
    cli: CliFn, gateway_db: Path
) -> None:
    """The gateway searches memory_fts/memory_meta: a raw delete must not leave them behind."""
    import sqlite3

    key = "memory:main-session:CONFIDENTIAL:user-name"
    before = dump_tables(gateway_db)
    assert cli("kv", "delete", key, "--yes").exit_code == 0
    after = dump_tables(gateway_db)
    gone = ("main-session", "CONFIDENTIAL", "user-name")

    assert [row for row in after["memory_meta"] if tuple(row[:3]) == gone] == []
    assert len(after["memory_meta"]) == len(before["memory_meta"]) - 1
    with sqlite3.connect(gateway_db) as conn:
        assert conn.execute(
            "SELECT count(*) FROM memory_fts WHERE agent_id = ? AND classification = ? AND key = ?",
            gone,
        ).fetchone() == (0,)
        left_fts = conn.execute("SELECT count(*) FROM memory_fts").fetchone()[0]
    assert without_audit(dict(after["kv"])) == {  # type: ignore[arg-type]
        k: v for k, v in GATEWAY_ROWS.items() if k != key
    }

    # a prefix delete of every memory: kv, memory_meta and memory_fts emptied of them, only them
    result = cli("kv", "delete", "--prefix", "memory:", "--yes", "-f", "json")
    assert result.exit_code == 0 and result.json()["deleted"] == result.json()["matched"]
    final = dump_tables(gateway_db)
    assert final["memory_meta"] == []
    with sqlite3.connect(gateway_db) as conn:
        assert conn.execute("SELECT count(*) FROM memory_fts").fetchone() == (0,)
    assert left_fts > 0
    assert without_audit(dict(final["kv"])) == {  # type: ignore[arg-type]
        k: v for k, v in GATEWAY_ROWS.items() if not k.startswith("memory:")
    }


def test_delete_prefix_rests_as_the_write_gate_does_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite the gate rests after each freeze (2.5 times the pause it caused): the
    prefix delete adds nothing of its own by default; where there is no gate it rests
    LIVE_PAUSE, and --pause always wins."""
    from triggerfish_cli.kv import keys
    from triggerfish_cli.storage.in_memory import MemoryStorage
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    asked: list[float] = []
    for kind in (SqliteStorage, MemoryStorage):
        real = kind.delete_many

        def spy(self: Any, items: Any, *, real: Any = real, **options: Any) -> int:
            asked.append(options["pause"])
            return int(real(self, items, **options))

        monkeypatch.setattr(kind, "delete_many", spy)
    sqlite = SqliteStorage(tmp_path / "p.db", create=True)
    memory = MemoryStorage()
    for provider in (sqlite, memory):
        provider.set_many([(f"bulk:{n}", "x") for n in range(5)])
        keys.delete_prefix(provider, keys.plan_prefix_delete(provider, "bulk:"))
    sqlite.set_many([(f"bulk:{n}", "x") for n in range(5)])
    keys.delete_prefix(sqlite, keys.plan_prefix_delete(sqlite, "bulk:"), pause=0.2)
    assert asked == [0.0, keys.LIVE_PAUSE, 0.2]
    assert sqlite.count("bulk:") == memory.count("bulk:") == 0
    sqlite.close()
