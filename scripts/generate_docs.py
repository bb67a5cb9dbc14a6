"""Regenerate the man page, the CLI reference and the shell completions.

    python scripts/generate_docs.py          # write them
    python scripts/generate_docs.py --check  # exit 1 if any is stale

All three come from the real command tree (triggerfish_cli/cli/reference.py);
the README's example outputs are run again on a fixed demo store
(scripts/readme_examples.py). tests/cli/test_reference.py fails when a
committed file is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from readme_examples import README, render  # noqa: E402

from triggerfish_cli.cli.reference import generated_files  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args()
    stale = []
    for relative, content in generated_files().items():
        path = ROOT / relative
        if path.exists() and path.read_text(encoding="utf-8") == content:
            continue
        stale.append(relative)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    fresh = render(readme)
    if fresh != readme:
        stale.append(README.name)
        if not args.check:
            README.write_text(fresh, encoding="utf-8")
    for relative in stale:
        print(f"{'stale' if args.check else 'wrote'}: {relative}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
