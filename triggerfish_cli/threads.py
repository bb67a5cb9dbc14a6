"""Two small threading tools: a result from a thread, and a read-ahead iterator.

Both keep Ctrl-C working in the main thread (they wait in short slices)
and hand a thread's error to the caller.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any


class Worker:
    """Run a function on a thread; ``result()`` waits and re-raises its error."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

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


def prefetched(items: Iterator[Any], depth: int = 2) -> Iterator[Any]:
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

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
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
