"""Shared helpers for the benchmarks: a cached realistic store, timing, reporting.

Benchmarks are run by hand (never in CI) and print ratios against the
physical limit named in their issue, measured side by side in the same run.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("TFBENCH_DATA", ROOT / "bench" / "data"))
ANCHOR = datetime(2026, 11, 1, tzinfo=timezone.utc)
sys.path.insert(0, str(ROOT))


def store(
    records: int = 1_000_000,
    *,
    seed: int = 1,
    days: int = 400,
    name: str | None = None,
    **options: int,
) -> Path:
    """A demo store of ``records`` keys, built once and cached under bench/data/.

    Cached per generator version (``demo.GENERATOR``): after the generator
    changes, the next run builds its stores anew.

    ``options`` go to ``build_demo`` (e.g. ``memories=``, ``memory_words=``);
    give such a store its own ``name``.
    """
    from triggerfish_cli.demo import GENERATOR, build_demo
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    DATA.mkdir(parents=True, exist_ok=True)
    # The generator's version is in the name: a store another one built is never reused.
    stem = (name or f"store-{records}-{seed}-{days}.db").removesuffix(".db")
    path = DATA / f"{stem}-g{GENERATOR}.db"
    if path.exists():
        return path
    temp = path.with_suffix(".building")
    for leftover in temp.parent.glob(temp.name + "*"):
        leftover.unlink()
    started = time.perf_counter()
    provider = SqliteStorage(temp, create=True)
    build_demo(provider, records=records, seed=seed, now=ANCHOR, days=days, **options)
    provider.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    provider.close()
    temp.rename(path)
    size = path.stat().st_size / 2**20
    print(
        f"# built {path.name}: {records} keys, {size:.0f} MiB in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    return path


def scratch_copy(path: Path, name: str) -> Path:
    """A private copy of a cached store, for benchmarks that modify it."""
    target = DATA / name
    for suffix in ("", "-wal", "-shm"):
        Path(str(target) + suffix).unlink(missing_ok=True)
    shutil.copyfile(path, target)
    return target


#: Forks and execs the command after the file name, waits for it and writes its own peak RSS
#: (KiB) to the file named first; exits with the command's status.
_PEAK_WRAPPER = """
import os, sys
out, command = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execv(command[0], command)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_rss_command(command: list[str], out: Path) -> list[str]:
    """``command`` wrapped so that its own peak RSS lands in ``out`` (see :func:`peak_rss_mib`).

    A child started from this process by vfork or posix_spawn (what subprocess
    does) reports this process's own high-water RSS as its peak when this
    process is the bigger: Linux carries the old address space's peak across
    exec. A small wrapper that forks the job gives it a clean start.
    """
    return [sys.executable, "-I", "-c", _PEAK_WRAPPER, str(out), *command]


def peak_rss_mib(out: Path) -> float:
    """The peak RSS a :func:`peak_rss_command` wrote, in MiB (its file removed)."""
    try:
        return int(out.read_text()) / 1024
    finally:
        out.unlink(missing_ok=True)


def timed(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> list[float]:
    """Wall times in seconds of ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def interleaved(
    fns: dict[str, Callable[[], object]], repeat: int = 5, warmup: int = 1, seed: int = 7
) -> dict[str, list[float]]:
    """Wall times of each of ``fns``, run in rounds, in a random order in each round.

    A job and its limit measured this way see the same state of the machine
    (page cache, memory, other load): each run of ours sits beside a run of
    the limit, never after a block of other work (BENCH-NOTES.md).
    """
    import random

    order = list(fns)
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in order}
    for round_ in range(warmup + repeat):
        rng.shuffle(order)
        for name in order:
            started = time.perf_counter()
            fns[name]()
            if round_ >= warmup:
                times[name].append(time.perf_counter() - started)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def report(
    name: str,
    ours: list[float],
    limit: list[float],
    target: float,
    *,
    lower_is_better: bool = True,
    unit: str = "s",
) -> bool:
    """Print medians and the ratio ours/limit against the target; True when met."""
    ratio = median(ours) / median(limit)
    ok = ratio <= target if lower_is_better else ratio >= target
    paired = len(ours) == len(limit)
    spread = sorted(a / b for a, b in zip(ours, limit, strict=True)) if paired else []
    between = f"  (runs {spread[0]:.2f}-{spread[-1]:.2f}x)" if len(spread) > 1 else ""
    print(
        f"{name:<48} ours {median(ours):8.3f}{unit}  limit {median(limit):8.3f}{unit}  "
        f"ratio {ratio:5.2f}x  target {'<=' if lower_is_better else '>='} {target}x  "
        f"{'OK' if ok else 'MISSED'}{between}"
    )
    return ok
