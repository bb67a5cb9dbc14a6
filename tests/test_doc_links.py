"""Every link of the repository's Markdown resolves inside the repository: a relative
path names a file or directory in it (never `../` out of it), and an anchor names a
heading of the file it points into."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
HEADING = re.compile(r"^#+ (.*)$", re.M)


def markdown_files() -> list[Path]:
    found = list(ROOT.glob("*.md"))
    for top in ROOT.iterdir():
        if top.is_dir() and not top.name.startswith(".") and top.name != "node_modules":
            found += top.rglob("*.md")
    return sorted(found)


def prose(path: Path) -> str:
    """The file without its code blocks (a link-like text in code is no link)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of ``path``'s headings."""
    slugs = set()
    for heading in HEADING.findall(prose(path)):
        slugs.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return slugs


def test_every_relative_link_resolves_inside_the_repository() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files
    broken = []
    for source in files:
        for target in LINK.findall(prose(source)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            place, _, anchor = target.partition("#")
            resolved = (source.parent / place).resolve() if place else source
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                broken.append(f"{source.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{source.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []
