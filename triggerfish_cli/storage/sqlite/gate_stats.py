"""What the write gate did during one provider's life, for results, metrics and benches."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GateStats:
    """What the gate did during one provider's life (for results, metrics and benches)."""

    transactions: int = 0
    #: Transactions that froze live writers.
    freezes: int = 0
    frozen_seconds: float = 0.0
    longest_freeze: float = 0.0
    #: Times a writer was met inside its own transaction (a try given up, or a wait for
    #: its write lock to be free).
    busy_retries: int = 0
    #: Tries given up because a writer's commit fell between making room in the WAL
    #: and the freeze (wal_upkeep.py).
    room_retries: int = 0
    #: Tries given up because a writer did not stop in time.
    stop_timeouts: int = 0
    #: Freezes the watchdog ended (a deadline passed).
    watchdog_resumes: int = 0
    #: Transactions rolled back because they would have outlasted the cap.
    cut_short: int = 0
    #: Seconds between BEGIN and the end of COMMIT, frozen transactions only.
    held_seconds: float = 0.0
    #: --live-writers ignore: seconds we held the write lock while live writers had
    #: the store open, unpaused (their writes could fail in that window).
    exposed_seconds: float = 0.0
    #: Checkpoints after our commits that raised (the next commit's tries again),
    #: and the newest such error: a WAL that is not kept short says why here.
    checkpoint_errors: int = 0
    checkpoint_error: str | None = None
    writers: set[int] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {
            "transactions": self.transactions,
            "freezes": self.freezes,
            "frozen_seconds": round(self.frozen_seconds, 4),
            "longest_freeze_ms": round(self.longest_freeze * 1000, 1),
            "frozen_share": round(min(self.frozen_seconds / elapsed, 1.0), 4),
            "held_seconds": round(self.held_seconds, 4),
            "exposed_seconds": round(self.exposed_seconds, 4),
            "busy_retries": self.busy_retries,
            "room_retries": self.room_retries,
            "stop_timeouts": self.stop_timeouts,
            "watchdog_resumes": self.watchdog_resumes,
            "cut_short": self.cut_short,
            "checkpoint_errors": self.checkpoint_errors,
            "checkpoint_error": self.checkpoint_error,
            "live_writers": len(self.writers),
        }
