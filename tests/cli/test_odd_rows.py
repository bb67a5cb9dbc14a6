"""Odd rows (issue 15): kv cells that are not UTF-8 text go through every command intact.

The gateway's table is ``kv (key TEXT PRIMARY KEY, value TEXT NOT NULL)``,
but SQLite keeps whatever it is given: TEXT holding bytes that are not UTF-8,
BLOBs, and (a rowid table's TEXT primary key allows it) a NULL key. Through
the installed console script: every command reads such a store without exit
1, 7 or a traceback; tables show the cells escaped (``key\\xff``, ``x'ff01'``,
``NULL``), JSON as ``{"$bytes": <base64>, "type": "text"|"blob"}`` (a NULL key
as ``null``), warnings on stderr name them; ``kv export`` + ``kv import``, a
logical backup + restore and ``migrate`` carry them byte for byte and type
for type; Postgres, which holds only UTF-8 text, refuses them naming the key
(exit 8); memory commands skip an odd memory row, naming it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.gateway import KV_SQL
from tests.helpers.services import Postgres

SCRIPT = Path(sys.executable).parent / "triggerfish-admin"

#: Rows as SQL literals: (key, value).
ODD_ROWS = [
    ("'bad:utf8'", "CAST(x'ff00fe' AS TEXT)"),  # a value that is not UTF-8 (with a NUL)
    ("'blob:value'", "x'00ff'"),  # a BLOB value
    ("x'ff01'", "'\"blob key\"'"),  # a BLOB key
    ("NULL", "'\"null key\"'"),  # a NULL key
    ("CAST(x'6b6579ff' AS TEXT)", "'\"bad key\"'"),  # a key that is not UTF-8
    ("'ctl:' || char(27) || '[31mred'", "'\"control\"'"),  # a control character in the key
    ("''", "'\"empty key\"'"),  # the empty key
    ("'plain'", "'\"x\"'"),
]


def odd_store(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(KV_SQL)
        for key, value in ODD_ROWS:
            conn.execute(f"INSERT INTO kv (key, value) VALUES ({key}, {value})")
        conn.commit()
    return path


def stored(path: Path) -> list[tuple[object, ...]]:
    """Every row exactly: key and value bytes and their SQLite types (not our audit records)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT CAST(key AS BLOB), CAST(value AS BLOB), typeof(key), typeof(value) FROM kv "
            "WHERE key IS NULL OR NOT (typeof(key) = 'text' AND key >= 'audit:' AND key < 'audit;')"
        ).fetchall()
    return sorted(rows, key=repr)


def new_store(path: Path) -> Path:
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    SqliteStorage(path, create=True).close()
    return path


