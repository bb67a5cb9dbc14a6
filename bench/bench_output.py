"""Issue #16: tables that start at once and stay small, against the same rows as JSON Lines.

    python bench/bench_output.py [--records 1000000] [--repeat 3]

Each command runs as a whole process with stdout on a pipe that this script
reads and throws away (as `> /dev/null` through `cat` would), its peak RSS
taken from os.wait4 (the child's own). Table and JSON Lines runs of the same
command alternate, in a random order per round.

1. `kv list` as a table against `kv list -f jsonl`. Target: <= 1.5x.
2. `retention plan --list` as a table against `-f jsonl`. Target: <= 1.5x.
3. Peak RSS of `kv list` (table). Target: <= 120 MB.
4. Peak RSS of `retention plan --list` (table) against `retention plan`
   without --list (the plan itself is in memory; rendering must add little).
   Target: <= 1.2x.

Peak RSS from wait4 counts the store's pages that SQLite's memory map
(storage/sqlite/files.py, PRAGMA mmap_size) touched: a full scan of a 700 MiB
store maps about that much, whatever the output. So the anonymous memory
(RssAnon, sampled every 10 ms from /proc) is printed beside it, and the
memory targets are checked on both.
5. `kv list`: time from start to its first row on stdout. Target: <= 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ANCHOR, ROOT, median, store


@dataclass
class Run:
    seconds: float
    first_row: float  # seconds from start to the first row on stdout
    rss_mb: float
    anon_mb: float  # peak anonymous memory, sampled from /proc while it runs
    lines: int


def run(db: Path, args: list[str], header: bool) -> Run:
    command = [sys.executable, "-m", "triggerfish_cli", "--db", str(db), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRIGGERFISH_FORMAT", None)
    # posix_spawn (vfork-like) shares no pages with a child, but Linux carries this
    # process's own peak RSS across the exec into the child's wait4 peak: main() checks
    # that this process stays far below the peaks measured (common.peak_rss_command's
    # wrapper would add its own start-up to the time to the first row).
    read_end, write_end = os.pipe()
    devnull = os.open(os.devnull, os.O_WRONLY)
    started = time.perf_counter()
    pid = os.posix_spawn(
        command[0],
        command,
        env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, write_end, 1),
            (os.POSIX_SPAWN_DUP2, devnull, 2),
            (os.POSIX_SPAWN_CLOSE, read_end),
        ],
    )
    os.close(write_end)
    os.close(devnull)
    fd = read_end
    lines, first = 0, 0.0
    wanted = 2 if header else 1  # the first row ends the second line of a table
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], _anon_mb(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        if not first:
            lines += chunk.count(b"\n")
            if lines >= wanted:
                first = time.perf_counter() - started
        else:
            lines += chunk.count(b"\n")
    done.set()
    sampler.join()
    anon = peak[0]
    os.close(read_end)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(args)}: exit {code}")
    return Run(seconds, first, usage.ru_maxrss / 1024, anon, lines)


def _anon_mb(pid: int) -> float:
    """The process's anonymous resident memory now (not the store's mapped file pages)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    args = parser.parse_args()
    db = store(args.records)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if own > 60:
        raise SystemExit(
            f"this process peaked at {own:.0f} MiB (it built the store): its children's wait4 "
            "peaks cannot be lower; run again, the store is cached now"
        )
    as_of = ANCHOR.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    jobs = {
        "kv list": (["kv", "list"], True),
        "kv list -f jsonl": (["kv", "list", "-f", "jsonl"], False),
        "plan --list": (["retention", "plan", "--list", "--as-of", as_of], True),
        "plan --list -f jsonl": (
            ["retention", "plan", "--list", "--as-of", as_of, "-f", "jsonl"],
            False,
        ),
        "plan": (["retention", "plan", "--as-of", as_of], True),
    }
    rng = random.Random(args.seed)
    results: dict[str, list[Run]] = {name: [] for name in jobs}
    print(f"# {args.records} keys ({db.name}), {args.repeat} rounds, order seed {args.seed}")
    for round_ in range(args.repeat):
        order = list(jobs)
        rng.shuffle(order)
        for name in order:
            command, header = jobs[name]
            result = run(db, command, header)
            results[name].append(result)
            print(
                f"# round {round_ + 1}: {name:<22} {result.seconds:7.2f} s  first row "
                f"{result.first_row:6.3f} s  rss {result.rss_mb:7.1f} MB  anon "
                f"{result.anon_mb:6.1f} MB  {result.lines} lines",
                file=sys.stderr,
            )

    def med(name: str, what: str) -> float:
        return median([getattr(r, what) for r in results[name]])

    print(
        f"{'command':<24} {'time':>9} {'first row':>10} {'peak RSS':>10} {'anon':>9} {'lines':>9}"
    )
    for name in jobs:
        print(
            f"{name:<24} {med(name, 'seconds'):8.2f}s {med(name, 'first_row'):9.3f}s "
            f"{med(name, 'rss_mb'):8.1f}MB {med(name, 'anon_mb'):7.1f}MB "
            f"{results[name][0].lines:>9}"
        )
    checks = [
        (
            "kv list table / jsonl",
            med("kv list", "seconds") / med("kv list -f jsonl", "seconds"),
            1.5,
            "x",
        ),
        (
            "plan --list table / jsonl",
            med("plan --list", "seconds") / med("plan --list -f jsonl", "seconds"),
            1.5,
            "x",
        ),
        ("kv list peak RSS (wait4)", med("kv list", "rss_mb"), 120.0, " MB"),
        ("kv list peak anonymous", med("kv list", "anon_mb"), 120.0, " MB"),
        (
            "plan --list RSS / plan RSS",
            med("plan --list", "rss_mb") / med("plan", "rss_mb"),
            1.2,
            "x",
        ),
        (
            "plan --list anon / plan anon",
            med("plan --list", "anon_mb") / max(med("plan", "anon_mb"), 0.1),
            1.2,
            "x",
        ),
        ("kv list first row", med("kv list", "first_row"), 0.5, " s"),
    ]
    for label, value, target, unit in checks:
        print(
            f"{label:<32} {value:8.2f}{unit:<3}  target <= {target}{unit}  "
            f"{verdict(value <= target)}"
        )


if __name__ == "__main__":
    main()
