"""Dotted paths into YAML documents, and YAML nodes that know where they are in the text.

Shared by the secrets guard (which edits config *text* at exact positions)
and the config diff (which compares documents key by key). A path renders
mapping keys joined by ``.`` and sequence indexes as ``[i]``; a key that
holds ``.``, brackets, quotes or spaces is written ``["like this"]``::

    models.providers.openai.apiKey    channels.signal.groups["group id"].mode
    models.failover[0]

Walks are bounded: a recursive alias is visited once and a document whose
aliases expand to more than :data:`MAX_NODES` values is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from triggerfish_cli import safe_yaml
from triggerfish_cli.errors import InvalidDataError


def render_path(parts: list[str | int]) -> str:
    """``["a", "b.c", 0, "d"]`` -> ``a["b.c"][0].d``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[^.\[\]\"'\s]+", part):
            out += f".{part}" if out else part
        else:
            out += "[" + json.dumps(part, ensure_ascii=False) + "]"
    return out


def _key_text(node: Any) -> str:
    # lazy: yaml (+20 modules, ~30 ms) only where YAML is parsed (TID253)
    import yaml

    if isinstance(node, yaml.ScalarNode):
        return str(node.value)
    return "?"


def compose(text: str) -> Any:
    """The YAML node tree, with marks that index ``text`` by code point (alias bombs refused)."""
    return safe_yaml.compose(text)


#: Most nodes a walk visits: aliases can expand a small file enormously.
MAX_NODES = 200_000


def _too_big() -> InvalidDataError:
    return InvalidDataError(f"the YAML expands to more than {MAX_NODES} values (aliases)")


def _setting_name(node: Any) -> str | None:
    """``{name: OPENAI_API_KEY, value: ...}`` (or ``key:``): the value's setting name."""
    # lazy: yaml only where YAML is parsed (TID253)
    import yaml

    keys = {_key_text(key).lower(): value for key, value in node.value}
    named = keys.get("name", keys.get("key"))
    if "value" in keys and isinstance(named, yaml.ScalarNode) and named.value:
        return str(named.value)
    return None


def walk_scalars(root: Any) -> Iterator[tuple[list[str | int], str | None, Any]]:
    """Every scalar value node with its path and the key it sits under.

    The ``value`` of a ``name``/``value`` (or ``key``/``value``) pair, such as a
    Kubernetes ``env`` item, sits under the pair's name: it is one setting.

    A recursive alias is walked once; a document whose aliases expand to
    more than :data:`MAX_NODES` values is refused.
    """
    # lazy: yaml only where YAML is parsed (TID253)
    import yaml

    budget = [MAX_NODES]

    def walk(
        node: Any, parts: list[str | int], key: str | None, above: frozenset[int]
    ) -> Iterator[Any]:
        budget[0] -= 1
        if budget[0] < 0:
            raise _too_big()
        if id(node) in above:
            return
        inner = above | {id(node)}
        if isinstance(node, yaml.MappingNode):
            setting = _setting_name(node)
            for key_node, value_node in node.value:
                name = _key_text(key_node)
                label = setting if setting is not None and name.lower() == "value" else name
                yield from walk(value_node, [*parts, name], label, inner)
        elif isinstance(node, yaml.SequenceNode):
            # Items of `tokens: [...]` are tokens: they inherit the key, singular.
            inherited = key[:-1] if key and key.endswith("s") else None
            for index, item in enumerate(node.value):
                yield from walk(item, [*parts, index], inherited, inner)
        elif isinstance(node, yaml.ScalarNode):
            yield parts, key, node

    if root is not None:
        yield from walk(root, [], None, frozenset())


def scalar_reader(failures: list[Any] | None = None) -> Any:
    """A function giving the Python value of a scalar node (str, int, float, bool, null).

    A scalar YAML accepts but cannot build (a date with a 13th month) reads
    as its text, and its node is appended to ``failures``.
    """
    # lazy: yaml only where YAML is parsed (TID253)
    import yaml

    loader = yaml.SafeLoader("")

    def read(node: Any) -> Any:
        try:
            return loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError):
            if failures is not None:
                failures.append(node)
            return node.value

    return read


def leaves(document: Any) -> dict[str, Any]:
    """Flatten a parsed document to ``{dotted path: scalar or empty container}``."""
    flat: dict[str, Any] = {}
    budget = [MAX_NODES]

    def walk(value: Any, parts: list[str | int], above: frozenset[int]) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise _too_big()
        if isinstance(value, (dict, list)) and value:
            if id(value) in above:
                flat[render_path(parts)] = "<recursive alias>"
                return
            inner = above | {id(value)}
            if isinstance(value, dict):
                for key, item in value.items():
                    walk(item, [*parts, key if isinstance(key, str) else _scalar_key(key)], inner)
            else:
                for index, item in enumerate(value):
                    walk(item, [*parts, index], inner)
        else:
            flat[render_path(parts)] = value

    walk(document, [], frozenset())
    return flat


def _scalar_key(key: Any) -> str:
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    return str(key)


def load(text: str) -> Any:
    """Parse YAML; a value YAML accepts but cannot build (a 13th month) is a YAMLError too."""
    # lazy: yaml only where YAML is parsed (TID253)
    import yaml

    try:
        return safe_yaml.load(text)
    except ValueError as exc:
        raise yaml.YAMLError(str(exc)) from None
