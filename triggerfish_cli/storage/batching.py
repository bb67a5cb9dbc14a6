"""Batches of write transactions sized for the write gate (write_gate.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from triggerfish_cli.storage.sqlite.write_gate import ATTEMPTS, FreezeTooLong, WriteGate

X = TypeVar("X")
R = TypeVar("R")


class BatchSizer:
    """Batch sizes for a long job's write transactions: each holds the lock about ``budget``
    and writes at most about ``frames`` WAL frames.

    While the gate pauses live writers, sizes follow smoothed per-item costs
    (lock time, and WAL frames where the gate counted them) so that each freeze
    lasts about ``budget`` and leaves the WAL short (``WriteGate.frame_budget``);
    with nobody to pause they grow to ``most``. :meth:`cut` halves the size after
    a freeze that hit its cap.
    """

    def __init__(
        self,
        most: int,
        *,
        budget: float = WriteGate.budget,
        frames: int | None = WriteGate.frame_budget,
        first: int = 100,
    ) -> None:
        self.most = max(1, most)
        self.budget = budget
        self.frames = frames
        self.size = max(1, min(self.most, first))
        self.per_item: float | None = None
        self.frames_per_item: float | None = None

    def record(self, items: int, held: float, frozen: bool, frames: int = -1) -> None:
        """Learn from a committed batch of ``items`` (``frames``: WAL frames it wrote, -1
        unknown) and size the next one."""
        if items <= 0:
            return
        self.per_item = smooth(self.per_item, held / items)
        if frames > 0:
            self.frames_per_item = smooth(self.frames_per_item, frames / items)
        grown = self.size * 2
        if frozen:
            grown = min(grown, int(self.budget / max(self.per_item, 1e-7)))
            if self.frames is not None and self.frames_per_item:
                grown = min(grown, int(self.frames / self.frames_per_item))
        self.size = max(1, min(self.most, grown))

    def after(self, items: int, gate: WriteGate) -> None:
        """:meth:`record` the gate's figures of its last transaction, ``items`` long."""
        self.record(items, gate.last_hold, gate.last_frozen, gate.last_frames)

    def cut(self) -> None:
        self.size = max(1, self.size // 2)


def smooth(average: float | None, sample: float) -> float:
    """An exponential moving average that one outlier (a slow batch) cannot drag far."""
    if average is None:
        return sample
    return 0.7 * average + 0.3 * min(sample, 3 * average)


def in_batches(
    items: Sequence[X],
    work: Callable[[Sequence[X]], R],
    *,
    most: int,
    gate: WriteGate | None,
) -> Iterator[tuple[int, R]]:
    """``work`` (one write transaction) over ``items`` in gate-sized batches.

    Yields ``(items in the batch, work's result)`` after each committed
    batch. A batch the gate cut short (rolled back) is tried again smaller.
    """
    first = 100 if gate is not None and gate.will_freeze() else most
    frames = gate.frame_budget if gate is not None else None
    sizer = BatchSizer(most, frames=frames, first=first)
    start = 0
    cuts = 0
    while start < len(items):
        batch = items[start : start + sizer.size]
        try:
            result = work(batch)
        except FreezeTooLong:
            cuts = cuts + 1 if len(batch) <= 1 else 0
            if cuts >= ATTEMPTS:
                raise
            sizer.cut()
            continue
        cuts = 0
        start += len(batch)
        if gate is not None:
            sizer.after(len(batch), gate)
        else:
            sizer.record(len(batch), 0.0, False)
        yield len(batch), result
