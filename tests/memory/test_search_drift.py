"""Search is complete on a drifted SQLite store, and writes nothing (issue 36).

The gateway never indexes what cron and trigger runs save, and an edit of kv
alone leaves a stale index row. Those memories are searched from kv, with
the same scores and rules: the results are those of a freshly reindexed copy.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import gateway_writer
from tests.helpers.gateway import gateway_index, memory_record, write_gateway_store
from tests.helpers.memories import CRON, MAIN, mkey
from triggerfish_cli.classification import Level
from triggerfish_cli.memory import records as memory
from triggerfish_cli.memory import upkeep as memory_upkeep
from triggerfish_cli.storage.sqlite.backend import SqliteStorage
from triggerfish_cli.storage.sqlite.fts import Fts5Index

ADMIN = str(Path(sys.executable).parent / "triggerfish-admin")
WORDS = "otter river stone deploy server meeting alice invoice garden".split()
LEVELS = [level.name for level in Level]


def admin(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ADMIN, "--db", str(db), *args], capture_output=True, text=True, timeout=120
    )


def search_keys(db: Path, *args: str) -> list[str]:
    run = admin(db, "memory", "search", *args, "--format", "json")
    assert run.returncode == 0, run.stderr
    return [hit["storage_key"] for hit in json.loads(run.stdout)]


def cron_writes(db: Path, key: str, value: str) -> None:
    """What the gateway's cron run does: storage.set of kv only, no index row."""
    conn = sqlite3.connect(db)
    conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
    conn.commit()
    conn.close()


def small_store(path: Path) -> Path:
    rows = {
        mkey(MAIN, "PUBLIC", "pets"): memory_record("pets", "PUBLIC", "a quiet otter sleeps"),
        mkey(MAIN, "INTERNAL", "plan"): memory_record("plan", "INTERNAL", "deploy the server"),
    }
    return write_gateway_store(path, rows, ((MAIN, "PUBLIC", "pets"), (MAIN, "INTERNAL", "plan")))


# -- through the console script --------------------------------------------------------


def test_a_memory_written_as_cron_does_is_found(tmp_path: Path) -> None:
    db = small_store(tmp_path / "gw.db")
    cron_writes(db, mkey(CRON, "PUBLIC", "digest"), memory_record(
        "digest", "PUBLIC", "morning digest of the otter news", agent=CRON))  # fmt: skip
    assert search_keys(db, "digest", "-a", CRON) == [mkey(CRON, "PUBLIC", "digest")]
    assert search_keys(db, "otter", "-A") == [
        mkey(MAIN, "PUBLIC", "pets"),
        mkey(CRON, "PUBLIC", "digest"),
    ]


def test_a_memory_edited_in_kv_alone_is_found_by_its_new_text(tmp_path: Path) -> None:
    db = small_store(tmp_path / "gw.db")
    skey = mkey(MAIN, "PUBLIC", "pets")
    cron_writes(db, skey, memory_record("pets", "PUBLIC", "a loud parrot talks"))
    assert search_keys(db, "parrot") == [skey]
    assert search_keys(db, "otter") == []  # the stale index row no longer matches kv
    run = admin(db, "memory", "search", "otter")
    assert run.returncode == 0 and "no memories match" in run.stdout + run.stderr


def test_taint_rules_hold_for_drifted_memories(tmp_path: Path) -> None:
    db = small_store(tmp_path / "gw.db")
    hidden = mkey(MAIN, "CONFIDENTIAL", "pets")
    cron_writes(db, hidden, memory_record("pets", "CONFIDENTIAL", "the otter's secret den"))
    cron_writes(db, mkey(MAIN, "RESTRICTED", "vault"), memory_record(
        "vault", "RESTRICTED", "otter vault code"))  # fmt: skip
    # Above the taint: never shown; the PUBLIC version shows as before.
    assert search_keys(db, "otter") == [mkey(MAIN, "PUBLIC", "pets")]
    assert search_keys(db, "secret", "-t", "INTERNAL") == []
    # At CONFIDENTIAL the drifted version shadows the indexed PUBLIC one.
    assert search_keys(db, "otter", "-t", "CONFIDENTIAL") == [hidden]
    assert search_keys(db, "quiet", "-t", "CONFIDENTIAL") == []  # only the shadowed one says it
    assert search_keys(db, "vault", "-t", "RESTRICTED") == [mkey(MAIN, "RESTRICTED", "vault")]
    # A drifted soft delete hides the record (its index row is stale).
    cron_writes(db, mkey(MAIN, "INTERNAL", "plan"), memory_record(
        "plan", "INTERNAL", "deploy the server", expired=True))  # fmt: skip
    assert search_keys(db, "deploy", "-t", "INTERNAL") == []


_STATE = """
import hashlib, os, sys
for suffix in ("", "-wal"):
    path = sys.argv[1] + suffix
    if os.path.exists(path):
        with open(path, "rb") as file:
            print(suffix, hashlib.sha256(file.read()).hexdigest(), os.stat(path).st_mtime_ns)
"""


