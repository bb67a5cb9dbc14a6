"""--metrics-file: what cron jobs tell a monitoring system (issue 20)."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import CliFn
from tests.helpers import gateway_writer
from triggerfish_cli.demo import build_demo
from triggerfish_cli.metrics import JobRun, record
from triggerfish_cli.storage.sqlite.backend import SqliteStorage

ANCHOR = datetime(2026, 10, 1, tzinfo=timezone.utc)
ANCHOR_ISO = "2026-10-01T00:00:00.000Z"
P = "triggerfish_admin_"


def samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(name, sorted labels) -> value of every sample in a metrics file."""
    found = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(path: Path, name: str, job: str, **labels: str) -> float | None:
    for (sample, sample_labels), number in samples(path).items():
        got = {"job": job, **labels}
        if sample == P + name and all(dict(sample_labels).get(k) == v for k, v in got.items()):
            return number
    return None


@pytest.fixture
def demo(base_dir: Path) -> Path:
    db = base_dir / "data" / "triggerfish.db"
    store = SqliteStorage(db, create=True)
    build_demo(store, records=3000, seed=3, now=ANCHOR, days=120)
    store.close()
    return db


def test_a_sweep_records_what_its_plan_said(cli: CliFn, demo: Path, tmp_path: Path) -> None:
    metrics = tmp_path / "textfile" / "triggerfish.prom"
    plan = cli("retention", "plan", "--as-of", ANCHOR_ISO, "-f", "json").json()
    assert isinstance(plan, list)
    planned = sum(row["delete"] for row in plan)
    before = time.time()
    run = cli("retention", "sweep", "--yes", "--as-of", ANCHOR_ISO, "-q", "--metrics-file",
              str(metrics))
    assert run.exit_code == 0, run.stderr
    job = "retention_sweep"
    assert value(metrics, "records", job, kind="deleted") == planned > 0
    assert value(metrics, "last_exit_code", job) == 0
    last_run = value(metrics, "last_run_timestamp_seconds", job)
    assert last_run is not None and before <= last_run <= time.time()
    assert value(metrics, "last_success_timestamp_seconds", job) == last_run
    assert (value(metrics, "last_duration_seconds", job) or 0) > 0
    (store,) = {dict(labels)["store"] for _, labels in samples(metrics)}
    assert store == f"sqlite:{demo}"
    assert (value(metrics, "bytes_freed", job) or 0) > 0


def test_a_failed_run_updates_the_outcome_and_keeps_the_last_success(
    cli: CliFn, demo: Path, tmp_path: Path
) -> None:
    metrics = tmp_path / "m.prom"
    created = cli("backup", "create", "--to", str(tmp_path / "bk"), "-f", "json",
                  "--metrics-file", str(metrics))
    assert created.exit_code == 0, created.stderr
    archive = tmp_path / "bk" / created.json()["name"]  # type: ignore[index]
    ok = cli("backup", "verify", str(archive), "--metrics-file", str(metrics))
    assert ok.exit_code == 0
    success = value(metrics, "last_success_timestamp_seconds", "backup_verify")
    assert value(metrics, "backups_verified", "backup_verify", result="ok") == 1
    time.sleep(0.05)
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    failed = cli("backup", "verify", str(archive), "--metrics-file", str(metrics))
    assert failed.exit_code == 5
    assert value(metrics, "last_exit_code", "backup_verify") == 5
    assert value(metrics, "last_success_timestamp_seconds", "backup_verify") == success
    assert (value(metrics, "last_run_timestamp_seconds", "backup_verify") or 0) > (success or 0)
    assert value(metrics, "backups_verified", "backup_verify", result="failed") == 1
    # the other job's series are untouched
    assert value(metrics, "last_exit_code", "backup_create") == 0
    assert (value(metrics, "backup_size_bytes", "backup_create") or 0) > 0
    assert (value(metrics, "backup_compression_ratio", "backup_create") or 0) > 1


def test_a_store_that_is_not_there_still_records_the_run(cli: CliFn, tmp_path: Path) -> None:
    metrics = tmp_path / "m.prom"
    run = cli("--db", str(tmp_path / "absent.db"), "memory", "reindex", "--metrics-file",
              str(metrics))
    assert run.exit_code == 7
    assert value(metrics, "last_exit_code", "memory_reindex") == 7
    assert value(metrics, "last_success_timestamp_seconds", "memory_reindex") is None


def test_every_cron_job_records_and_dry_runs_do_not(
    cli: CliFn, demo: Path, base_dir: Path, tmp_path: Path
) -> None:
    metrics = tmp_path / "m.prom"
    (base_dir / "triggerfish.yaml").write_text(
        f"metrics:\n  path: {metrics}\nmodels:\n  primary: claude\n"
    )
    assert cli("retention", "sweep", "--dry-run", "--as-of", ANCHOR_ISO).exit_code == 0
    assert not metrics.exists()
    for args in (
        ("config", "snapshot"),
        ("memory", "reindex", "--taint", "RESTRICTED"),
        ("backup", "create", "--to", str(tmp_path / "bk")),
        ("backup", "create", "--to", str(tmp_path / "bk")),
        ("backup", "prune", "--keep-last", "1", "--from", str(tmp_path / "bk"), "--yes"),
        ("backup", "verify", "--all", "--from", str(tmp_path / "bk")),
    ):
        result = cli(*args)
        assert result.exit_code == 0, (args, result.stderr)
    jobs = {dict(labels)["job"] for _, labels in samples(metrics)}
    assert jobs == {"config_snapshot", "memory_reindex", "backup_create", "backup_prune",
                    "backup_verify"}
    assert value(metrics, "config_version", "config_snapshot") == 1
    assert value(metrics, "backups", "backup_prune", state="deleted") == 1
    assert value(metrics, "backups", "backup_prune", state="kept") == 1
    assert value(metrics, "records", "memory_reindex", kind="in_sync") is not None
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics:\n  file: x.prom\n")
    validated = cli("--config", str(bad), "config", "validate")
    assert validated.exit_code == 8 and "metrics.file" in validated.stderr + validated.stdout


