"""YAML is parsed one way, and a document whose aliases explode is refused before use."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from triggerfish_cli import safe_yaml
from triggerfish_cli.errors import InvalidDataError
from triggerfish_cli.settings import parse_yaml_mapping

PACKAGE = Path(__file__).parents[1] / "triggerfish_cli"


def billion_laughs() -> str:
    """The 478-byte file of issue 35: nine levels of nine aliases, 9**9 strings."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for name, previous in zip("bcdefghi", "abcdefgh", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    text = "# billion laughs (478 bytes), #35\n" + "\n".join(lines) + "\n"
    text += "models: {primary: {model: x}}\n"
    assert len(text.encode()) == 478
    return text


def test_the_alias_bomb_is_refused_by_compose_load_and_the_settings() -> None:
    bomb = billion_laughs()
    for parse in (safe_yaml.compose, safe_yaml.load):
        with pytest.raises(InvalidDataError, match="aliases from 34 to 490,329,070 values"):
            parse(bomb)
    with pytest.raises(InvalidDataError, match=r"^triggerfish.yaml: the YAML expands"):
        parse_yaml_mapping(bomb, "triggerfish.yaml")


def test_ordinary_anchors_pass_and_build_as_before() -> None:
    text = (
        "defaults: &d {timeoutMs: 1000, retries: 2}\n"
        "a: {<<: *d, model: x}\n"
        "b: {<<: *d, model: y}\n"
        "loop: &l [1, *l]\n"
    )
    document = safe_yaml.load(text)
    assert document["b"] == {"timeoutMs": 1000, "retries": 2, "model": "y"}
    assert document["loop"][1] is document["loop"]  # a recursive alias, as PyYAML builds it
    assert safe_yaml.load("") is None and safe_yaml.compose("") is None


def test_the_bound_is_on_what_aliases_add() -> None:
    def fan(width: int) -> str:
        """A list of ``width`` values, repeated ``width`` times by aliases."""
        items = ", ".join(str(i) for i in range(width))
        return f"a: &a [{items}]\nb: [" + ", ".join(["*a"] * width) + "]\n"

    expanded, distinct = safe_yaml.expanded_size(safe_yaml.compose(fan(50)))
    assert (expanded, distinct) == (1 + 2 + 51 + 1 + 50 * 51, 1 + 2 + 51 + 1)
    assert expanded - distinct < safe_yaml.MAX_ALIAS_VALUES
    with pytest.raises(InvalidDataError, match="alias bomb"):
        safe_yaml.compose(fan(110))  # 110 x 111 > 10,000 added


def test_plain_documents_of_any_size_are_not_limited_by_the_alias_bound() -> None:
    text = "".join(f"k{i}: [{i}, {i}, {i}]\n" for i in range(safe_yaml.MAX_ALIAS_VALUES))
    assert len(safe_yaml.load(text)) == safe_yaml.MAX_ALIAS_VALUES


def test_yaml_errors_are_still_yaml_errors() -> None:
    with pytest.raises(yaml.YAMLError):
        safe_yaml.load("a: [1, 2\n")
    with pytest.raises(ValueError, match="month"):
        safe_yaml.load("since: 2026-13-45\n")


#: Calls that parse YAML text: only safe_yaml.py may make them.
_PARSERS = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all",
            "compose", "compose_all", "parse", "scan", "get_single_node"}  # fmt: skip


def test_every_yaml_parse_goes_through_safe_yaml() -> None:
    """``yaml.load(...)``, ``yaml.compose(...)``, ``Loader(text)``: nowhere but safe_yaml."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "safe_yaml.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "yaml":
                loader = node.func.attr.endswith("Loader") and bool(node.args)
                if node.func.attr in _PARSERS or (loader and ast.unparse(node.args[0]) != "''"):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            elif node.func.attr in ("get_single_node", "get_single_data"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []
