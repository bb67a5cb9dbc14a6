"""Dotted paths and node positions in YAML documents."""

from __future__ import annotations

import pytest
import yaml

from tests.config.test_secrets_guard import GATEWAY_CONFIG
from triggerfish_cli.config import redaction, yaml_paths
from triggerfish_cli.config import secrets_guard as guard
from triggerfish_cli.errors import InvalidDataError


def paths(text: str) -> list[str]:
    return [finding.describe() for finding in guard.scan(text).findings]


def test_paths_quote_awkward_keys() -> None:
    assert (
        yaml_paths.render_path(["groups", "group id.1", 0, "token"])
        == 'groups["group id.1"][0].token'
    )
    assert paths('groups:\n  "a.b":\n    - token: abc\n') == ['groups["a.b"][0].token']


def test_leaves_flatten_in_document_order() -> None:
    document = yaml.safe_load("b: {x: 1, y: [a, {z: null}]}\na: {}\n1: true\n")
    assert yaml_paths.leaves(document) == {
        "b.x": 1,
        "b.y[0]": "a",
        "b.y[1].z": None,
        "a": {},
        "1": True,
    }


def test_recursive_and_exploding_aliases_are_bounded() -> None:
    assert yaml_paths.leaves(yaml.safe_load("a: &x [1, *x]")) == {
        "a[0]": 1,
        "a[1]": "<recursive alias>",
    }
    lol = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for name, prev in zip("bcdef", "abcde", strict=True):
        lol += f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
    with pytest.raises(InvalidDataError, match="expands"):
        list(yaml_paths.walk_scalars(yaml_paths.compose(lol)))


def test_values_yaml_cannot_build_are_yaml_errors() -> None:
    with pytest.raises(yaml.YAMLError, match="month"):
        yaml_paths.load("since: 2026-13-45\n")


@pytest.mark.parametrize(
    "text",
    [
        GATEWAY_CONFIG,
        "a: 😀😀\nb:\n  token: 'x😀y'\n",
        'a: "é\\u00e9😀"\r\nb: [x, 😀y]\r\npassword: p\r\n',
        "\ufeffa: 1\npassword: hunter2\n",
    ],
)
def test_libyaml_and_pure_python_marks_agree(text: str) -> None:
    """Spans come from libyaml when it is there: they must index the text like PyYAML's."""

    def spans(loader: type) -> list[tuple[int, int]]:
        body = text.lstrip("\ufeff")
        offset = len(text) - len(body)
        root = yaml.compose(body if loader is not yaml.SafeLoader else text, Loader=loader)
        extra = offset if loader is not yaml.SafeLoader else 0
        return [
            (node.start_mark.index + extra, node.end_mark.index + extra)
            for _parts, _key, node in yaml_paths.walk_scalars(root)
        ]

    assert spans(yaml.CSafeLoader) == spans(yaml.SafeLoader)
    masked, _ = redaction.redact(text)
    assert "hunter2" not in masked and "x😀y" not in masked
