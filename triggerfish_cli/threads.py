"""Small threading tools: threads that never take a signal, a result from a
thread, and a read-ahead iterator.

They keep Ctrl-C working in the main thread (they wait in short slices)
and hand a thread's error to the caller.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

#: Signals that stop or end us: the main thread alone takes them (see :func:`background`).
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGTSTP, signal.SIGHUP, signal.SIGQUIT)


def cpu_workers() -> int:
    """Threads for CPU work that lets go of the GIL (zstd, hashing, SQLite): the cores, up to 4."""
    return min(4, os.cpu_count() or 1)


def block_signals() -> None:
    """Keep the signals in :data:`HELD_SIGNALS` off the calling thread (a pool's
    initializer; :func:`background` calls it in every thread it starts)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)


def background(target: Callable[[], Any], name: str | None = None) -> threading.Thread:
    """Start ``target`` on a daemon thread that never takes a Ctrl-C or a kill.

    The kernel hands a signal sent to the process to any thread that does not
    block it. Python runs the handler in the main thread in any case, but
    where the main thread holds the signal back (a batch of a sweep, a
    freeze of the write gate) one taken by another thread would still run
    it there at once, at any point, even inside code that waits out an
    error. With every other thread blocking them, a held signal waits until
    the main thread lets it in.
    """

    def run() -> None:
        block_signals()
        target()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


class Worker:
    """Run a function on a thread; ``result()`` waits and re-raises its error."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = background(lambda: self._run(fn))

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._result = fn()
        except BaseException as exc:  # handed to the caller
            self._error = exc

    def result(self) -> Any:
        while self._thread.is_alive():
            self._thread.join(0.2)  # short waits keep Ctrl-C working
        if self._error is not None:
            raise self._error
        return self._result


_DONE = object()


def prefetched(items: Iterator[Any], depth: int = 2) -> Generator[Any, None, None]:
    """``items`` produced on a thread, up to ``depth`` ahead of the consumer.

    The source is read while the target writes the previous batch. When the
    consumer stops (an error, Ctrl-C), the producer stops after its current item.
    """
    pipe: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item: Any) -> bool:
        while not stop.is_set():
            try:
                pipe.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(_DONE)
        except BaseException as exc:  # handed to the consumer
            offer(exc)

    thread = background(produce)
    try:
        while True:
            try:
                item = pipe.get(timeout=0.2)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
