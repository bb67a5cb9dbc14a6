"""The README's example outputs, run for real on a fixed demo store.

A block in README.md of the form

    <!-- example-output: kv namespaces ;; kv list sessions: --limit 3 -->
    ```console
    ...
    ```

is rewritten with each command (`;;` between them) and what it prints in a
real pseudo-terminal 100 columns wide, without colour, on a store built by
`demo create --records 2000 --seed 0 --now 2026-05-01T00:00:00Z`. So the
examples always show the current output shape: `scripts/generate_docs.py`
rewrites them, `tests/cli/test_reference.py` fails when they are stale. A
change to the demo generator only means regenerating.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COLUMNS = 100
DEMO = ["demo", "create", "--records", "2000", "--seed", "0", "--now", "2026-05-01T00:00:00Z"]
BLOCK = re.compile(
    r"(<!-- example-output: (?P<commands>.*?) -->\n)```console\n(?:[^`]*?\n)?```", re.DOTALL
)
PROG = "triggerfish-admin"


def _run(argv: list[str], env: dict[str, str]) -> str:
    """What ``triggerfish-admin ARGV`` shows in a terminal COLUMNS wide (stdout and stderr)."""
    import pexpect

    child = pexpect.spawn(
        sys.executable,
        ["-m", "triggerfish_cli", *argv],
        env=env,
        dimensions=(50, COLUMNS),
        encoding="utf-8",
        timeout=300,
    )
    child.expect(pexpect.EOF)
    child.close()
    if child.exitstatus != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {child.exitstatus}: {child.before}")
    text = (child.before or "").replace("\r\n", "\n")
    return text if text.endswith("\n") or not text else text + "\n"


def _environment(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERFISH_")}
    env.update(
        TRIGGERFISH_DATA_DIR=str(base),
        HOME=str(base.parent),
        NO_COLOR="1",
        COLUMNS=str(COLUMNS),
        TERM="xterm",
        USER="operator",
        LOGNAME="operator",
        PYTHONPATH=str(ROOT),
    )
    return env


def render(text: str) -> str:
    """``text`` (the README) with every example-output block run again."""
    if not BLOCK.search(text):
        return text
    with tempfile.TemporaryDirectory(prefix="tf-readme-") as scratch:
        base = Path(scratch) / ".triggerfish"
        base.mkdir()
        env = _environment(base)
        _run(DEMO, env)
        # The demo's audit record names the store's temporary path: drop it, so the
        # figures do not depend on where this runs (the delete's own record does not).
        _run(["kv", "delete", "--prefix", "audit:", "--yes", "--pause", "0"], env)

        def block(match: re.Match[str]) -> str:
            shown = []
            for command in match.group("commands").split(";;"):
                argv = shlex.split(command.strip())
                output = _run(argv, env).replace(str(base), "~/.triggerfish")
                shown.append(f"$ {PROG} {command.strip()}\n{output}")
            return f"{match.group(1)}```console\n{''.join(shown).rstrip()}\n```"

        return BLOCK.sub(block, text)


def main() -> int:
    fresh = render(README.read_text(encoding="utf-8"))
    if "--check" in sys.argv:
        return 0 if fresh == README.read_text(encoding="utf-8") else 1
    README.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
