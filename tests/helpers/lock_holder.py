"""A second process that holds a store's lock: ``python -m tests.helpers.lock_holder ARGS``.

ARGS are the CLI's global options that reach the store (``--db PATH`` or
``--config PATH``), then ``--`` and the lock's name. It prints ``held`` once
it holds the lock and releases it (and exits) when a line arrives on stdin
or stdin closes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from triggerfish_cli.settings import load_settings
from triggerfish_cli.storage.factory import open_provider, resolve_storage


def main(argv: list[str]) -> int:
    split = argv.index("--")
    options, name = argv[:split], argv[split + 1]
    db = Path(options[options.index("--db") + 1]) if "--db" in options else None
    config = Path(options[options.index("--config") + 1]) if "--config" in options else None
    settings = load_settings(config or Path("/nonexistent.yaml"), explicit=config is not None)
    provider = open_provider(resolve_storage(settings, db=db))
    try:
        with provider.lock(name):
            print("held", flush=True)
            sys.stdin.readline()
    finally:
        provider.close()
    return 0


def start(args: list[str], name: str) -> subprocess.Popen[str]:
    """Start a holder and return once it holds the lock."""
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.lock_holder", *args, "--", name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line.strip() == "held", f"the lock holder failed to start: {line!r}"
    return holder


def release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait(30)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
