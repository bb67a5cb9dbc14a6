"""Plain-text secrets in ``triggerfish.yaml``: find them (:mod:`redaction` masks them
and puts them back).

The design forbids secrets in config files and in the store; Triggerfish
keeps them in the OS keychain and the YAML holds references such as
``secret:provider:anthropic:apiKey``. Before a config version is stored, the
text is scanned for values that look like secrets anyway: every value is
judged with the key it sits under (:func:`secret_shapes.classify`: secret
key names, known credential formats, base64, ``!!binary`` and JSON values
decoded and judged again), and the raw text, comments included, is searched
for credential formats. A ``name``/``value`` (or ``key``/``value``) pair,
such as a Kubernetes ``env`` item, is one setting: its value is judged
under its name. A finding names a dotted path (or a line for a comment),
never the value.

:func:`redaction.redact` replaces each finding in the *text* (so comments and layout
survive) by the marker ``"<redacted>"``, then parses the result and checks
that exactly the flagged values changed. :func:`redaction.restore` puts operator-given
values back in place of the markers, in the original quoting style, so a
version redacted and restored with the same values is byte-identical for
plain, single- and double-quoted scalars.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from triggerfish_cli.config.secret_shapes import MARKER as MARKER
from triggerfish_cli.config.secret_shapes import classify as classify
from triggerfish_cli.config.secret_shapes import is_reference as is_reference
from triggerfish_cli.config.secret_shapes import looks_random, matches
from triggerfish_cli.config.secret_shapes import pattern_kind as pattern_kind
from triggerfish_cli.config.yaml_paths import (
    compose,
    render_path,
    scalar_reader,
    walk_scalars,
)

MARKER_TEXT = '"<redacted>"'

#: ``key: value`` on one line, optionally commented out or a list item.
_LINE_KEY = re.compile(
    r"^(?P<lead>[ \t]*(?:#[ \t]*)?(?:-[ \t]+)?)(?P<q>[\"']?)(?P<key>[A-Za-z0-9_.\-]+)(?P=q)"
    r"[ \t]*:[ \t]+(?P<value>.*?)[ \t]*$"
)


# -- findings -------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One plain-text secret: where it is and why, never what it is."""

    #: Dotted path (``models.providers.openai.apiKey``, ``a.b[0]``), or
    #: ``line N`` for a comment or for a file that is not valid YAML.
    path: str
    line: int
    kind: str
    #: ``value`` (a YAML value, restorable), ``comment`` or ``text``.
    where: str = "value"
    #: Quoting style of the original scalar: plain, single, double, literal, folded.
    style: str = "plain"
    #: Indentation of a literal block's content (to write it back the same way).
    indent: int = 0

    def describe(self) -> str:
        if self.where == "value":
            return self.path
        return f"{self.path} ({self.where})"

    def as_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "path": self.path,
            "line": self.line,
            "kind": self.kind,
            "where": self.where,
            "style": self.style,
        }
        if self.style == "literal":
            record["indent"] = self.indent
        return record


@dataclass
class Scan:
    findings: list[Finding] = field(default_factory=list)
    #: Text spans to mask: (start, end, replacement).
    spans: list[tuple[int, int, str]] = field(default_factory=list)
    #: Whether the text parsed as YAML (else only line-based checks ran).
    parsed: bool = True
    #: Whether it also builds into a mapping (or nothing), as a config must.
    valid: bool = True

    @property
    def paths(self) -> list[str]:
        return [finding.describe() for finding in self.findings]


_STYLES = {None: "plain", "": "plain", "'": "single", '"': "double", "|": "literal", ">": "folded"}


def value_span(text: str, node: Any) -> tuple[int, int, str]:
    """The text span of a scalar's value and its replacement.

    Its anchor and tag are kept, except a ``!!binary`` tag: the marker is text.
    """
    start, end = node.start_mark.index, node.end_mark.index
    binary = node.tag == "tag:yaml.org,2002:binary"
    while start < end and text[start] in ("&" if binary else "&!"):
        while start < end and not text[start].isspace():
            start += 1
        while start < end and text[start] in " \t":
            start += 1
    trailing = "\n" if text[start:end].endswith("\n") else ""
    return start, end, MARKER_TEXT + trailing


