"""What a plain-text secret looks like: one value, judged with the name it sits under.

:func:`classify` says why a value is a secret (a short kind, never the value):

- any value under a secret-looking name (``apiKey``, ``api_key``, ``token``,
  ``botToken``, ``password``, ``secret``, ``signingSecret``, ``privateKey``,
  ..., and the words ``pass`` and ``pwd``: ``DB_PASS``, ``userPwd``, but not
  ``bypass``, nor a path under ``PWD``);
- long high-entropy values under names that merely might hold one (``key``,
  ``auth``, ``credentials``, ``cookie``);
- values shaped like known credentials wherever they are (:data:`_PATTERN_SOURCES`:
  Anthropic, OpenAI and other AI providers, GitHub, GitLab, Hugging Face, npm,
  PyPI, Slack, Discord and Teams webhooks, SendGrid, Vault, Google OAuth,
  AWS, Azure, Stripe, Notion, PEM private keys, JWTs, ``NAME=value``
  settings, URLs with a password or a random ``?key=``);
- values that encode one of these: base64 text (``!!binary`` or a plain
  string) is decoded and JSON or YAML text is parsed, and what they hold is
  judged the same way, at most :data:`_MAX_DEPTH` levels deep.

``secret:`` references, ``${ENV}`` references, empty values and ``<...>``
placeholders are never secrets.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from triggerfish_cli.config.yaml_paths import compose, scalar_reader, walk_scalars

MARKER = "<redacted>"

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
#: Last words of a key name (``DB_PASS``, ``userPwd``) whose value is a password.
_PASSWORD_WORDS = ("pass", "pwd")
#: Key names that may hold a secret: flagged when the value is long and random.
_WEAK_SUFFIXES = ("key", "auth", "authorization", "credential", "credentials", "cookie")
_WEAK_EXCEPTIONS = ("publickey",)
#: Words that make any key name secret-sounding (``clientSecretRef``, ``signingValue``):
#: a long random value under one is flagged.
_SOUNDING = ("secret", "token", "password", "passwd", "credential", "apikey", "privatekey",
             "signing", "auth", "accesskey")  # fmt: skip
#: Numbers are flagged only under these (numeric passwords exist; numeric tokens not).
_NUMERIC_SUFFIXES = ("password", "passwd", "passphrase")

#: Credential formats: (what it is, text every match contains, regular expression).
#: A pattern runs only on a text that holds one of its hints (``in`` is ~100x faster
#: than a regular expression that cannot start from a literal).
_PATTERN_SOURCES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("PEM private key", ("-----BEGIN",), r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    ("Anthropic API key", ("sk-ant-",), r"sk-ant-[A-Za-z0-9_\-]{16,}"),
    (
        "API key (sk-...)",
        ("sk-",),
        r"(?<![A-Za-z0-9_\-])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    ),
    (
        "AI provider key",
        ("gsk_", "xai-", "pplx-", "r8_", "tvly-"),
        r"(?<![A-Za-z0-9_\-])(?:gsk_[A-Za-z0-9]{40,}|xai-[A-Za-z0-9]{40,}|"
        r"pplx-[A-Za-z0-9]{40,}|r8_[A-Za-z0-9]{30,}|tvly-(?:dev-|prod-)?[A-Za-z0-9]{24,})",
    ),
    (
        "GitHub token",
        ("gh", "github_pat_"),
        r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{20,})",
    ),
    (
        "GitLab token",
        ("gl", "GR1348941"),
        r"(?<![A-Za-z0-9_\-])(?:gl(?:pat|dt|rt|cbt|ptt|oas|soat|ffct|imt|agent|ft|wt)-"
        r"[A-Za-z0-9_\-.]{20,}|GR1348941[A-Za-z0-9_\-]{20,})",
    ),
    (
        "Hugging Face token",
        ("hf_", "api_"),
        r"(?<![A-Za-z0-9_])(?:hf_|api_org_|api_)[A-Za-z0-9]{30,}",
    ),
    ("npm token", ("npm_",), r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
    ("PyPI token", ("pypi-",), r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{40,}"),
    (
        "Slack token",
        ("xox", "xapp-"),
        r"(?<![A-Za-z0-9])(?:(?:xox[abposre]|xoxe\.xox[bp])-[A-Za-z0-9\-]{10,}|"
        r"xapp-\d-[A-Za-z0-9\-]{10,})",
    ),
    (
        "SendGrid key",
        ("SG.",),
        r"(?<![A-Za-z0-9_\-.])SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64}",
    ),
    (
        "Vault token",
        ("hvs.", "hvb.", "hvr.", "s.", "b.", "r."),
        r"(?<![A-Za-z0-9_\-.])(?:hv[sbr]\.[A-Za-z0-9_\-]{24,}|"
        r"[sbr]\.[A-Za-z0-9]{24}(?![A-Za-z0-9_\-.]))",
    ),
    (
        "Google OAuth token",
        ("1//0", "ya29."),
        r"(?<![A-Za-z0-9_\-/])(?:1//0|ya29\.)[A-Za-z0-9_\-]{30,}",
    ),
    (
        "AWS access key id",
        ("AKIA", "ASIA"),
        r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])",
    ),
    ("Google API key", ("AIza",), r"AIza[0-9A-Za-z_\-]{35}"),
    (
        "Stripe key",
        ("k_live_", "k_test_", "whsec_"),
        r"(?<![A-Za-z0-9])(?:[sr]k_(?:live|test)_[0-9A-Za-z]{16,}|whsec_[A-Za-z0-9]{24,})",
    ),
    (
        "Notion token",
        ("secret_", "ntn_"),
        r"(?<![A-Za-z0-9_])(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{40,})(?![A-Za-z0-9])",
    ),
    (
        "Telegram bot token",
        (":",),
        r"(?<![A-Za-z0-9_\-:])\d{6,12}:[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-])",
    ),
    (
        "Telegram bot token",
        ("api.telegram.org/",),
        r"api\.telegram\.org/(?:file/)?bot\d{6,12}:[A-Za-z0-9_\-]{35}",
    ),
    (
        "JSON web token",
        ("eyJ",),
        r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    ),
    ("bearer credential", ("Bearer", "Basic"), r"\b(?:Bearer|Basic)\s+[A-Za-z0-9._~+/=\-]{16,}"),
    (
        "Discord bot token",
        (".",),
        r"(?<![A-Za-z0-9_\-])[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,}",
    ),
    (
        "URL with an inline password",
        ("@",),
        r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@'\"]*:(?!\$\{)[^\s/@'\"]+@",
    ),
    # NAME=value with a secret-sounding NAME: env items (AWS_SECRET_ACCESS_KEY=...),
    # libpq DSNs (host=db password=...), connection strings (Password=...;,
    # AccountKey=...;), URL queries (?password=...), arguments (--token=...).
    (
        "secret in a NAME=value setting",
        ("=",),
        r"(?i)(?<![A-Za-z0-9_.\-])(?:--?)?(?P<name>[A-Za-z0-9_.\-]*(?:password|passwd|pwd|"
        r"passphrase|secret|token|api[_\-]?key|access[_\-]?key|secret[_\-]?key|"
        r"private[_\-]?key|account[_\-]?key|credentials?))[ \t]*=[ \t]*"
        r"(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s;&'\",\]\}]+)",
    ),
    ("Azure SAS signature", ("sig=",), r"[?&]sig=[A-Za-z0-9%+/=]{16,}"),
    # ?key=..., &signature=..., ?auth=... with a random value (Google APIs, signed URLs).
    (
        "secret in a URL query",
        ("=",),
        r"[?&](?P<name>[A-Za-z0-9_.\-]*(?i:key|sig|signature|auth|hmac))=(?P<value>[^&#\s'\"]+)",
    ),
    (
        "AWS secret access key",
        (),
        r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
    ),
    ("Google OAuth client secret", ("GOCSPX-",), r"GOCSPX-[A-Za-z0-9_\-]{24,}"),
    (
        "Azure client secret",
        ("Q~",),
        r"(?<![A-Za-z0-9_~.\-])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}(?![A-Za-z0-9_~.\-])",
    ),
    (
        "Slack webhook URL",
        ("hooks.slack.com/",),
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
    ),
    (
        "Discord webhook URL",
        ("/webhooks/",),
        r"https?://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api(?:/v\d+)?/webhooks/"
        r"\d{5,}/[A-Za-z0-9_\-]{20,}",
    ),
    (
        "Microsoft Teams webhook URL",
        (".webhook.office.com/",),
        r"https://[A-Za-z0-9.\-]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/.\-]{20,}",
    ),
)


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _setting_is_secret(match: re.Match[str]) -> bool:
    """``NAME=value``: a value, not a reference, not a bare number under a non-password."""
    value = _unquoted(match.group("value"))
    if is_reference(value) or value.startswith("$"):
        return False
    name = normalise_key(match.group("name"))
    if value.isdigit():
        return name.endswith((*_NUMERIC_SUFFIXES, "pwd"))
    return not (name.endswith("pwd") and _directory(value))


def _query_is_secret(match: re.Match[str]) -> bool:
    """``?key=...``: a random value (``?key=name`` or ``?sig=1`` is no secret)."""
    value = match.group("value")
    return not is_reference(value) and looks_random(value, minimum=16)


def _mixed_case(match: re.Match[str]) -> bool:
    """Letters of both cases after the prefix (``api_`` + a lower-case word is no token)."""
    tail = match.group(0).split("_", 1)[-1].split(".", 1)[-1]
    return tail.lower() != tail and tail.upper() != tail


def _vault_shaped(match: re.Match[str]) -> bool:
    """``hvs.``: always; the legacy ``s.`` + 24: upper, lower and digits."""
    text = match.group(0)
    return text.startswith("hv") or (_mixed_case(match) and any(c.isdigit() for c in text))


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
    "secret in a URL query": _query_is_secret,
    "Hugging Face token": _mixed_case,
    "Vault token": _vault_shaped,
    "AWS secret access key": _aws_secret_shaped,
}


@functools.lru_cache(maxsize=1)
def _patterns() -> tuple[tuple[str, frozenset[str], re.Pattern[str]], ...]:
    return tuple(
        (kind, frozenset(hints), re.compile(source)) for kind, hints, source in _PATTERN_SOURCES
    )


@functools.lru_cache(maxsize=1)
def _hints() -> frozenset[str]:
    return frozenset(hint for _kind, hints, _source in _PATTERN_SOURCES for hint in hints)


def matches(text: str) -> Iterator[tuple[str, re.Match[str]]]:
    """Every credential in ``text``: (what it is, where), pattern by pattern."""
    present = {hint for hint in _hints() if hint in text}
    for kind, hints, pattern in _patterns():
        if hints and present.isdisjoint(hints):
            continue
        check = _VALIDATORS.get(kind)
        for match in pattern.finditer(text):
            if check is None or check(match):
                yield kind, match


_ENV_REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
_PLACEHOLDER = re.compile(r"^(?:<[^<>]*>|\*+|x+|\.\.\.)$", re.IGNORECASE)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


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
    return next((kind for kind, _match in matches(value)), None)


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _is_path(text: str) -> bool:
    return text.startswith(("/", "~", "./", "../")) or bool(re.match(r"[A-Za-z]:[\\/]", text))


def _directory(value: str) -> bool:
    """``PWD`` is also the working directory: ``/srv/app``, ``.``, ``$HOME``."""
    return _is_path(value) or value in (".", "..") or value.startswith("$")


def looks_random(text: str, minimum: int = 20) -> bool:
    if len(text) < minimum or any(c.isspace() for c in text) or _is_path(text):
        return False
    if "://" in text:
        return False
    mixed = any(c.isdigit() for c in text) or (text.lower() != text and text.upper() != text)
    return mixed and _entropy(text) >= 3.5


def _password_word(key: str | None) -> bool:
    """``pass`` or ``pwd`` as the last word of the key name (``DB_PASS``, ``dbPwd``)."""
    words = _WORD.findall(key) if key else []
    return bool(words) and words[-1].lower() in _PASSWORD_WORDS


def _name_kind(key: str | None, name: str, value: str) -> str | None:
    """Why ``value`` is a secret by the name it sits under, or ``None``."""
    if name.endswith(_STRONG_SUFFIXES):
        return "key name"
    if _password_word(key) and not _directory(value):
        return "key name"
    if name.endswith(_WEAK_EXCEPTIONS):
        return None
    if name.endswith(_WEAK_SUFFIXES) or any(word in name for word in _SOUNDING):
        return "random value under a key name" if looks_random(value) else None
    return None


def classify(key: str | None, value: Any, *, depth: int = 0) -> str | None:
    """Why ``value`` under ``key`` is a secret (a short reason), or ``None``."""
    if value is None or isinstance(value, bool):
        return None
    name = normalise_key(key) if key is not None else ""
    if isinstance(value, bytes):  # !!binary
        return _bytes_kind(key, name, value, depth)
    if isinstance(value, (int, float)):
        numeric = name.endswith(_NUMERIC_SUFFIXES) or _password_word(key)
        return "key name" if numeric else None
    if not isinstance(value, str) or is_reference(value):
        return None
    return pattern_kind(value) or _name_kind(key, name, value) or _nested_kind(value, depth)


# -- values that hold other values: base64, JSON, YAML --------------------------------

#: How many encodings deep a secret is looked for (base64 of JSON holding base64: 3).
_MAX_DEPTH = 3
#: Longest value decoded or parsed (longer ones are judged as they are).
_MAX_NESTED = 64 * 1024
_BASE64 = re.compile(r"[A-Za-z0-9+/_\-]{16,}={0,2}")


def printable_text(data: bytes) -> str | None:
    """``data`` as text when it is UTF-8 and printable (else it is binary data)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.strip() and all(c.isprintable() or c in "\n\r\t" for c in text):
        return text
    return None


