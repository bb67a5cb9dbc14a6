"""Shell completion read from the store: `kv get <TAB>` completes keys by prefix (at
most 100, one bounded range read), `retention sweep --namespace <TAB>` the namespaces
the store holds (never file names). Through the installed console script's completion
protocol (``_TRIGGERFISH_ADMIN_COMPLETE=complete_bash``, ``COMP_WORDS``, ``COMP_CWORD``)
and through a real interactive bash pressing TAB, where keys hold ``:``."""

from __future__ import annotations

import io
import itertools
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pexpect

from tests.helpers.gateway import GATEWAY_ROWS, write_gateway_store
from tests.helpers.script import SCRIPT, run_script
from triggerfish_cli.kv import keys
from triggerfish_cli.namespaces import NAMESPACES
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

ROOT = Path(__file__).resolve().parents[2]


def complete(*words: str, db: Path) -> list[str]:
    """The candidates for the last of ``words`` (``""``: a TAB after a space)."""
    line = ["triggerfish-admin", "--db", str(db), *words]
    run = run_script(
        env={
            "_TRIGGERFISH_ADMIN_COMPLETE": "complete_bash",
            "COMP_WORDS": " ".join(line),
            "COMP_CWORD": str(len(line) - 1),
        }
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    return run.stdout.split()


def add_keys(db: Path, rows: Iterator[tuple[str, str]]) -> None:
    with sqlite3.connect(db) as conn:
        conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?)", rows)
    conn.close()


def test_kv_get_completes_the_stores_keys_by_prefix(gateway_db: Path) -> None:
    assert complete("kv", "get", "lineage", db=gateway_db) == sorted(
        key for key in GATEWAY_ROWS if key.startswith("lineage")
    )
    assert complete("kv", "get", "session-id:", db=gateway_db) == ["session-id:telegram"]
    assert complete("kv", "delete", "main-s", db=gateway_db) == ["main-session-id"]
    # memory keys: PUBLIC only (naming others needs an audit record; completion writes none)
    assert complete("kv", "get", "memory:main-session:", db=gateway_db) == [
        "memory:main-session:PUBLIC:old-fact",
        "memory:main-session:PUBLIC:user-name",
    ]


def test_kv_get_offers_at_most_100_keys(gateway_db: Path) -> None:
    add_keys(gateway_db, ((f"todos:bulk-{n:05d}", "{}") for n in range(3000)))
    offered = complete("kv", "get", "todos:b", db=gateway_db)
    assert offered == [f"todos:bulk-{n:05d}" for n in range(100)]


def test_a_store_that_cannot_be_opened_completes_no_key_and_says_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere" / "triggerfish.db"
    assert complete("kv", "get", "s", db=missing) == []
    assert not (tmp_path / "nowhere").exists()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    assert complete("kv", "get", "", db=garbage) == []


def test_retention_namespace_completes_the_namespaces_the_store_holds(
    gateway_db: Path, tmp_path: Path
) -> None:
    (gateway_db.parent / "lineage-file.txt").write_text("a file, not a namespace")
    held = [ns.name for ns in NAMESPACES if any(k.startswith(ns.prefix) for k in GATEWAY_ROWS)]
    for command in ("sweep", "plan"):
        assert complete("retention", command, "--namespace", "", db=gateway_db) == held
    assert complete("retention", "sweep", "-N", "lineage", db=gateway_db) == [
        "lineage",
        "lineage-session",
        "lineage-hash",
    ]
    # no store: every namespace the option takes, still no file names
    nowhere = tmp_path / "none.db"
    every = [ns.name for ns in NAMESPACES if ns.name.startswith("lineage")]
    assert complete("retention", "sweep", "--namespace", "lineage", db=nowhere) == every


class CountingStore(SqliteStorage):
    """Counts the keys the completion pulls from the store."""

    pulled = 0

    def scan_keys(self, *args: object, **kwargs: object) -> Iterator[str]:  # type: ignore[override]
        for key in super().scan_keys(*args, **kwargs):  # type: ignore[arg-type]
            CountingStore.pulled += 1
            yield key


def test_completion_reads_one_bounded_range_never_the_whole_store(tmp_path: Path) -> None:
    db = write_gateway_store(tmp_path / "big.db")
    hidden = (f"memory:a:CONFIDENTIAL:k{n:06d}" for n in range(20_000))
    add_keys(db, zip(hidden, itertools.repeat("{}")))
    store = CountingStore(db)
    try:
        assert keys.completion_keys(store, "memory:a:") == []  # none visible in the bound
        assert CountingStore.pulled <= keys.COMPLETION_SCANNED
    finally:
        store.close()


def test_a_real_bash_completes_a_key_holding_colons_on_tab(gateway_db: Path) -> None:
    """bash splits words at ':'; the shim keeps them whole: TAB, Enter, the value."""
    env = {
        **os.environ,
        "PATH": f"{SCRIPT.parent}{os.pathsep}{os.environ['PATH']}",
        "PS1": "$ ",
        "TERM": "dumb",
        "TRIGGERFISH_DB": str(gateway_db),
    }
    bash = pexpect.spawn(
        "bash", ["--norc", "--noprofile", "-i"], env=env, encoding="utf-8", timeout=120
    )
    try:
        bash.expect_exact("$ ")
        bash.sendline(f"source {ROOT / 'completions' / 'triggerfish-admin.bash'}")
        bash.expect_exact("$ ")
        bash.logfile_read = io.StringIO()
        bash.send("triggerfish-admin kv get pairing:telegram:4\t")
        bash.expect_exact("482913 ")
        bash.sendline("--raw; echo")
        bash.expect_exact("$ ")
        assert isinstance(bash.logfile_read, io.StringIO)
        assert GATEWAY_ROWS["pairing:telegram:482913"] in bash.logfile_read.getvalue()
    finally:
        bash.sendline("exit")
        bash.expect(pexpect.EOF)
        bash.close()
