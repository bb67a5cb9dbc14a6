"""Comparing and checking config texts: unified diffs, changed keys, validation.

Texts shown here are masked first (``redaction.display_mask``): a diff
never prints a plain-text secret, and a version stored with redacted values
compares equal to the file it came from.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerfish_cli.config import secrets_guard, yaml_paths
from triggerfish_cli.errors import InvalidDataError
from triggerfish_cli.settings import OUR_SECTIONS, parse_yaml_mapping

#: Top-level sections of the gateway's own config type (``TriggerFishConfig``
#: in its ``src/core/config_types.ts``, UPSTREAM.md), in its order. A file
#: using any of them must validate without a warning.
GATEWAY_SECTIONS = (
    "models",
    "channels",
    "classification",
    "web",
    "google",
    "github",
    "notion",
    "x",
    "caldav",
    "scheduler",
    "plugins",
    "secrets",
    "filesystem",
    "tools",
    "mcp_servers",
    "mcp",
    "logging",
    "daemon",
    "debug",
)

#: Sections Triggerfish's documentation names that today's config type does
#: not read: known (a file written from the documentation gets no warning).
DOCUMENTED_SECTIONS = (
    "policy",
    "notifications",
    "agents",
    "voice",
    "webhooks",
    "groups",
    "remote",
    "skills",
    "workspace",
    "security",
)
# Any other section is a warning (the gateway may have grown one), never an error.


def known_sections() -> tuple[str, ...]:
    return (*GATEWAY_SECTIONS, *DOCUMENTED_SECTIONS, *OUR_SECTIONS)


# -- diffs ------------------------------------------------------------------------


def unified(a: str, b: str, a_label: str, b_label: str, context: int = 3) -> str:
    """A unified diff of two texts ('' when equal), marking a missing final newline."""
    a_lines = _lines(a)
    b_lines = _lines(b)
    return "".join(
        difflib.unified_diff(a_lines, b_lines, fromfile=a_label, tofile=b_label, n=context)
    )


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def changes(a: str, b: str, a_label: str, b_label: str) -> list[dict[str, Any]]:
    """Changed keys as dotted paths: ``{"path", "change", "old", "new"}``, in document order.

    ``change`` is ``changed``, ``added`` or ``removed`` (``old``/``new`` is
    null for the side that lacks the key). Leaves are compared: a section
    turned from a mapping into a scalar shows its old keys removed and the
    scalar added.
    """
    before = _leaves(a, a_label)
    after = _leaves(b, b_label)
    rows: list[dict[str, Any]] = []
    for path, old in before.items():
        if path not in after:
            rows.append({"path": path, "change": "removed", "old": old, "new": None})
        elif after[path] != old or type(after[path]) is not type(old):
            rows.append({"path": path, "change": "changed", "old": old, "new": after[path]})
    for path, new in after.items():
        if path not in before:
            rows.append({"path": path, "change": "added", "old": None, "new": new})
    return rows


def _leaves(text: str, label: str) -> dict[str, Any]:
    try:
        document = parse_yaml_mapping(text, label)
    except InvalidDataError as exc:
        raise InvalidDataError(
            f"{exc.message}; cannot list changed keys",
            hint="the text diff (without --format json) still works",
        ) from None
    return {path: _jsonable(value) for path, value in yaml_paths.leaves(document).items()}


def _jsonable(value: Any) -> Any:
    """YAML scalars that JSON lacks (dates, binary) as strings."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (dict, list)):
        return value  # empty containers only (leaves)
    return str(value)


# -- validation ---------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    severity: str  # error | warning
    message: str
    line: int | None = None
    column: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "line": self.line,
            "column": self.column,
            "message": self.message,
        }

    def __str__(self) -> str:
        where = ""
        if self.line is not None:
            where = f"line {self.line}" + (f", column {self.column}" if self.column else "") + ": "
        return where + self.message


@dataclass
class Report:
    origin: str
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def valid(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.origin,
            "valid": self.valid,
            "errors": [p.as_dict() for p in self.errors],
            "warnings": [p.as_dict() for p in self.warnings],
        }


