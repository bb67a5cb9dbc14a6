"""``--metrics-file``: the jobs cron runs record their outcome for monitoring (metrics.py).

A job command calls :func:`begin` first thing; the error boundary of
``cli/app.py`` calls :func:`finish` with the exit code once the command has
ended, however it ended, so a failed run records its exit code too.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from triggerfish_cli.cli.context import AppState, state
from triggerfish_cli.metrics import JobRun, check_lock, metrics_path, record

MetricsOpt = Annotated[
    Path | None,
    typer.Option(
        "--metrics-file",
        envvar="TRIGGERFISH_METRICS_FILE",
        metavar="PATH",
        help="Record this run in a Prometheus text file (node_exporter's textfile collector): "
        "last run and success, duration, exit code, what it did. Also metrics.path.",
        show_default=False,
    ),
]

#: Runs begun in this process, recorded by :func:`finish`.
_pending: list[tuple[Path, JobRun]] = []


def begin(ctx: typer.Context, job: str, option: Path | None) -> JobRun | None:
    """A run of ``job`` to fill in, when a metrics file is asked for (else None)."""
    st = state(ctx)
    path = option if option is not None else _setting(st)
    if path is None:
        return None
    check_lock(path)
    run = JobRun(job)
    started = time.monotonic()
    # Registered after the store's own closing, so it runs first (last in, first out):
    # the store is still open to describe itself and say what its write gate did.
    ctx.find_root().call_on_close(lambda: _capture(st, run, time.monotonic() - started))
    _pending.append((path, run))
    return run


def finish(code: int) -> None:
    """Record every run begun in this process with the exit code the command ended with."""
    while _pending:
        path, run = _pending.pop()
        try:
            record(path, run, code)
        except OSError as exc:
            # lazy: cli.output adds 14 modules to `config --help`
            from triggerfish_cli.cli.output import Output

            Output().warn(str(exc))


def _capture(st: AppState, run: JobRun, seconds: float) -> None:
    provider = st.opened()
    if provider is not None:
        run.store = provider.describe()
        if not any(family == "gate_freezes" for family, _ in run.values):
            run.gate(provider.gate_stats(), seconds)
        return
    try:
        # lazy: locations is not loaded by `backup --help`, `retention --help`...
        from triggerfish_cli.locations import describe_config

        run.store = describe_config(st.storage_config())
    except Exception:
        run.store = "unknown"


def _setting(st: AppState) -> Path | None:
    settings = st.settings()
    if not settings.text or "metrics" not in settings.text:
        return None
    return metrics_path(settings.section("metrics"), settings.path)


# -- what each job did ------------------------------------------------------------------


def swept(run: JobRun | None, summary: dict[str, Any]) -> None:
    if run is None:
        return
    for kind in ("deleted", "trimmed", "entries_removed", "changed", "guarded", "unknown_age"):
        run.set("records", summary.get(kind, 0), kind=kind)
    run.set("bytes_freed", summary.get("bytes", 0))
    run.gate(summary.get("gate"), float(summary.get("seconds") or 0.0))


def backed_up(run: JobRun | None, document: dict[str, Any]) -> None:
    if run is None:
        return
    manifest = document.get("manifest") or {}
    size = float(manifest.get("payload_bytes") or document.get("bytes") or 0)
    content = float(manifest.get("content_bytes") or 0)
    run.set("backup_size_bytes", size)
    run.set("backup_keys", float(manifest.get("keys") or 0))
    if size:
        run.set("backup_compression_ratio", content / size if content else 1.0)
    verified = document.get("verified")
    if isinstance(verified, dict):
        good = bool(verified.get("ok"))
        keyless = good and verified.get("contents_checked") is False
        run.set("backups_verified", 1 if good and not keyless else 0, result="ok")
        run.set("backups_verified", 0 if good else 1, result="failed")
        if keyless:  # encrypted, checked without the key: not counted as verified
            run.set("backups_verified", 1, result="contents_not_checked")


def verified(run: JobRun | None, results: list[Any]) -> None:
    if run is None:
        return
    good = sum(1 for result in results if result.ok and not result.sealed)
    sealed = sum(1 for result in results if result.ok and result.sealed)
    run.set("backups_verified", good, result="ok")
    run.set("backups_verified", len(results) - good - sealed, result="failed")
    if sealed:  # encrypted, checked without the key: not counted as verified
        run.set("backups_verified", sealed, result="contents_not_checked")


def pruned(run: JobRun | None, deleted: int, kept: int) -> None:
    if run is None:
        return
    run.set("backups", deleted, state="deleted")
    run.set("backups", kept, state="kept")


def reindexed(run: JobRun | None, drift: dict[str, Any]) -> None:
    if run is None:
        return
    for kind in ("fixed", "missing", "stale", "orphaned", "duplicates", "in_sync"):
        run.set("records", float(drift.get(kind) or 0), kind=kind)


def snapshotted(run: JobRun | None, version: int | None, unchanged: bool) -> None:
    if run is None:
        return
    run.set("records", 0 if unchanged else 1, kind="versions_stored")
    if version is not None:
        run.set("config_version", version)
