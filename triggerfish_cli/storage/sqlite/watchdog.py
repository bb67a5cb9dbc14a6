"""The write gate's watchdog: resumes every process the gate froze, whatever happens to us.

Run by :mod:`triggerfish_cli.storage.sqlite.write_gate` as its own process, in a
session of its own, with only the standard library (``python -I -S
watchdog.py``): it must stay alive when the admin process is killed, and it
never opens the store. It reads lines from its stdin, a pipe whose other end
only the admin process holds:

- ``F <deadline> <pid>:<start> ...``: these processes are about to be
  stopped; resume them at ``deadline`` (``time.monotonic_ns()``, a clock shared
  by every process of the machine) if the admin process has not by then;
- ``R``: the admin process resumed them itself.

When the pipe closes (the admin process exited or was killed, kill -9
included), when a deadline passes, when the parent process changes (a
``getppid()`` poll) or when the watchdog itself gets SIGTERM/SIGHUP/SIGINT,
every process still registered is sent SIGCONT, after checking that its pid
still belongs to the same process (its start time). A deadline it enforces is
reported back with a ``T`` line on stdout.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

POLL_SECONDS = 0.1


def start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (None where there is no such process or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    try:
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def resume(frozen: dict[int, int]) -> None:
    """SIGCONT every registered pid that is still the process we stopped."""
    for pid, start in frozen.items():
        now = start_time(pid)
        if start and now is not None and now != start:
            continue  # the pid was reused: not ours to touch
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)
    frozen.clear()


def main() -> int:
    parent = os.getppid()
    frozen: dict[int, int] = {}
    deadline: int | None = None

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
    _die_with_parent()
    stdin = sys.stdin.buffer.fileno()
    pending = b""
    try:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        while True:
            timeout = POLL_SECONDS
            if deadline is not None:
                timeout = min(timeout, max(0.0, (deadline - time.monotonic_ns()) / 1e9))
            ready, _, _ = select.select([stdin], [], [], timeout)
            if ready:
                chunk = os.read(stdin, 65536)
                if not chunk:
                    return 0  # the admin process is gone: resume (finally) and leave
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    deadline = _handle(line.decode("ascii", "replace").split(), frozen, deadline)
            if deadline is not None and time.monotonic_ns() >= deadline:
                resume(frozen)
                deadline = None
                _tell("T")
            if os.getppid() != parent:
                return 0
    finally:
        resume(frozen)


def _handle(words: list[str], frozen: dict[int, int], deadline: int | None) -> int | None:
    if not words:
        return deadline
    if words[0] == "F" and len(words) >= 2:
        for item in words[2:]:
            pid, _, start = item.partition(":")
            frozen[int(pid)] = int(start or 0)
        return int(words[1])
    if words[0] == "R":
        frozen.clear()
        return None
    return deadline


def _tell(word: str) -> None:
    try:
        sys.stdout.write(word + "\n")
        sys.stdout.flush()
    except OSError:
        pass


def _die_with_parent() -> None:
    """Linux: get SIGHUP the moment the parent dies (a backup for the pipe's EOF)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        # lazy: ctypes (+3 modules) only in the watchdog process, on Linux
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGHUP), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# -- the admin process's side -----------------------------------------------------


class Watchdog:
    """The process that resumes whatever we froze if we die or stall (see watchdog.py)."""

    SCRIPT = Path(__file__)

    def __init__(self) -> None:
        # lazy: the watchdog process (python -I -S) never needs subprocess (+10)
        import subprocess

        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(self.SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            self.close()
            raise OSError("the write gate's watchdog did not start")
        os.set_blocking(self.proc.stdout.fileno(), False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        os.write(self.proc.stdin.fileno(), line.encode("ascii") + b"\n")  # one write, unbuffered

    def guard(self, deadline: float, processes: Sequence[tuple[int, int]]) -> None:
        """Register ``(pid, start time)``s about to be stopped, to resume at ``deadline``."""
        items = " ".join(f"{pid}:{start}" for pid, start in processes)
        self._send(f"F {int(deadline * 1e9)} {items}")

    def released(self) -> None:
        self._send("R")

    def fired(self) -> int:
        """How many deadlines the watchdog enforced since the last call."""
        assert self.proc.stdout is not None
        try:
            data = self.proc.stdout.read()
        except OSError:
            return 0
        return data.count(b"T") if data else 0

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # EOF: it resumes anything left and exits
        # lazy: the watchdog process (python -I -S) never needs subprocess (+10)
        import subprocess

        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


if __name__ == "__main__":
    sys.exit(main())
