"""Every backend the contract suite runs on: name -> factory(tmp_path) -> provider.

A factory may be called several times per test; each call returns a
provider on the same store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from triggerfish_cli.storage.in_memory import MemoryStorage
from triggerfish_cli.storage.provider import BaseStorage
from triggerfish_cli.storage.sqlite import SqliteStorage

Provider = BaseStorage


class MinimalStorage(BaseStorage):
    """Only the five seed operations: runs the generic fallbacks as a backend would."""

    backend = "minimal"

    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    def describe(self) -> str:
        return "minimal:"

    def get(self, key: str) -> str | None:
        return self.data.get(key)

    def set(self, key: str, value: str) -> None:
        self.data[key] = value

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def list(self, prefix: str | None = None) -> list[str]:
        return sorted(k for k in self.data if not prefix or k.startswith(prefix))

    def clear(self) -> None:
        self.data.clear()


def _memory() -> Callable[[Path], Provider]:
    shared: dict[Path, MemoryStorage] = {}

    def factory(tmp_path: Path) -> Provider:
        return shared.setdefault(tmp_path, MemoryStorage())

    return factory


def _minimal() -> Callable[[Path], Provider]:
    shared: dict[Path, dict[str, str]] = {}

    def factory(tmp_path: Path) -> Provider:
        return MinimalStorage(shared.setdefault(tmp_path, {}))

    return factory


def _sqlite(tmp_path: Path) -> Provider:
    return SqliteStorage(tmp_path / "contract.db", create=True)


BACKENDS: dict[str, Callable[[Path], Provider]] = {
    "memory": _memory(),
    "minimal": _minimal(),
    "sqlite": _sqlite,
}
