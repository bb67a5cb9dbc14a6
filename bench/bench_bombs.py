"""Issue #35: `backup verify` of decompression bombs, peak RSS and time.

Builds (in a temp directory, a few MB) the issue's two bombs and runs the
installed `backup verify` on each ``--runs`` times through the fork wrapper of
common.py (the child's own peak RSS), printing medians and spreads, the exit
status, and the most the run held in scratch directories under /dev/shm
(sampled every 10 ms, so a lower bound):

- physical: ~100 KB of zstd whose manifest claims 221 KB (54 pages) and whose
  payload, hashed right, expands to ``--physical-gib`` GiB of zeros (3 in the issue);
- logical: one JSON line of ``--line-mib`` MiB (1536 in the issue).

    python bench/bench_bombs.py [--runs 3] [--physical-gib 3] [--line-mib 1536]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, peak_rss_command, peak_rss_mib

from tests.helpers.bombs import bomb

SCRIPT = str(Path(sys.executable).parent / "triggerfish-admin")
SHM = Path("/dev/shm")


def shm_bytes(wrapper: int) -> int:
    """Bytes in the scratch directories under /dev/shm of the wrapper's child now."""
    try:
        children = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
    except OSError:
        return 0
    total = 0
    for directory in (d for pid in children for d in SHM.glob(f".tfadmin-{pid}-*")):
        for path in directory.rglob("*"):
            with contextlib.suppress(OSError):
                total += path.stat().st_blocks * 512
    return total


def run(archive: Path, env: dict[str, str], work: Path) -> tuple[float, float, int, int]:
    """Seconds, peak RSS (MiB), exit status and the most seen in /dev/shm (bytes)."""
    out = work / "peak"
    seen = [0]
    stop = threading.Event()

    def watch(wrapper: int) -> None:
        while not stop.is_set():
            seen[0] = max(seen[0], shm_bytes(wrapper))
            time.sleep(0.01)

    started = time.perf_counter()
    process = subprocess.Popen(
        peak_rss_command([SCRIPT, "backup", "verify", str(archive)], out),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watcher = threading.Thread(target=watch, args=(process.pid,), daemon=True)
    watcher.start()
    _, stderr = process.communicate()
    seconds = time.perf_counter() - started
    stop.set()
    watcher.join()
    print(f"    exit {process.returncode}: {stderr.strip()[:200]}", file=sys.stderr)
    return seconds, peak_rss_mib(out), process.returncode, seen[0]


def report(name: str, runs: list[tuple[float, float, int, int]]) -> None:
    times = [r[0] for r in runs]
    rss = [r[1] for r in runs]
    codes = sorted({r[2] for r in runs})
    shm = max(r[3] for r in runs)
    print(
        f"{name}: time median {statistics.median(times):.2f} s "
        f"({min(times):.2f}-{max(times):.2f}), peak RSS median {statistics.median(rss):.0f} MiB "
        f"({min(rss):.0f}-{max(rss):.0f}), exit {codes}, /dev/shm seen <= {shm / 2**20:.1f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--physical-gib", type=float, default=3)
    parser.add_argument("--line-mib", type=int, default=1536)
    parser.add_argument("--only", choices=["physical", "logical"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-bombs-") as temp:
        work = Path(temp)
        env = {**os.environ, "TRIGGERFISH_DATA_DIR": str(work / "base"), "HOME": str(work)}
        env.pop("TRIGGERFISH_DB", None)
        cases = []
        if args.only in (None, "physical"):
            physical = work / "physical"
            physical.mkdir()
            size = int(args.physical_gib * (1 << 30))
            cases.append(("physical bomb", bomb(physical, expands_to=size, claim=221184)))
        if args.only in (None, "logical"):
            logical = work / "logical"
            logical.mkdir()
            line = args.line_mib << 20
            cases.append(
                ("logical line", bomb(logical, kind="logical", expands_to=line, claim=line))
            )
        print(f"# {ROOT.name}: {args.runs} runs each", file=sys.stderr)
        for name, archive in cases:
            print(f"  {name}: {archive.stat().st_size} bytes on disk", file=sys.stderr)
            report(name, [run(archive, env, work) for _ in range(args.runs)])


if __name__ == "__main__":
    main()
