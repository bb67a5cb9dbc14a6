"""Metrics of the jobs cron runs, in the Prometheus text format (node_exporter's textfile).

A job (``retention sweep``, ``backup create``/``verify``/``prune``, ``memory
reindex``, ``config snapshot``) given ``--metrics-file PATH`` (or the
``metrics: path:`` setting) records its run there: when it ran, whether and
when it last succeeded, how long it took, its exit code, and what it did.
Series carry the labels ``job`` and ``store``, so one file can hold every job
of every store; a run replaces its own series and keeps the others. A failed
run updates ``last_run`` and ``exit_code`` and keeps ``last_success``.

The file is written whole to a temporary name in the same directory, synced
and renamed over the old one (``fileio.atomic_writer``): the textfile
collector (which reads ``*.prom`` only) never sees half a file, and a run
killed at any moment leaves the old file as it was. A symbolic link someone
else could have planted at the file's name is replaced, never written through
(``fileio.atomic_writer``). Runs that finish at the same moment take turns (an
flock on ``<file>.lock``; a job whose lock is a symbolic link is refused, exit 4,
before it starts). The text comes from the ``prometheus_client`` library.

``metrics:`` in triggerfish.yaml::

    metrics:
      path: /var/lib/prometheus/node-exporter/triggerfish.prom
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli.errors import InvalidDataError, TriggerfishError
from triggerfish_cli.fileio import (
    atomic_writer,
    follows,
    open_lock_file,
    pid_alive,
    refuse_link,
)

PREFIX = "triggerfish_admin_"
JOBS = (
    "retention_sweep",
    "backup_create",
    "backup_verify",
    "backup_prune",
    "memory_reindex",
    "config_snapshot",
)

#: name -> help text. Every series also has the labels ``job`` and ``store``.
FAMILIES: dict[str, str] = {
    "last_run_timestamp_seconds": "When the job last ended (unix time), whatever its outcome.",
    "last_success_timestamp_seconds": "When the job last ended with exit code 0 (unix time).",
    "last_duration_seconds": "How long the job's last run took.",
    "last_exit_code": "The exit code of the job's last run (0 ok; see the README's table).",
    "records": "Records the last run acted on, by kind (deleted, trimmed, unknown_age, ...).",
    "bytes_freed": "Value bytes the last run deleted or trimmed away.",
    "backup_size_bytes": "Size of the archive the last run wrote.",
    "backup_keys": "Keys in the archive the last run wrote.",
    "backup_compression_ratio": "Store bytes per archive byte of the last run's archive.",
    "backups_verified": "Backups the last run verified, by result (ok, failed).",
    "backups": "Backups the last prune kept and deleted, by state.",
    "config_version": "The newest stored version of triggerfish.yaml after the last run.",
    "gateway_paused_seconds": "Seconds the write gate kept the gateway paused during the run.",
    "gateway_paused_ratio": "Share of the run's wall time the gateway was paused.",
    "gate_freezes": "Write transactions that paused the gateway during the run.",
    "gateway_exposed_seconds": (
        "--live-writers ignore: seconds we held the write lock while the gateway had the "
        "store open unpaused (its writes fail in that window; their number is not visible "
        "from here)."
    ),
}


def check_section(section: Any, config_path: Path) -> None:
    """Validator of ``metrics:`` for ``settings.OUR_SECTIONS``."""
    metrics_path(section, config_path)


def metrics_path(section: Any, config_path: Path) -> Path | None:
    """The ``metrics: path:`` setting (relative to the config file's directory)."""
    if section is None:
        return None
    if not isinstance(section, Mapping):
        raise InvalidDataError(f"{config_path}: metrics: must be a mapping")
    unknown = sorted(str(key) for key in section if key != "path")
    if unknown:
        raise InvalidDataError(
            f"{config_path}: metrics.{unknown[0]}: unknown setting (known: path)"
        )
    raw = section.get("path")
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidDataError(f"{config_path}: metrics.path: must be a file path, not {raw!r}")
    path = Path(raw).expanduser()
    return path if path.is_absolute() else config_path.parent / path


@dataclass
class JobRun:
    """One run of a job: what it did, filled in as it goes."""

    job: str
    store: str = "unknown"
    started: float = field(default_factory=time.time)
    #: (family, extra labels) -> value
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    def set(self, family: str, value: float, **labels: str) -> None:
        if family not in FAMILIES:
            raise KeyError(family)
        self.values[(family, tuple(sorted(labels.items())))] = float(value)

    def gate(self, stats: Mapping[str, Any] | None, seconds: float) -> None:
        """What the write gate did, from ``provider.gate_stats()``."""
        if not stats:
            return
        paused = float(stats.get("frozen_seconds", 0.0))
        self.set("gate_freezes", float(stats.get("freezes", 0)))
        self.set("gateway_paused_seconds", paused)
        self.set("gateway_paused_ratio", min(paused / seconds, 1.0) if seconds > 0 else 0.0)
        exposed = stats.get("exposed_seconds")
        if exposed:
            self.set("gateway_exposed_seconds", float(exposed))


def record(path: Path, run: JobRun, exit_code: int, ended: float | None = None) -> None:
    """Merge ``run`` into the metrics file at ``path`` (see the module docstring)."""
    ended = time.time() if ended is None else ended
    path = path.expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _turn(path):
            old = _read(path) if follows(path) is not None else []  # a planted link: unread
            mine = {"job": run.job, "store": run.store}
            samples = [sample for sample in old if _key(sample.labels) != (run.job, run.store)]
            previous_success = next(
                (
                    sample.value
                    for sample in old
                    if _key(sample.labels) == (run.job, run.store)
                    and sample.name == PREFIX + "last_success_timestamp_seconds"
                ),
                None,
            )
            fresh: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {
                ("last_run_timestamp_seconds", ()): ended,
                ("last_duration_seconds", ()): max(ended - run.started, 0.0),
                ("last_exit_code", ()): float(exit_code),
            }
            if exit_code == 0:
                fresh[("last_success_timestamp_seconds", ())] = ended
            elif previous_success is not None:
                fresh[("last_success_timestamp_seconds", ())] = previous_success
            fresh.update(run.values)  # a failed run's too: what it did before it stopped
            text = _render(samples, mine, fresh)
            # Not *.prom: the textfile collector never reads a half-written temp file.
            with atomic_writer(path, mode=_file_mode()) as handle:
                handle.write(text)
            _remove_stale_temps(Path(os.path.realpath(path)))
    except OSError as exc:
        raise _unwritable(path, exc) from exc
    except TriggerfishError as exc:  # atomic_writer's write error (exit 9 elsewhere)
        raise _unwritable(path, exc.__cause__ or exc) from exc


def _unwritable(path: Path, exc: BaseException) -> OSError:
    """What the command warns about: a metrics file never fails the job it records."""
    reason = (exc.strerror if isinstance(exc, OSError) else None) or exc
    return OSError(f"{path}: cannot write the metrics file: {reason}")


def _file_mode() -> int:
    """0644 less the umask, whatever mode the file had: the collector must read it."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o644 & ~umask


@dataclass(frozen=True)
class _Sample:
    name: str
    labels: dict[str, str]
    value: float


def _key(labels: Mapping[str, str]) -> tuple[str | None, str | None]:
    return labels.get("job"), labels.get("store")


def _read(path: Path) -> list[_Sample]:
    """The samples of our families in an existing file (anything else is dropped)."""
    # lazy: prometheus_client (~120 ms) only when metrics are read or written
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError):
        return []  # not ours, or damaged: written afresh
    return [
        _Sample(sample.name, dict(sample.labels), float(sample.value))
        for family in families
        if family.name.startswith(PREFIX)
        for sample in family.samples
        if sample.name.startswith(PREFIX) and "job" in sample.labels
    ]


def _render(
    kept: list[_Sample],
    mine: dict[str, str],
    fresh: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> str:
    # lazy: prometheus_client (~120 ms) only when metrics are read or written
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest
    from prometheus_client.metrics_core import GaugeMetricFamily

    by_family: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in FAMILIES}
    for sample in kept:
        family = sample.name.removeprefix(PREFIX)
        if family in by_family:
            by_family[family].append((sample.labels, sample.value))
    for (family, extra), value in fresh.items():
        by_family[family].append(({**mine, **dict(extra)}, value))

    class Collector:
        def collect(self) -> Iterator[GaugeMetricFamily]:
            for family, series in by_family.items():
                if not series:
                    continue
                names = sorted({name for labels, _ in series for name in labels})
                gauge = GaugeMetricFamily(PREFIX + family, FAMILIES[family], labels=names)
                for labels, value in sorted(series, key=lambda item: sorted(item[0].items())):
                    gauge.add_metric([labels.get(name, "") for name in names], value)
                yield gauge

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return generate_latest(registry).decode("utf-8")


def lock_path(path: Path) -> Path:
    """The lock file beside the metrics file (``<file>.lock``)."""
    return path.with_name(path.name + ".lock")


def check_lock(path: Path) -> None:
    """RefusedError (exit 4) when the metrics file's lock is a symbolic link: a job is
    refused before it starts, not after its work is done."""
    refuse_link(lock_path(path.expanduser()), "the metrics file's lock")


@contextlib.contextmanager
def _turn(path: Path) -> Iterator[None]:
    fd = open_lock_file(lock_path(path), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_stale_temps(path: Path) -> None:
    """Temp files of runs killed while writing (their pid is gone): atomic_writer's
    ``.<name>.<pid>.<random>.tmp``."""
    for temp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = temp.name[len(path.name) + 2 : -4].partition(".")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                temp.unlink()