def test_the_gateway_pause_is_recorded(cli: CliFn, demo: Path, tmp_path: Path) -> None:
    metrics = tmp_path / "m.prom"
    with gateway_writer.running(demo, tmp_path):
        run = cli("retention", "sweep", "--yes", "--as-of", ANCHOR_ISO, "-q",
                  "--metrics-file", str(metrics))
    assert run.exit_code == 0, run.stderr
    assert (value(metrics, "gate_freezes", "retention_sweep") or 0) > 0
    paused = value(metrics, "gateway_paused_seconds", "retention_sweep") or 0
    ratio = value(metrics, "gateway_paused_ratio", "retention_sweep") or 0
    assert paused > 0 and 0 < ratio < 0.5


# -- never half a file --------------------------------------------------------------------

WRITER = """
import sys, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from triggerfish_cli.metrics import JobRun, record
path = Path(sys.argv[1])
n = 0
print("ready", flush=True)
while True:
    n += 1
    for store in range(40):
        run = JobRun("retention_sweep", f"sqlite:/stores/{store}.db")
        run.set("records", n, kind="deleted")
        record(path, run, 0)
"""


@pytest.fixture
def writer_of_metrics(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield tmp_path / "m.prom", started
    for process in started:
        process.kill()
        process.wait()


def test_a_killed_run_never_leaves_half_a_file(
    writer_of_metrics: tuple[Path, list[subprocess.Popen[bytes]]],
) -> None:
    """kill -9 at random moments of a process rewriting a 40-store metrics file."""
    path, started = writer_of_metrics
    root = str(Path(__file__).parents[1])
    rng = random.Random(7)
    for _ in range(25):
        process = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), root], stdout=subprocess.PIPE
        )
        started.append(process)
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.01, 0.3))
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        if path.exists():
            found = samples(path)  # parses: never a torn file
            by_store: dict[str, set[str]] = {}
            for name, labels in found:
                by_store.setdefault(dict(labels)["store"], set()).add(name)
            assert 0 < len(by_store) <= 40
            whole = {P + "last_run_timestamp_seconds", P + "last_exit_code", P + "records"}
            assert all(whole <= names for names in by_store.values())  # every series whole
        visible = [p.name for p in path.parent.iterdir() if p.name.endswith(".prom")]
        assert visible in ([], ["m.prom"])  # a collector sees no temp file
    run = JobRun("backup_create", "sqlite:/x.db")
    record(path, run, 0)  # the next write sweeps up the temp files of killed runs
    assert sorted(p.name for p in path.parent.iterdir()) == ["m.prom", "m.prom.lock"]


def test_records_merge_and_replace_per_job_and_store(tmp_path: Path) -> None:
    path = tmp_path / "m.prom"
    for store, deleted in (("a", 3), ("b", 5)):
        run = JobRun("retention_sweep", store)
        run.set("records", deleted, kind="deleted")
        record(path, run, 0, ended=1000.0)
    again = JobRun("retention_sweep", "a")
    again.set("records", 7, kind="deleted")
    record(path, again, 6, ended=2000.0)
    assert value(path, "records", "retention_sweep", store="a", kind="deleted") == 7
    assert value(path, "records", "retention_sweep", store="b", kind="deleted") == 5
    assert value(path, "last_success_timestamp_seconds", "retention_sweep", store="a") == 1000.0
    assert value(path, "last_run_timestamp_seconds", "retention_sweep", store="a") == 2000.0
    assert value(path, "last_exit_code", "retention_sweep", store="a") == 6
    text = path.read_text()
    assert "# HELP triggerfish_admin_last_run_timestamp_seconds" in text
    assert "# TYPE triggerfish_admin_last_exit_code gauge" in text


def test_a_metrics_file_that_cannot_be_written_is_a_warning_not_a_failure(
    cli: CliFn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.prom"
    record(path, JobRun("backup_create", "sqlite:/x.db"), 0, ended=1000.0)
    before = path.read_bytes()
    real_replace = os.replace

    def disk_full(src: Any, dst: Any, **kwargs: Any) -> None:
        if str(dst).endswith(".prom"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match=r"m\.prom: cannot write the metrics file: No space left"):
        record(path, JobRun("backup_create", "sqlite:/x.db"), 1)
    assert path.read_bytes() == before  # the old file as it was, no temp file left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.prom", "m.prom.lock"]
    run = cli("--db", str(tmp_path / "absent.db"), "memory", "reindex", "--metrics-file",
              str(path))  # fmt: skip
    assert run.exit_code == 7  # the job's own exit code, not the metrics file's
    assert "cannot write the metrics file: No space left" in run.stderr
