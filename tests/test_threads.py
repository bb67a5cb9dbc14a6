"""Threads of ours never take Ctrl-C or a kill: the main thread alone does."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from triggerfish_cli import threads
from triggerfish_cli.backup.streams import ZstdFrames

PACKAGE = Path(__file__).parents[1] / "triggerfish_cli"


def _blocked(native_id: int) -> set[int]:
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    mask = int(re.search(r"^SigBlk:\s*([0-9a-f]+)", status, re.M).group(1), 16)  # type: ignore[union-attr]
    return {number for number in range(1, 64) if mask >> (number - 1) & 1}


def test_every_kind_of_thread_we_start_blocks_the_held_signals() -> None:
    held = {int(s) for s in threads.HELD_SIGNALS}
    seen: list[set[int]] = []

    def look() -> None:
        seen.append(_blocked(threading.get_native_id()))

    threads.background(look).join()
    threads.Worker(look).result()
    list(threads.prefetched(iter([look]), depth=1))  # the producer thread itself
    with ZstdFrames(1, 2) as frames:
        frames._pool.submit(look).result()  # type: ignore[union-attr]
    look_in_producer: list[set[int]] = []

    def items() -> object:
        look_in_producer.append(_blocked(threading.get_native_id()))
        yield 1

    list(threads.prefetched(items()))  # type: ignore[arg-type]
    assert len(seen) == 3 and look_in_producer
    for mask in [*seen, *look_in_producer]:
        assert held <= mask
    assert not held & _blocked(threading.get_native_id())  # the main thread takes them


def test_no_module_starts_a_thread_that_could_take_a_signal() -> None:
    """Every thread goes through threads.background (or a pool with block_signals)."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if path.name != "threads.py" and "threading.Thread(" in text:
            offenders.append(str(path))
        for match in re.finditer(r"ThreadPoolExecutor\((?:[^()]|\([^()]*\))*\)", text):
            if "initializer=block_signals" not in match.group(0):
                offenders.append(f"{path}: {match.group(0)}")
    assert offenders == []


def test_the_cli_starts_with_ctrl_c_unblocked_whatever_its_parent_blocked() -> None:
    """A blocked signal mask is inherited across exec: a parent that spawns us while
    holding Ctrl-C back would leave it blocked for our whole run. main() unblocks
    the held signals (an ignored one stays ignored)."""
    import os
    import signal
    import subprocess
    import sys

    show = "import signal as s; print(int(s.SIGINT) in s.pthread_sigmask(s.SIG_BLOCK, []))"
    fixed = "from triggerfish_cli.cli import app; app._unblock_held_signals(); " + show
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        inherited, cleared = (
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
            ).stdout.strip()
            for code in (show, fixed)
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    assert (inherited, cleared) == ("True", "False")
