"""How the core's long jobs report progress, without knowing who shows it (or whether).

A job takes an optional :class:`Reporter` and tells it each phase it enters
(with its total when known) and how far it got; the CLI hands it a progress
bar on a terminal, nothing otherwise. The core never imports rich.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, TypeVar


class Reporter(Protocol):
    def phase(self, name: str, total: int | None = None, *, unit: str = "") -> None:
        """A new phase: its name, its total when known, its unit ("bytes", or a count)."""

    def advance(self, amount: int = 1) -> None:
        """``amount`` more done in the current phase."""


class _Silent:
    def phase(self, name: str, total: int | None = None, *, unit: str = "") -> None:
        return None

    def advance(self, amount: int = 1) -> None:
        return None


SILENT: Reporter = _Silent()

Chunk = TypeVar("Chunk", bytes, memoryview, "bytes | memoryview")


def counted(chunks: Iterable[Chunk], progress: Reporter) -> Iterator[Chunk]:
    """``chunks`` unchanged, advancing ``progress`` by each one's length."""
    for chunk in chunks:
        progress.advance(len(chunk))
        yield chunk