def decoded_text(value: str) -> str | None:
    """The text that ``value`` encodes in base64 (standard or URL-safe), or ``None``."""
    if len(value) < 16:
        return None
    compact = "".join(value.split())
    if len(compact) > _MAX_NESTED or not _BASE64.fullmatch(compact):
        return None
    standard = compact.replace("-", "+").replace("_", "/")
    try:
        data = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return printable_text(data)


def _bytes_kind(key: str | None, name: str, data: bytes, depth: int) -> str | None:
    text = printable_text(data)
    if text is None:  # binary data: a secret only under a secret's name
        return "key name" if data and _name_kind(key, name, "binary") == "key name" else None
    kind = classify(key, text, depth=depth + 1) or _nested_kind(text, depth + 1, decoded=True)
    return None if kind is None else f"{kind} (base64)"


def _nested_kind(value: str, depth: int, *, decoded: bool = False) -> str | None:
    """What a base64 value, a JSON value or a decoded text holds (judged again), or ``None``."""
    if depth >= _MAX_DEPTH or len(value) > _MAX_NESTED:
        return None
    text = decoded_text(value)
    if text is not None:
        inner = pattern_kind(text) or _nested_kind(text, depth + 1, decoded=True)
        return None if inner is None else f"{inner} (base64)"
    if decoded or value.lstrip()[:1] in ("{", "["):
        return _document_kind(value, depth + 1)
    return None


def _document_kind(text: str, depth: int) -> str | None:
    """The first secret in a JSON or YAML document held in a value (not one: ``None``)."""
    # lazy: yaml (+20 modules, ~30 ms) only where YAML is parsed (TID253)
    import yaml

    try:
        root = compose(text)
    except yaml.YAMLError:
        return None
    if not isinstance(root, (yaml.MappingNode, yaml.SequenceNode)):
        return None
    read = scalar_reader()
    for _parts, key, node in walk_scalars(root):
        kind = classify(key, read(node), depth=depth)
        if kind is not None:
            return kind
    return None