def _state(db: Path) -> str:
    """Digest and mtime of the store file and its WAL, read in a child process: a close
    of any descriptor on the file would drop this process's SQLite locks (POSIX)."""
    return subprocess.run(
        [sys.executable, "-c", _STATE, str(db)], capture_output=True, text=True, check=True
    ).stdout


def test_search_writes_nothing_to_the_store(tmp_path: Path) -> None:
    db = small_store(tmp_path / "gw.db")
    cron_writes(db, mkey(CRON, "PUBLIC", "digest"), memory_record(
        "digest", "PUBLIC", "morning digest", agent=CRON))  # fmt: skip
    cron_writes(db, mkey(MAIN, "PUBLIC", "pets"), memory_record("pets", "PUBLIC", "a parrot"))
    # Open beside us, as the gateway is (the last connection to close may remove an
    # empty WAL file: any reader's close does that, ours too).
    watcher = sqlite3.connect(db)
    assert watcher.execute("SELECT count(*) FROM kv").fetchone()[0] > 0
    version = watcher.execute("PRAGMA data_version").fetchone()
    before = _state(db)
    assert "-wal " in before  # the gateway's writes sit in the WAL, compared too
    assert search_keys(db, "digest", "-A") == [mkey(CRON, "PUBLIC", "digest")]
    assert search_keys(db, "parrot") == [mkey(MAIN, "PUBLIC", "pets")]
    assert watcher.execute("PRAGMA data_version").fetchone() == version  # no commit by anyone
    assert _state(db) == before
    watcher.close()


def test_search_beside_a_writer_without_busy_timeout_costs_it_no_write(tmp_path: Path) -> None:
    db = small_store(tmp_path / "gw.db")
    for n in range(300):  # enough drift that each search fills its private index
        cron_writes(db, mkey(CRON, "PUBLIC", f"d{n}"), memory_record(
            f"d{n}", "PUBLIC", f"otter digest number {n}", agent=CRON))  # fmt: skip
    work = tmp_path / "writer"
    work.mkdir()
    with gateway_writer.running(db, work, period=0.002):
        for _ in range(5):
            assert len(search_keys(db, "otter", "-A", "--limit", "50")) == 50
    report = gateway_writer.report(work)
    assert report.ok > 0
    assert report.fail == 0, report.errors


# -- the same results as a freshly reindexed copy ----------------------------------------