def scan(text: str) -> Scan:
    """Find the plain-text secrets in a config text (parsed, or line by line if it is not YAML)."""
    # lazy: yaml (+20 modules, ~30 ms) only where YAML is parsed (TID253)
    import yaml

    try:
        root = compose(text)
    except yaml.YAMLError:
        return _scan_lines(text)
    failures: list[Any] = []
    read = scalar_reader(failures)
    # One node may sit at several paths (an anchored value and its aliases).
    paths: dict[int, list[list[str | int]]] = {}
    nodes: dict[int, Any] = {}
    kinds: dict[int, str] = {}
    for parts, key, node in walk_scalars(root):
        paths.setdefault(id(node), []).append(parts)
        nodes[id(node)] = node
        kind = classify(key, read(node))
        if kind is not None:
            kinds.setdefault(id(node), kind)
    _flag_siblings(paths, nodes, kinds, read)
    mapping = root is None or isinstance(root, yaml.MappingNode)
    result = Scan(valid=mapping and not failures)
    spans = {ident: value_span(text, node) for ident, node in nodes.items()}
    # Credentials anywhere in the raw text: comments, keys, odd quoting.
    loose: list[tuple[int, int, str]] = []
    for kind, match in matches(text):
        begin, stop = match.span()
        owner = next((i for i, (a, b, _) in spans.items() if a <= begin < b), None)
        if owner is not None:
            kinds.setdefault(owner, kind)
        elif not any(a <= begin < b for a, b, _ in loose):
            loose.append((begin, stop, kind))
    flagged: list[tuple[int, int]] = []
    for ident, kind in kinds.items():
        node = nodes[ident]
        style = _STYLES.get(node.style, "plain")
        indent = _block_indent(text, spans[ident]) if style == "literal" else 0
        for parts in paths[ident]:
            result.findings.append(
                Finding(render_path(parts), node.start_mark.line + 1, kind, "value", style, indent)
            )
        result.spans.append(spans[ident])
        flagged.append(spans[ident][:2])
    for begin, stop, kind in loose:
        line = text.count("\n", 0, begin) + 1
        where = "comment" if "#" in text[text.rfind("\n", 0, begin) + 1 : begin] else "text"
        result.findings.append(Finding(f"line {line}", line, kind, where))
        result.spans.append((begin, stop, MARKER))
        flagged.append((begin, stop))
    _scan_comment_keys(text, result, flagged)
    result.findings.sort(key=lambda f: (f.line, f.path))
    return result


def _flag_siblings(
    paths: dict[int, list[list[str | int]]],
    nodes: dict[int, Any],
    kinds: dict[int, str],
    read: Callable[[Any], Any],
) -> None:
    """A random value in the same list or mapping as a credential is one too.

    ``[AKIA..., <its secret key>]``: the key id has a known shape, its secret
    only looks random; beside it, that is enough.
    """
    parents: dict[tuple[str | int, ...], list[int]] = {}
    for ident, where in paths.items():
        for parts in where:
            parents.setdefault(tuple(parts[:-1]), []).append(ident)
    for members in parents.values():
        if not any(ident in kinds for ident in members):
            continue
        for ident in members:
            value = read(nodes[ident])
            if (
                ident not in kinds
                and isinstance(value, str)
                and not is_reference(value)
                and looks_random(value)
            ):
                kinds[ident] = "random value beside a credential"


def _block_indent(text: str, span: tuple[int, int, str]) -> int:
    """Column of the first content line of a block scalar."""
    for line in text[span[0] : span[1]].split("\n")[1:]:
        if line.strip():
            return len(line) - len(line.lstrip(" "))
    return 2


def _scan_comment_keys(text: str, result: Scan, flagged: list[tuple[int, int]]) -> None:
    """``# password: hunter2`` in a comment is a plain-text password too."""
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        stripped = line.lstrip()
        if stripped.startswith("#"):
            _check_line(line, offset, number, "comment", result, flagged)
        offset += len(line)


def _scan_lines(text: str) -> Scan:
    """For text that is not valid YAML: every ``key: value`` line, plus the raw patterns."""
    result = Scan(parsed=False)
    flagged: list[tuple[int, int]] = []
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        where = "comment" if line.lstrip().startswith("#") else "text"
        _check_line(line, offset, number, where, result, flagged)
        offset += len(line)
    for kind, match in matches(text):
        begin, stop = match.span()
        if any(a <= begin < b for a, b in flagged):
            continue
        line_no = text.count("\n", 0, begin) + 1
        result.findings.append(Finding(f"line {line_no}", line_no, kind, "text"))
        result.spans.append((begin, stop, MARKER))
        flagged.append((begin, stop))
    result.findings.sort(key=lambda f: (f.line, f.path))
    return result


def _check_line(
    line: str, offset: int, number: int, where: str, result: Scan, flagged: list[tuple[int, int]]
) -> None:
    body = line.rstrip("\r\n")
    match = _LINE_KEY.match(body)
    if match is None:
        return
    value = match.group("value")
    if where != "comment":
        value = re.split(r"[ \t]+#", value, maxsplit=1)[0]
    raw = value
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    if not value or value[0] in "|>{[&*!":
        return
    if where == "comment" and any(c.isspace() for c in value):
        return  # `# token: your bot token here` is documentation, not a token
    kind = classify(match.group("key"), value)
    if kind is None:
        return
    begin = offset + match.start("value")
    stop = begin + len(raw)
    if any(a <= begin < b for a, b in flagged):
        return
    result.findings.append(Finding(f"line {number}", number, kind, where))
    result.spans.append((begin, stop, MARKER_TEXT if where != "comment" else MARKER))
    flagged.append((begin, stop))
