"""Masking a config text's plain-text secrets (the findings of :mod:`secrets_guard`),
and putting supplied values back where a stored version holds markers."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from triggerfish_cli.config.secrets_guard import MARKER, Finding, Scan, scan, value_span
from triggerfish_cli.config.yaml_paths import compose, leaves, load, render_path, walk_scalars
from triggerfish_cli.errors import InvalidDataError, RefusedError

# -- masking ----------------------------------------------------------------------


def _apply(text: str, spans: list[tuple[int, int, str]]) -> str:
    out = text
    for start, end, replacement in sorted(spans, reverse=True):
        out = out[:start] + replacement + out[end:]
    return out


def redact(text: str, result: Scan | None = None) -> tuple[str, list[Finding]]:
    """The text with every finding masked, and the findings.

    Raises :class:`RefusedError` when a secret cannot be masked without
    changing anything else (a secret inside a key, an unusual construct).
    """
    result = result if result is not None else scan(text)
    if not result.findings:
        return text, []
    masked = _apply(text, result.spans)
    if result.parsed:
        _verify(text, masked, result.findings)
    return masked, result.findings


def _verify(original: str, masked: str, findings: list[Finding]) -> None:
    # lazy: yaml (+20 modules, ~30 ms) only where YAML is parsed (TID253)
    import yaml

    values = {f.path for f in findings if f.where == "value"}
    try:
        before, after = leaves(load(original)), leaves(load(masked))
    except yaml.YAMLError:
        before, after = {}, None
    problem = after is None or set(before) != set(after)
    if not problem:
        assert after is not None
        for path, value in before.items():
            expected = MARKER if path in values else value
            if after[path] != expected:
                problem = True
                break
    if problem:
        raise RefusedError(
            f"cannot redact {', '.join(f.describe() for f in findings)} without changing "
            "anything else (a secret in a key or an unusual YAML construct)",
            hint="move the secret to a secret: reference in the keychain",
        )


def display_mask(text: str) -> str:
    """The text with secrets masked, for showing on a terminal; never fails."""
    result = scan(text)
    if not result.findings:
        return text
    try:
        return redact(text, result)[0]
    except RefusedError:
        lines = text.splitlines(keepends=True)
        for finding in result.findings:
            index = finding.line - 1
            if 0 <= index < len(lines):
                indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
                lines[index] = f"{indent}# {MARKER} line\n"
        return "".join(lines)


# -- restoring --------------------------------------------------------------------


def needed(redactions: list[Mapping[str, Any]]) -> list[str]:
    """Paths whose values must be supplied to restore a redacted text (comments need none)."""
    return [str(entry["path"]) for entry in redactions if entry.get("where", "value") == "value"]


def render_scalar(value: Any, style: str, indent: int = 2) -> str:
    """``value`` as YAML scalar text, in ``style`` where that is faithful."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, bytes):  # a !!binary value
        return "!!binary " + base64.b64encode(value).decode("ascii")
    text = str(value)
    if style == "plain":
        return text
    if style == "single" and "\n" not in text:
        return "'" + text.replace("'", "''") + "'"
    if style == "literal" and text.strip() and indent > 0:
        body = text.rstrip("\n")
        chomp = {0: "-", 1: ""}.get(len(text) - len(body), "+")
        lines = [(" " * indent + line) if line else "" for line in body.split("\n")]
        return f"|{chomp}\n" + "\n".join(lines) + "\n" * max(1, len(text) - len(body))
    return json.dumps(text, ensure_ascii=False)


def restore(text: str, redactions: list[Mapping[str, Any]], values: Mapping[str, Any]) -> str:
    """Put ``values`` (path -> value) back where ``text`` holds markers.

    Each value is written in the original quoting style, falling back to a
    double-quoted string when that style would change the value. Raises
    :class:`InvalidDataError` when a marker is not where the record says.
    """
    wanted = {
        str(e["path"]): (str(e.get("style", "plain")), int(e.get("indent", 0)))
        for e in redactions
        if e.get("where", "value") == "value"
    }
    if not wanted:
        return text
    missing = [path for path in wanted if path not in values]
    if missing:
        raise RefusedError(f"no value supplied for {', '.join(missing)}")
    # lazy: yaml only where YAML is parsed (TID253)
    import yaml

    nodes: dict[str, Any] = {}
    for parts, _key, node in walk_scalars(compose(text)):
        path = render_path(parts)
        if path in wanted:
            nodes[path] = node
    # (start, end, path) per marker; aliased paths share one marker.
    marks: dict[int, tuple[int, int, str]] = {}
    for path in wanted:
        node = nodes.get(path)
        if node is None or node.value != MARKER:
            raise InvalidDataError(
                f"{path}: no redaction marker there; the stored version is damaged"
            )
        start, end, _ = value_span(text, node)
        marks.setdefault(id(node), (start, end, path))
    try:
        expected = leaves(load(text))
    except yaml.YAMLError as exc:
        raise InvalidDataError(f"the stored version is not valid YAML: {exc}") from None
    expected.update({path: values[path] for path in wanted})
    for fallback in (False, True):
        edits = []
        for start, end, path in marks.values():
            style, indent = wanted[path]
            rendered = render_scalar(values[path], "double" if fallback else style, indent)
            if rendered.startswith("|") and text[end : end + 1] == "\n":
                rendered = rendered[:-1]  # the line end after the marker stays
            edits.append((start, end, rendered))
        restored = _apply(text, edits)
        try:
            flat = leaves(load(restored))
        except yaml.YAMLError:
            continue
        if flat == expected and all(type(flat[p]) is type(values[p]) for p in wanted):
            return restored
    raise InvalidDataError(
        "the supplied values cannot be put back as YAML scalars of the same type",
        hint="check the values given for " + ", ".join(wanted),
    )