def validate_text(text: str, origin: str, config_path: Path, *, secrets: bool = True) -> Report:
    """Check a config text: YAML syntax (line and column), duplicate keys, known
    top-level sections, our own sections strictly (``settings.OUR_SECTIONS``),
    and plain-text secrets (warnings: the gateway accepts them, the design does not).
    """
    # lazy: yaml (+20 modules, ~30 ms) only where YAML is parsed (TID253)
    import yaml

    report = Report(origin)
    try:
        root = yaml_paths.compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        report.problems.append(
            Problem(
                "error",
                f"invalid YAML: {exc.problem or exc.context}",
                mark.line + 1 if mark else None,
                mark.column + 1 if mark else None,
            )
        )
        return report
    except yaml.YAMLError as exc:
        report.problems.append(Problem("error", f"invalid YAML: {_first_line(exc)}"))
        return report
    if root is None:
        report.problems.append(Problem("warning", "the file is empty"))
        return report
    if not isinstance(root, yaml.MappingNode):
        report.problems.append(
            Problem(
                "error", "the top level must be a mapping of sections", root.start_mark.line + 1
            )
        )
        return report
    _duplicates(root, report, set())
    if report.errors:
        return report
    try:
        document = yaml_paths.load(text)
    except yaml.YAMLError as exc:  # composed fine, but a value cannot be built
        report.problems.append(Problem("error", f"invalid value: {_first_line(exc)}"))
        return report
    known = known_sections()
    for key_node, _value in root.value:
        name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
        if name not in known:
            report.problems.append(
                Problem(
                    "warning",
                    f"unknown top-level section {name!r} (known: {', '.join(sorted(known))})",
                    key_node.start_mark.line + 1,
                    key_node.start_mark.column + 1,
                )
            )
    if "models" not in document:
        report.problems.append(Problem("warning", "no models: section (the gateway needs one)"))
    lines = {
        key_node.value: key_node.start_mark.line + 1
        for key_node, _ in root.value
        if isinstance(key_node, yaml.ScalarNode)
    }
    for name, target in OUR_SECTIONS.items():
        if name not in document:
            continue
        module, _, function = target.partition(":")
        try:
            getattr(importlib.import_module(module), function)(document[name], config_path)
        except InvalidDataError as exc:
            report.problems.append(
                Problem("error", _strip_origin(exc, config_path), lines.get(name))
            )
    for finding in secrets_guard.scan(text).findings if secrets else []:
        report.problems.append(
            Problem(
                "warning",
                f"plain-text secret at {finding.describe()} ({finding.kind}); "
                "use a secret: reference",
                finding.line,
            )
        )
    report.problems.sort(key=lambda p: (p.severity != "error", p.line or 0))
    return report


def _duplicates(node: Any, report: Report, visited: set[int]) -> None:
    """Duplicate keys: PyYAML keeps the last silently, the gateway's parser refuses them."""
    # lazy: yaml only where YAML is parsed (TID253)
    import yaml

    if id(node) in visited:  # an alias: checked where it was anchored
        return
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
                line = key_node.start_mark.line + 1
                if key_node.value in seen:
                    report.problems.append(
                        Problem(
                            "error",
                            f"duplicate key {key_node.value!r} (first at line "
                            f"{seen[key_node.value]})",
                            line,
                            key_node.start_mark.column + 1,
                        )
                    )
                else:
                    seen[key_node.value] = line
            _duplicates(value_node, report, visited)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _duplicates(item, report, visited)


def _strip_origin(exc: InvalidDataError, config_path: Path) -> str:
    message = str(exc)
    prefix = f"{config_path}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def check_writable(text: str, config_path: Path, origin: str) -> Report:
    """Validate a text about to be written; errors raise InvalidDataError (exit 8)."""
    report = validate_text(text, origin, config_path, secrets=False)
    if report.errors:
        first = report.errors[0]
        more = f" (and {len(report.errors) - 1} more)" if len(report.errors) > 1 else ""
        raise InvalidDataError(
            f"{origin} is not a valid config, refusing to write it: {first}{more}",
            hint=f"see `config show {origin}`",
        )
    return report
