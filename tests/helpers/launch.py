"""Run the CLI's main in this process with a function patched to pause or SIGKILL it.

The fault tests kill the CLI at chosen moments, as a power cut or ``kill -9``
would, to show what a rerun finds. The moments are function calls of the
core; this launcher wraps those functions, then calls the CLI's main, so the
production code carries no test hooks::

    python tests/helpers/launch.py --kill-before triggerfish_cli.migrate.run:_index \\
        -- migrate --from a.db --to b.db

``--pause MOD:FUNC=SECONDS`` sleeps before each call (a window to kill the
process from the test), ``--kill-before MOD:FUNC`` and ``--kill-after
MOD:FUNC`` SIGKILL the process just before or just after the first call;
``--hang-before MOD:FUNC=PATH`` writes PATH and sleeps for ever at the first
call (a moment the test waits for, then kills the process in), ``MOD:FUNC@N=PATH``
at the N-th;
``--set MOD:NAME=NUMBER`` sets a module's constant (the write gate's
``DEADLINE``). Tests build the command with :func:`command`.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def command(*hooks: str) -> list[str]:
    """The argv prefix that runs the CLI through this launcher with ``hooks``
    (``("--kill-before", "module:function")``, ...); the CLI's arguments follow."""
    return [sys.executable, str(HERE), *hooks, "--"]


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _wrap(spec: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    module_name, _, name = spec.partition(":")
    module = importlib.import_module(module_name)
    original = getattr(module, name)
    setattr(module, name, functools.wraps(original)(make(original)))


def _pause(seconds: float) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def paused(*args: Any, **kwargs: Any) -> Any:
            time.sleep(seconds)
            return original(*args, **kwargs)

        return paused

    return make


def _hang_before(path: str, at: int = 1) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        calls = [0]

        def hung(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] < at:
                return original(*args, **kwargs)
            Path(path).write_text(str(os.getpid()))
            while True:
                time.sleep(60)

        return hung

    return make


def _kill_before(original: Callable[..., Any]) -> Callable[..., Any]:
    def killed(*args: Any, **kwargs: Any) -> Any:
        _kill()
        return original(*args, **kwargs)  # never reached

    return killed


def _kill_after(original: Callable[..., Any]) -> Callable[..., Any]:
    def killed(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _kill()
        return result  # never reached

    return killed


def main(argv: list[str]) -> None:
    split = argv.index("--")
    hooks, args = argv[:split], argv[split + 1 :]
    while hooks:
        option, spec = hooks[0], hooks[1]
        hooks = hooks[2:]
        if option == "--pause":
            target, _, seconds = spec.partition("=")
            _wrap(target, _pause(float(seconds)))
        elif option == "--kill-before":
            _wrap(spec, _kill_before)
        elif option == "--kill-after":
            _wrap(spec, _kill_after)
        elif option == "--hang-before":
            target, _, path = spec.partition("=")
            target, _, at = target.partition("@")
            _wrap(target, _hang_before(path, int(at or 1)))
        elif option == "--set":
            target, _, value = spec.partition("=")
            module_name, _, name = target.partition(":")
            setattr(importlib.import_module(module_name), name, float(value))
        else:
            raise SystemExit(f"launch.py: unknown hook {option}")
    from triggerfish_cli.cli.app import main as cli_main

    sys.argv = ["triggerfish-admin", *args]
    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
