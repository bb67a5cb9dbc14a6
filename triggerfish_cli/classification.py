"""Classification levels: PUBLIC < INTERNAL < CONFIDENTIAL < RESTRICTED."""

from __future__ import annotations

import enum


class Level(enum.IntEnum):
    PUBLIC = 0
    INTERNAL = 1
    CONFIDENTIAL = 2
    RESTRICTED = 3

    def __str__(self) -> str:
        return self.name


LEVEL_NAMES: tuple[str, ...] = tuple(level.name for level in Level)


def parse_level(name: str) -> Level:
    """The level named exactly ``name``; ``ValueError`` listing the four otherwise."""
    if name not in LEVEL_NAMES:
        raise ValueError(
            f"unknown classification level {name!r}: use one of {', '.join(LEVEL_NAMES)}"
        )
    return Level[name]


def can_flow_to(source: Level, target: Level) -> bool:
    """Data classified ``source`` may be read by a session at ``target``."""
    return target >= source
