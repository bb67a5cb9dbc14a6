"""Plain-text secrets in ``triggerfish.yaml``: find them (:mod:`redaction` masks them
and puts them back).

The design forbids secrets in config files and in the store; Triggerfish
keeps them in the OS keychain and the YAML holds references such as
``secret:provider:anthropic:apiKey``. Before a config version is stored, the
text is scanned for values that look like secrets anyway:

- any value under a secret-looking key (``apiKey``, ``api_key``, ``token``,
  ``botToken``, ``password``, ``secret``, ``signingSecret``, ``privateKey``,
  ...), whatever it looks like;
- long high-entropy values under keys that merely might hold one (``key``,
  ``auth``, ``credentials``, ``cookie``);
- values shaped like known credentials wherever they are (``sk-ant-...``,
  ``sk-...``, ``ghp_...``, ``xoxb-...``, ``AKIA...``, PEM private keys,
  Telegram bot tokens, JWTs, ``Bearer ...``, URLs with an inline password),
  including inside comments.

``secret:`` references, ``${ENV}`` references, empty values and ``<...>``
placeholders are never secrets. A finding names a dotted path (or a line for
a comment), never the value.

:func:`redaction.redact` replaces each finding in the *text* (so comments and layout
survive) by the marker ``"<redacted>"``, then parses the result and checks
that exactly the flagged values changed. :func:`redaction.restore` puts operator-given
values back in place of the markers, in the original quoting style, so a
version redacted and restored with the same values is byte-identical for
plain, single- and double-quoted scalars.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from triggerfish_cli.config.yaml_paths import (
    compose,
    render_path,
    scalar_reader,
    walk_scalars,
)

MARKER = "<redacted>"
MARKER_TEXT = '"<redacted>"'

# -- what a secret looks like ---------------------------------------------------

#: Key names (lower case, without ``_``, ``-``, ``.``) whose value is always a secret.
_STRONG_SUFFIXES = (
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "privatekey",
    "secretkey",
    "secretaccesskey",
)
#: Key names that may hold a secret: flagged when the value is long and random.
_WEAK_SUFFIXES = ("key", "auth", "authorization", "credential", "credentials", "cookie")
_WEAK_EXCEPTIONS = ("publickey",)
#: Words that make any key name secret-sounding (``clientSecretRef``, ``signingValue``):
#: a long random value under one is flagged.
_SOUNDING = ("secret", "token", "password", "passwd", "credential", "apikey", "privatekey",
             "signing", "auth", "accesskey")  # fmt: skip
#: Numbers are flagged only under these (numeric passwords exist; numeric tokens not).
_NUMERIC_SUFFIXES = ("password", "passwd", "passphrase")

#: Credential formats: (what it is, regular expression), compiled on first use.
_PATTERN_SOURCES: tuple[tuple[str, str], ...] = (
    ("PEM private key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    ("Anthropic API key", r"sk-ant-[A-Za-z0-9_\-]{16,}"),
    (
        "API key (sk-...)",
        r"(?<![A-Za-z0-9_\-])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    ),
    ("GitHub token", r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{20,})"),
    (
        "Slack token",
        r"(?<![A-Za-z0-9])(?:xox[abposr]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})",
    ),
    ("AWS access key id", r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"),
    ("Google API key", r"AIza[0-9A-Za-z_\-]{35}"),
    ("Stripe key", r"(?<![A-Za-z0-9])[sr]k_(?:live|test)_[0-9A-Za-z]{16,}"),
    (
        "Telegram bot token",
        r"(?<![A-Za-z0-9_\-:])\d{6,12}:[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-])",
    ),
    ("JSON web token", r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("bearer credential", r"\b(?:Bearer|Basic)\s+[A-Za-z0-9._~+/=\-]{16,}"),
    (
        "Discord bot token",
        r"(?<![A-Za-z0-9_\-])[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,}",
    ),
    (
        "URL with an inline password",
        r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@'\"]*:(?!\$\{)[^\s/@'\"]+@",
    ),
    # NAME=value with a secret-sounding NAME: env items (AWS_SECRET_ACCESS_KEY=...),
    # libpq DSNs (host=db password=...), connection strings (Password=...;,
    # AccountKey=...;), URL queries (?password=...), arguments (--token=...).
    (
        "secret in a NAME=value setting",
        r"(?i)(?<![A-Za-z0-9_.\-])(?:--?)?(?P<name>[A-Za-z0-9_.\-]*(?:password|passwd|pwd|"
        r"passphrase|secret|token|api[_\-]?key|access[_\-]?key|secret[_\-]?key|"
        r"private[_\-]?key|account[_\-]?key|credentials?))[ \t]*=[ \t]*"
        r"(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s;&'\",\]\}]+)",
    ),
    ("Azure SAS signature", r"[?&]sig=[A-Za-z0-9%+/=]{16,}"),
    ("AWS secret access key", r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
    ("Google OAuth client secret", r"GOCSPX-[A-Za-z0-9_\-]{24,}"),
    (
        "Azure client secret",
        r"(?<![A-Za-z0-9_~.\-])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}(?![A-Za-z0-9_~.\-])",
    ),
    (
        "Slack webhook URL",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
    ),
)


def _setting_is_secret(match: re.Match[str]) -> bool:
    """``NAME=value``: a value, not a reference, not a bare number under a non-password."""
    value = match.group("value")
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    if is_reference(value) or value.startswith("$"):
        return False
    if value.isdigit():
        return normalise_key(match.group("name")).endswith((*_NUMERIC_SUFFIXES, "pwd"))
    return True


def _aws_secret_shaped(match: re.Match[str]) -> bool:
    """40 characters of base64 with upper, lower and digits, random, not a path."""
    text = match.group(0)
    return (
        any(c.isupper() for c in text)
        and any(c.islower() for c in text)
        and any(c.isdigit() for c in text)
        and text.count("/") <= 3
        and _entropy(text) >= 4.0
    )


#: Checks a match must pass to count (the regular expression alone is too broad).
_VALIDATORS: dict[str, Callable[[re.Match[str]], bool]] = {
    "secret in a NAME=value setting": _setting_is_secret,
    "AWS secret access key": _aws_secret_shaped,
}


def _found(kind: str, pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """The matches of one credential pattern in ``text`` that pass its check."""
    check = _VALIDATORS.get(kind)
    for match in pattern.finditer(text):
        if check is None or check(match):
            yield match


@functools.lru_cache(maxsize=1)
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((kind, re.compile(source)) for kind, source in _PATTERN_SOURCES)


_ENV_REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
_PLACEHOLDER = re.compile(r"^(?:<[^<>]*>|\*+|x+|\.\.\.)$", re.IGNORECASE)

#: ``key: value`` on one line, optionally commented out or a list item.
_LINE_KEY = re.compile(
    r"^(?P<lead>[ \t]*(?:#[ \t]*)?(?:-[ \t]+)?)(?P<q>[\"']?)(?P<key>[A-Za-z0-9_.\-]+)(?P=q)"
    r"[ \t]*:[ \t]+(?P<value>.*?)[ \t]*$"
)


def normalise_key(key: str) -> str:
    return re.sub(r"[_\-.\s]", "", key).lower()


def is_reference(value: str) -> bool:
    """A value that names where a secret lives rather than holding it."""
    text = value.strip()
    return (
        not text
        or text.startswith("secret:")
        or text == MARKER
        or bool(_ENV_REFERENCE.match(text))
        or bool(_PLACEHOLDER.match(text))
    )


def pattern_kind(value: str) -> str | None:
    """What known credential format ``value`` contains, if any."""
    for kind, pattern in _patterns():
        if next(_found(kind, pattern, value), None) is not None:
            return kind
    return None


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _looks_random(text: str) -> bool:
    if len(text) < 20 or any(c.isspace() for c in text) or text.startswith(("/", "~", "./")):
        return False
    if "://" in text:
        return False
    mixed = any(c.isdigit() for c in text) or (text.lower() != text and text.upper() != text)
    return mixed and _entropy(text) >= 3.5


def classify(key: str | None, value: Any) -> str | None:
    """Why ``value`` under ``key`` is a secret (a short reason), or ``None``."""
    if value is None or isinstance(value, bool):
        return None
    name = normalise_key(key) if key is not None else ""
    if isinstance(value, (int, float)):
        return "key name" if name.endswith(_NUMERIC_SUFFIXES) else None
    if not isinstance(value, str) or is_reference(value):
        return None
    kind = pattern_kind(value)
    if kind is not None:
        return kind
    if name.endswith(_STRONG_SUFFIXES):
        return "key name"
    if name.endswith(_WEAK_EXCEPTIONS):
        return None
    if name.endswith(_WEAK_SUFFIXES) or any(word in name for word in _SOUNDING):
        return "random value under a key name" if _looks_random(value) else None
    return None


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
    """The text span of a scalar's value (its anchor and tag excluded) and its replacement."""
    start, end = node.start_mark.index, node.end_mark.index
    while start < end and text[start] in "&!":
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
    for kind, pattern in _patterns():
        for match in _found(kind, pattern, text):
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
                and _looks_random(value)
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
    for kind, pattern in _patterns():
        for match in _found(kind, pattern, text):
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
