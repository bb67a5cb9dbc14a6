"""What the write gate does about live writers: ``freeze``, ``refuse`` or ``ignore``.

Chosen with ``--live-writers``, ``TRIGGERFISH_LIVE_WRITERS`` or ``storage:
live_writers`` (the first given wins); :mod:`write_gate` has what each means.
"""

from __future__ import annotations

from triggerfish_cli.errors import UsageError

MODES = ("freeze", "refuse", "ignore")
DEFAULT_MODE = "freeze"


def check_mode(value: str, where: str = "--live-writers") -> str:
    if value not in MODES:
        raise UsageError(f"{where}: {value!r} is not one of {', '.join(MODES)}")
    return value


#: The mode the operator chose for this process (--live-writers or its
#: environment variable), which overrides a ``storage: live_writers`` setting.
_chosen: str | None = None


def choose_mode(mode: str | None) -> None:
    """Set (or, with None, forget) the operator's choice for every store this process opens."""
    global _chosen
    _chosen = None if mode is None else check_mode(mode)


def mode_for(setting: str | None) -> str:
    """The mode a store opens with: the operator's choice, else its setting, else freeze."""
    return _chosen or setting or DEFAULT_MODE