def run(*args: str | bytes, base: Path) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env["TRIGGERFISH_DATA_DIR"] = str(base)
    done = subprocess.run(
        [SCRIPT, *args],
        capture_output=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert b"Traceback" not in done.stderr and b"unexpected" not in done.stderr, done.stderr
    assert done.returncode not in (1, 7), done.stderr
    return done


def ok(*args: str | bytes, base: Path) -> subprocess.CompletedProcess[bytes]:
    done = run(*args, base=base)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return odd_store(tmp_path / "store" / "triggerfish.db")


def test_kv_list_shows_odd_cells_escaped_and_as_json(db: Path, tmp_path: Path) -> None:
    table = ok("--db", str(db), "kv", "list", base=tmp_path).stdout.decode()
    keys = [line.split()[0] for line in table.splitlines()[1:] if line.split()]
    assert {"NULL", "key\\xff", "x'ff01'", "ctl:\\x1b[31mred", "bad:utf8", "plain"} <= set(keys)
    assert "\x1b" not in table
    listed = json.loads(ok("--db", str(db), "kv", "list", "-f", "json", base=tmp_path).stdout)
    by_key = {json.dumps(row["key"]): row["bytes"] for row in listed}
    assert by_key["null"] == len('"null key"')
    assert by_key[json.dumps({"$bytes": base64.b64encode(b"key\xff").decode(), "type": "text"})]
    assert by_key[json.dumps({"$bytes": "/wE=", "type": "blob"})] == len('"blob key"')
    assert by_key['"bad:utf8"'] == 3 and by_key['"blob:value"'] == 2
    assert len(listed) == len(ODD_ROWS)
    keys_only = ok("--db", str(db), "kv", "list", "-k", base=tmp_path).stdout.decode()
    assert "key\\xff" in keys_only and "x'ff01'" in keys_only and "\x1b" not in keys_only


def test_kv_get_gives_the_stored_bytes(db: Path, tmp_path: Path) -> None:
    assert ok("--db", str(db), "kv", "get", "bad:utf8", base=tmp_path).stdout == b"\xff\x00\xfe"
    assert ok("--db", str(db), "kv", "get", "blob:value", "--raw", base=tmp_path).stdout == (
        b"\x00\xff"
    )
    document = json.loads(
        ok("--db", str(db), "kv", "get", "blob:value", "-f", "json", base=tmp_path).stdout
    )
    assert document == {"key": "blob:value", "value": {"$bytes": "AP8=", "type": "blob"}}
    # A key that is not UTF-8, named by its bytes on the command line.
    assert ok("--db", str(db), "kv", "get", b"key\xff", base=tmp_path).stdout == b'"bad key"'


def test_namespaces_and_status_count_every_row(db: Path, tmp_path: Path) -> None:
    report = json.loads(ok("--db", str(db), "kv", "namespaces", "-f", "json", base=tmp_path).stdout)
    assert sum(row["keys"] for row in report) == len(ODD_ROWS)
    groups = {json.dumps(row["namespace"]): row["description"] for row in report}
    assert groups["null"] == "NULL keys (not text)"
    assert groups[json.dumps({"$bytes": "", "type": "blob"})] == "BLOB keys (not text)"
    table = ok("--db", str(db), "kv", "namespaces", base=tmp_path).stdout.decode()
    assert "NULL " in table and "BLOB " in table
    status = json.loads(ok("--db", str(db), "status", "-f", "json", base=tmp_path).stdout)
    assert status["keys"] == len(ODD_ROWS)


def test_kv_export_and_import_round_trip_byte_for_byte(db: Path, tmp_path: Path) -> None:
    before = stored(db)
    export = tmp_path / "export.jsonl"
    done = ok("--db", str(db), "kv", "export", "-o", str(export), base=tmp_path)
    warnings = done.stderr.decode()
    assert "warning: key 'bad:utf8' has a value that is text that is not UTF-8" in warnings
    assert "warning: key 'blob:value' has a value that is a BLOB" in warnings
    assert "warning: key x'ff01' is a BLOB" in warnings
    assert "warning: key 'key\\xff' is text that is not UTF-8" in warnings
    assert "warning: key NULL: exported as null" in warnings
    lines = [json.loads(line) for line in export.read_text(encoding="utf-8").splitlines()]
    assert {"key": "bad:utf8", "value": {"$bytes": "/wD+", "type": "text"}} in lines
    assert {"key": None, "value": '"null key"'} in lines
    assert {"key": "", "value": '"empty key"'} in lines
    target = new_store(tmp_path / "copy.db")
    ok("--db", str(target), "kv", "import", str(export), base=tmp_path)
    assert stored(target) == before
    again = ok("--db", str(target), "kv", "import", str(export), "-f", "json", base=tmp_path)
    assert json.loads(again.stdout)["unchanged"] == len(ODD_ROWS)
    assert stored(target) == before
    assert stored(db) == before


@pytest.mark.parametrize(
    "line",
    [
        '{"key":"a","value":{"$bytes":"not base64!","type":"text"}}',
        '{"key":"a","value":{"$bytes":"AA==","type":"integer"}}',
        '{"key":"a","value":null}',
    ],
)
def test_a_bad_bytes_form_in_an_import_is_exit_8_naming_the_line(tmp_path: Path, line: str) -> None:
    target = new_store(tmp_path / "t.db")
    source = tmp_path / "in.jsonl"
    source.write_text('{"key":"ok","value":"1"}\n' + line + "\n", encoding="utf-8")
    done = run("--db", str(target), "kv", "import", str(source), base=tmp_path)
    assert done.returncode == 8, done.stderr
    assert b"line 2" in done.stderr and done.stderr.count(b"\n") == 1


def test_a_logical_backup_round_trips_byte_for_byte(db: Path, tmp_path: Path) -> None:
    before = stored(db)
    backups = tmp_path / "backups"
    made = ok(
        "--db",
        str(db),
        "backup",
        "create",
        "--logical",
        "--to",
        str(backups),
        "-f",
        "json",
        base=tmp_path,
    )
    document = json.loads(made.stdout)
    assert document["manifest"]["keys"] == len(ODD_ROWS)
    assert any("key x'ff01' is a BLOB: backed up as base64" in w for w in document["warnings"])
    assert b"warning: key 'bad:utf8' has a value that is text that is not UTF-8" in made.stderr
    archive = backups / document["name"]
    ok("backup", "verify", str(archive), base=tmp_path)
    restored = tmp_path / "restored.db"
    ok("backup", "restore", str(archive), "--to", str(restored), "--yes", base=tmp_path)
    assert stored(restored) == before


def test_a_physical_backup_counts_and_restores_every_row(db: Path, tmp_path: Path) -> None:
    before = stored(db)
    backups = tmp_path / "backups"
    made = ok(
        "--db", str(db), "backup", "create", "--to", str(backups), "-f", "json", base=tmp_path
    )
    document = json.loads(made.stdout)
    assert document["manifest"]["keys"] == len(ODD_ROWS)
    ok("backup", "verify", str(backups / document["name"]), base=tmp_path)
    restored = tmp_path / "restored.db"
    ok(
        "backup",
        "restore",
        str(backups / document["name"]),
        "--to",
        str(restored),
        "--yes",
        base=tmp_path,
    )
    assert stored(restored) == before


def test_migrate_sqlite_to_sqlite_byte_for_byte(db: Path, tmp_path: Path) -> None:
    before = stored(db)
    target = tmp_path / "migrated.db"
    ok("migrate", "--from", str(db), "--to", str(target), base=tmp_path)
    assert stored(target) == before
    back = tmp_path / "back.db"
    ok("migrate", "--from", str(target), "--to", str(back), base=tmp_path)
    assert stored(back) == before


def test_postgres_refuses_odd_rows_naming_the_key(
    db: Path, tmp_path: Path, postgres: Postgres
) -> None:
    schema = postgres.new_schema()
    try:
        done = run(
            "migrate", "--from", str(db), "--to", f"{postgres.dsn}?schema={schema}", base=tmp_path
        )
        assert done.returncode == 8, done.stderr
        line = done.stderr.decode()
        assert line.count("\n") == 1 and "which this backend cannot hold" in line
        assert "key NULL" in line or "key x'ff01'" in line or "key 'bad:utf8'" in line
        # Without them the same store goes to Postgres and back byte for byte.
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute(
                "DELETE FROM kv WHERE key IS NULL OR typeof(key) != 'text' "
                "OR typeof(value) != 'text' OR key IN ('bad:utf8', CAST(x'6b6579ff' AS TEXT))"
            )
            conn.commit()
        other = postgres.new_schema()
        try:
            ok(
                "migrate",
                "--from",
                str(db),
                "--to",
                f"{postgres.dsn}?schema={other}",
                base=tmp_path,
            )
            back = tmp_path / "back.db"
            ok(
                "migrate",
                "--from",
                f"{postgres.dsn}?schema={other}",
                "--to",
                str(back),
                base=tmp_path,
            )
            assert stored(back) == stored(db)
        finally:
            postgres.drop_schema(other)
    finally:
        postgres.drop_schema(schema)


def test_memory_commands_skip_an_odd_memory_row_naming_it(db: Path, tmp_path: Path) -> None:
    record = json.dumps(
        {
            "key": "k",
            "agentId": "main-session",
            "classification": "PUBLIC",
            "content": "hello world",
            "tags": [],
            "createdAt": "2026-03-02T10:15:30.123Z",
            "updatedAt": "2026-03-02T10:15:30.123Z",
            "expired": False,
        }
    )
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "INSERT INTO kv VALUES (CAST(? AS TEXT), ?)",
            (b"memory:main-session:PUBLIC:k\xff", record),
        )
        conn.execute("INSERT INTO kv VALUES (?, ?)", ("memory:main-session:PUBLIC:blob", b"\x00"))
        conn.execute("INSERT INTO kv VALUES (?, ?)", ("memory:main-session:PUBLIC:k", record))
        # a value in the record's shape whose text is not UTF-8 (the JSON parsers' edge)
        odd_text = record.replace('"k"', '"odd"').encode().replace(b"world", b"w\xffrld")
        conn.execute(
            "INSERT INTO kv VALUES (?, CAST(? AS TEXT))",
            ("memory:main-session:PUBLIC:odd", odd_text),
        )
        conn.commit()
    listed = ok("--db", str(db), "memory", "list", base=tmp_path)
    assert b"hello world" in listed.stdout
    assert b"skipped memory:main-session:PUBLIC:k\\xff: key is not UTF-8 text" in listed.stderr
    assert b"skipped memory:main-session:PUBLIC:blob: value is not UTF-8 text" in listed.stderr
    assert b"skipped memory:main-session:PUBLIC:odd: value is not UTF-8 text" in listed.stderr
    ok("--db", str(db), "memory", "reindex", base=tmp_path)
    assert b"hello" in ok("--db", str(db), "memory", "search", "hello", base=tmp_path).stdout
    ok("--db", str(db), "memory", "stats", base=tmp_path)


