"""Reading YAML: the one way the tool parses it, bounded against alias bombs.

PyYAML's safe loaders build only plain values, but they follow aliases
without limit. ``a: &a [x, x, x]``, ``b: &b [*a, *a, *a]``, ... multiplies
with each line: 478 bytes can name a billion values. Composing or building
such a document is cheap (every alias shares one node), but whatever then
walks it, prints it or compares it does the billion, and used to take
seconds to minutes before it gave up.

So every document is composed first and, when it has anchors, its size with
every alias expanded is counted once per distinct node (instant). A document
whose aliases add more than :data:`MAX_ALIAS_VALUES` nodes to it is refused
(:class:`InvalidDataError`, exit 8) before anything is built from it. Real
configs reuse a few small blocks; no real config comes near the bound.
"""

from __future__ import annotations

from typing import Any

from triggerfish_cli.errors import InvalidDataError

#: Most nodes that aliases may add to a document (beyond the nodes written in it).
MAX_ALIAS_VALUES = 10_000
#: Counting stops here (keeps the integers small on a bomb of many levels).
_CAP = 10**15


def _loader(text: str, *, exact_marks: bool) -> Any:
    # lazy: yaml (+20 modules, ~30 ms) only where YAML is parsed (TID253)
    import yaml

    # libyaml's marks count code points like the pure-Python loader's, except
    # that it does not count a leading byte-order mark: such (rare) texts use
    # the pure-Python loader, ten times slower, when marks must index the text.
    if exact_marks and text.startswith("\ufeff"):
        return yaml.SafeLoader(text)
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)


def _children(node: Any) -> list[Any]:
    value = node.value
    if not isinstance(value, list):
        return []  # a scalar
    if value and isinstance(value[0], tuple):  # a mapping: (key, value) pairs
        return [part for pair in value for part in pair]
    return value


def expanded_size(root: Any) -> tuple[int, int]:
    """How many nodes ``root`` has with every alias expanded, and how many distinct ones.

    Each distinct node is visited once and the sizes of shared nodes are
    summed, so a billion-value bomb is counted as fast as a plain document.
    A recursive alias counts once (the walks visit it once).
    """
    if root is None:
        return 0, 0
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            sizes[id(node)] = min(_CAP, 1 + sum(sizes[id(child)] for child in _children(node)))
        elif id(node) not in sizes:
            sizes[id(node)] = 1  # while it is being counted: a recursive alias adds 1
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))
    return sizes[id(root)], len(sizes)


def check_aliases(text: str, root: Any) -> None:
    """Refuse ``root`` when its aliases add more than :data:`MAX_ALIAS_VALUES` nodes to it."""
    if "&" not in text:  # no anchor, no alias
        return
    expanded, distinct = expanded_size(root)
    if expanded - distinct > MAX_ALIAS_VALUES:
        shown = f"{expanded:,}" if expanded < _CAP else f"more than {_CAP:,}"
        raise InvalidDataError(
            f"the YAML expands through its aliases from {distinct:,} to {shown} values: "
            f"refused as an alias bomb (aliases may add at most {MAX_ALIAS_VALUES:,})"
        )


def compose(text: str) -> Any:
    """The node tree of ``text`` (None when empty); marks index ``text`` by code point."""
    loader = _loader(text, exact_marks=True)
    try:
        root = _single_node(loader)
    finally:
        loader.dispose()
    check_aliases(text, root)
    return root


def load(text: str) -> Any:
    """The Python value of ``text``: mappings, lists, strings, numbers, dates, bytes, null.

    Raises ``yaml.YAMLError`` for text that is not YAML, ``ValueError`` for a
    value YAML accepts but cannot build (a 13th month), and
    :class:`InvalidDataError` for an alias bomb.
    """
    loader = _loader(text, exact_marks=False)
    try:
        root = _single_node(loader)
        check_aliases(text, root)
        return None if root is None else loader.construct_document(root)
    finally:
        loader.dispose()


def _single_node(loader: Any) -> Any:
    try:
        return loader.get_single_node()
    except RecursionError:  # the pure-Python composer on very deep nesting
        raise InvalidDataError("the YAML is nested too deeply") from None
