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
5. `kv list`: time from start to its first row on stdout. Target: <= 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
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
    lines: int


def run(db: Path, args: list[str], header: bool) -> Run:
    command = [sys.executable, "-m", "triggerfish_cli", "--db", str(db), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRIGGERFISH_FORMAT", None)
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    lines, first = 0, 0.0
    wanted = 2 if header else 1  # the first row ends the second line of a table
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
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(args)}: exit {code}")
    return Run(seconds, first, usage.ru_maxrss / 1024, lines)


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    args = parser.parse_args()
    db = store(args.records)
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
                f"{result.first_row:6.3f} s  rss {result.rss_mb:7.1f} MB  {result.lines} lines",
                file=sys.stderr,
            )

    def med(name: str, what: str) -> float:
        return median([getattr(r, what) for r in results[name]])

    print(f"{'command':<24} {'time':>9} {'first row':>10} {'peak RSS':>10} {'lines':>9}")
    for name in jobs:
        print(
            f"{name:<24} {med(name, 'seconds'):8.2f}s {med(name, 'first_row'):9.3f}s "
            f"{med(name, 'rss_mb'):8.1f}MB {results[name][0].lines:>9}"
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
        ("kv list peak RSS", med("kv list", "rss_mb"), 120.0, " MB"),
        (
            "plan --list RSS / plan RSS",
            med("plan --list", "rss_mb") / med("plan", "rss_mb"),
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