def test_retention_keeps_odd_values_as_of_unknown_age(db: Path, tmp_path: Path) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "INSERT INTO kv VALUES ('conv:s:000000000000', CAST(x'7bff7d' AS TEXT)), "
            "('conv:s:000000000001', x'7b7d')"
        )
        conn.commit()
    before = stored(db)
    ok("--db", str(db), "retention", "plan", base=tmp_path)
    swept = ok("--db", str(db), "retention", "sweep", "--yes", "-f", "json", base=tmp_path)
    assert b"conv:" in swept.stdout
    assert stored(db) == before


def test_the_sqlite_backend_pages_through_odd_keys_and_writes_them_back(db: Path) -> None:
    from triggerfish_cli import cells
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    store = SqliteStorage(db)
    try:
        everything = list(store.scan(batch_size=1000))
        assert len(everything) == len(ODD_ROWS)
        assert everything[0] == (cells.NULL_CELL, '"null key"')  # SQLite's order: NULL first
        assert everything[-1] == (cells.from_bytes(b"\xff\x01", "blob"), '"blob key"')
        assert [key for key, _ in everything] == sorted(
            (key for key, _ in everything), key=cells.sort_key
        )
        assert list(store.scan(batch_size=1)) == everything  # paging past NULL, odd and BLOB keys
        assert list(store.scan_keys(batch_size=1)) == [key for key, _ in everything]
        assert sorted(store.snapshot_scan(batch_size=1)) == sorted(everything)
        assert store.count() == len(ODD_ROWS)
        odd_key = cells.from_bytes(b"key\xff")
        assert list(store.scan(odd_key)) == [(odd_key, '"bad key"')]  # a prefix of bytes
        assert store.get_many([odd_key, "plain", cells.NULL_CELL]) == {
            odd_key: '"bad key"',
            "plain": '"x"',
            cells.NULL_CELL: '"null key"',
        }
        assert store.delete_many([odd_key, cells.from_bytes(b"\xff\x01", "blob")]) == 2
        store.set_many([(odd_key, cells.from_bytes(b"\x00", "blob"))])
        assert store.get(odd_key) == cells.from_bytes(b"\x00", "blob")
    finally:
        store.close()
    rows = stored(db)
    assert (b"key\xff", b"\x00", "text", "blob") in rows
    assert not any(row[0] == b"\xff\x01" for row in rows)