def _drifted_store(path: Path, seed: int, marked: bool = False) -> Path:
    """Memories of two agents at every level (tie-rich texts, shadowing, tags), a random
    part indexed (all of it by our reindex, which marks them, with ``marked``), then
    edits, soft deletes and deletes of kv alone."""
    rng = random.Random(seed)
    rows: dict[str, str] = {}
    for _ in range(160):
        agent = rng.choice([MAIN, MAIN, CRON])
        level = rng.choice(LEVELS)
        key = f"k{rng.randrange(60)}"  # shared keys: versions at several levels
        text = " ".join(rng.choices(WORDS, k=rng.randrange(1, 9)))
        tags = rng.sample(["work", "home", "otter"], rng.randrange(0, 3))
        rows[mkey(agent, level, key)] = memory_record(key, level, text, agent=agent, tags=tags)
    indexed = tuple(tuple(skey.split(":", 3)[1:]) for skey in rows if rng.random() < 0.7)
    write_gateway_store(path, rows, indexed)  # type: ignore[arg-type]
    if marked:
        provider = SqliteStorage(path)
        memory_upkeep.reindex(provider, taint=Level.RESTRICTED)
        provider.close()
    conn = sqlite3.connect(path)
    for skey in rng.sample(sorted(rows), 40):
        _, agent, level, key = skey.split(":", 3)
        change = rng.randrange(4)
        if change == 3:
            conn.execute("DELETE FROM kv WHERE key = ?", (skey,))
            continue
        text = " ".join(rng.choices(WORDS, k=rng.randrange(1, 9)))
        value = memory_record(key, level, text, agent=agent, expired=change == 2)
        conn.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (skey, value))
        if change == 1 and rng.random() < 0.3:
            gateway_index(conn, value)  # some edits the gateway did index
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("marked", [False, True], ids=["unmarked", "marked"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_results_are_those_of_a_freshly_reindexed_copy(
    tmp_path: Path, seed: int, marked: bool
) -> None:
    drifted = _drifted_store(tmp_path / "drifted.db", seed, marked)
    fresh = tmp_path / "fresh.db"
    shutil.copyfile(drifted, fresh)
    ours, theirs = SqliteStorage(drifted), SqliteStorage(fresh)
    memory_upkeep.reindex(theirs, taint=Level.RESTRICTED)
    assert memory_upkeep.reindex(theirs, taint=Level.RESTRICTED, dry_run=True).to_fix == 0
    assert memory_upkeep.reindex(ours, taint=Level.RESTRICTED, dry_run=True).to_fix > 0
    compared = 0
    for taint in Level:
        for text, raw, tag in [
            ("otter", False, None), ("river stone", False, None), ("deploy", False, "work"),
            ("server", False, None), ("k1", False, None), ("otter OR garden", True, None),
        ]:  # fmt: skip
            for agent in (MAIN, None):
                for limit in (3, 200):
                    options = {"taint": taint, "agent": agent, "raw": raw, "tag": tag}
                    got = memory.search(ours, text, limit=limit, **options)  # type: ignore[arg-type]
                    want = memory.search(theirs, text, limit=limit, **options)  # type: ignore[arg-type]
                    assert [h.as_dict() for h in got.hits] == [h.as_dict() for h in want.hits]
                    compared += len(want.hits)
    assert compared > 500
    ours.close()
    theirs.close()


def test_an_unindexed_store_of_many_memories_is_searched_in_batches(tmp_path: Path) -> None:
    """More drifted memories than one batch: all of them are searched."""
    rows = {
        mkey(CRON, "PUBLIC", f"d{n:04}"): memory_record(
            f"d{n:04}", "PUBLIC", "otter" if n % 997 == 0 else "river", agent=CRON)
        for n in range(2500)
    }  # fmt: skip
    db = write_gateway_store(tmp_path / "gw.db", rows, ())
    provider = SqliteStorage(db)
    result = memory.search(provider, "otter", taint=Level.PUBLIC, agent=CRON, limit=10)
    assert [h.record.key for h in result.hits] == ["d0000", "d0997", "d1994"]
    assert result.drifted == 2500
    provider.close()
    assert os.path.getsize(db) > 0


# -- marks: which memories the index held in step (fts_marks.py) ------------------------


def marks(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT key, kv_rowid FROM tfadmin_memory_marks"))
    finally:
        conn.close()


def rowids(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT key, rowid FROM kv WHERE key LIKE 'memory:%'"))
    finally:
        conn.close()


def test_reindex_marks_the_memories_in_step_and_our_writes_keep_them(tmp_path: Path) -> None:
    db = small_store(tmp_path / "gw.db")
    cron_writes(db, mkey(CRON, "PUBLIC", "digest"), memory_record(
        "digest", "PUBLIC", "morning digest", agent=CRON))  # fmt: skip
    gone = mkey(CRON, "PUBLIC", "gone")  # soft-deleted: searched nowhere, so marked too
    cron_writes(db, gone, memory_record("gone", "PUBLIC", "old heron", agent=CRON, expired=True))
    assert admin(db, "memory", "reindex", "-t", "RESTRICTED").returncode == 0
    assert marks(db) == rowids(db)  # every memory, each at its row as it is
    assert search_keys(db, "heron", "-A") == []
    pets = mkey(MAIN, "PUBLIC", "pets")
    cron_writes(db, pets, memory_record("pets", "PUBLIC", "a loud parrot talks"))
    assert marks(db)[pets] != rowids(db)[pets]  # the gateway's write left it unmarked
    assert search_keys(db, "parrot") == [pets]
    assert search_keys(db, "otter") == []
    saved = admin(db, "memory", "save", "notes", "a heron fishing", "-a", MAIN)
    assert saved.returncode == 0, saved.stderr
    notes = mkey(MAIN, "PUBLIC", "notes")
    assert marks(db)[notes] == rowids(db)[notes]  # our write keeps its mark in step
    assert search_keys(db, "heron", "-A") == [notes]
    forgot = admin(db, "memory", "delete", "notes", "-a", MAIN, "--yes")
    assert forgot.returncode == 0, forgot.stderr
    assert marks(db)[notes] == rowids(db)[notes]  # soft-deleted by us: marked at its new row
    assert search_keys(db, "heron", "-A") == []
    deleted = admin(db, "kv", "delete", mkey(CRON, "PUBLIC", "digest"), "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert mkey(CRON, "PUBLIC", "digest") not in marks(db)


def test_a_rowid_that_comes_back_after_our_delete_is_not_trusted(tmp_path: Path) -> None:
    """SQLite gives a new row the highest rowid + 1: after the newest row is deleted, the
    next write takes its rowid again. Our delete drops the mark, so the memory written
    again under that rowid is searched by its new text."""
    db = small_store(tmp_path / "gw.db")
    newest = mkey(CRON, "PUBLIC", "digest")
    first = memory_record("digest", "PUBLIC", "morning digest", agent=CRON)
    cron_writes(db, newest, first)
    provider = SqliteStorage(db)
    memory_upkeep.reindex(provider, taint=Level.RESTRICTED)
    conn = sqlite3.connect(db)
    before = rowids(db)[newest]
    conn.execute("DELETE FROM kv WHERE rowid > ?", (before,))  # our audit rows: it is the newest
    conn.commit()
    index = Fts5Index(provider.connection, provider)
    assert index.hard_delete([(newest, first)]) == 1
    cron_writes(db, newest, memory_record("digest", "PUBLIC", "evening kingfisher", agent=CRON))
    assert rowids(db)[newest] == before  # the same rowid, with another text
    result = memory.search(provider, "kingfisher", taint=Level.PUBLIC, agent=CRON, limit=5)
    assert [hit.record.storage_key for hit in result.hits] == [newest]
    conn.close()
    provider.close()
