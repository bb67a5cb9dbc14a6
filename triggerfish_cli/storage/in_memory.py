"""The in-memory backend: a dict, for tests and ephemeral use.

It relies on the generic fallbacks of :class:`BaseStorage` for everything
but the five operations, which makes it the reference the contract suite
checks those fallbacks against.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager

from triggerfish_cli.errors import BusyError
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.provider import StorageProvider


class MemoryStorage(BaseStorage):
    backend = "memory"

    def __init__(self, initial: dict[str, str] | None = None) -> None:
        self._data: dict[str, str] = dict(initial or {})
        self._locks: dict[str, threading.Lock] = {}

    def describe(self) -> str:
        return "memory:"

    def is_same_store(self, other: StorageProvider) -> bool:
        return other is self  # every memory store describes itself as memory:

    def get(self, key: str) -> str | None:
        return self._data.get(key)

    def set(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("keys and values are strings")
        self._data[key] = value

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def list(self, prefix: str | None = None) -> list[str]:
        if prefix:
            return sorted(key for key in self._data if key.startswith(prefix))
        return sorted(self._data)

    def clear(self) -> None:
        self._data.clear()

    def set_many(self, items: Iterable[tuple[str, str]]) -> int:
        staged = list(items)  # all or nothing: a bad item writes none
        for key, value in staged:
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError("keys and values are strings")
        self._data.update(staged)
        return len(staged)

    def lock(self, name: str, wait: float = 0.0) -> AbstractContextManager[None]:
        """A lock of this process only: nobody else can see this store anyway."""
        return self._hold(self._locks.setdefault(name, threading.Lock()), name, wait)

    @contextmanager
    def _hold(self, lock: threading.Lock, name: str, wait: float) -> Iterator[None]:
        deadline = time.monotonic() + max(0.0, wait)
        while not lock.acquire(blocking=False):
            if time.monotonic() >= deadline:
                raise BusyError(f"{name} on {self.describe()} is held", hint="pass --wait SECONDS")
            time.sleep(0.01)
        try:
            yield
        finally:
            lock.release()
