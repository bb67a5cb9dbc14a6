"""The secrets guard: what counts as a plain-text secret, masking, and putting values back."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from triggerfish_cli.config import redaction, yaml_paths
from triggerfish_cli.config import secrets_guard as guard
from triggerfish_cli.errors import InvalidDataError, RefusedError

# Credential-shaped values (fake, but in the real formats).
ANTHROPIC = "sk-ant-api03-Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aS"
OPENAI = "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
GITHUB = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
SLACK = "xoxb-2401234567-4012345678901-AbCdEfGhIjKlMnOpQrStUvWx"
AWS = "AKIAIOSFODNN7EXAMPLE"
TELEGRAM = "7890123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----\n"


def paths(text: str) -> list[str]:
    return [finding.describe() for finding in guard.scan(text).findings]


@pytest.mark.parametrize(
    ("key", "value", "kind"),
    [
        ("apiKey", ANTHROPIC, "Anthropic API key"),
        ("model", ANTHROPIC, "Anthropic API key"),  # the shape counts wherever it is
        ("apiKey", OPENAI, "API key (sk-...)"),
        ("GITHUB_TOKEN", GITHUB, "GitHub token"),
        ("botToken", SLACK, "Slack token"),
        ("id", AWS, "AWS access key id"),
        ("botToken", TELEGRAM, "Telegram bot token"),
        ("note", "Bearer abcdefghijklmnopqrstuvwxyz", "bearer credential"),
        ("dsn", "postgres://admin:hunter2@db.internal:5432/tf", "URL with an inline password"),
        ("smtpPassword", "hunter2", "key name"),
        ("password", 123456, "key name"),
        ("api_key", "short", "key name"),
        ("signingSecret", "8f14e45fceea167a5a36dedd4bea2543", "key name"),
        ("webhookVerifyToken", "any words at all", "key name"),
        ("encryptionKey", "q9Zr4Lm2Xv8Tn6Bw1Kc5Hd7Jf3", "random value under a key name"),
    ],
)
def test_secrets_are_found(key: str, value: object, kind: str) -> None:
    assert guard.classify(key, value) == kind


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("apiKey", "secret:provider:anthropic:apiKey"),
        ("botToken", "${TELEGRAM_BOT_TOKEN}"),
        ("apiKey", ""),
        ("apiKey", "<your-api-key>"),
        ("apiKey", None),
        ("maxTokens", 4096),
        ("token", 4096),  # numbers are secrets only under password-like keys
        ("secret", True),
        ("tokenizer", "porter"),
        ("publicKey", "q9Zr4Lm2Xv8Tn6Bw1Kc5Hd7Jf3"),
        ("key", "claude sonnet"),  # not random
        ("keyFile", "/etc/ssl/private/key.pem"),
        ("endpoint", "http://localhost:11434"),
        ("url", "https://user@host.example/path"),
        ("dsn", "postgres://admin:${PGPASSWORD}@db/tf"),
        ("apiKey", guard.MARKER),
    ],
)
def test_non_secrets_are_left_alone(key: str, value: object) -> None:
    assert guard.classify(key, value) is None


GATEWAY_CONFIG = f"""\
# triggerfish.yaml
models:
  primary:
    provider: anthropic
    model: claude-sonnet-4-5
  providers:
    anthropic:
      apiKey: "secret:provider:anthropic:apiKey"
    openai:
      apiKey: {OPENAI}
channels:
  telegram:
    botToken: '{TELEGRAM}'
    ownerId: 123456789
  email:
    smtpPassword: "hunter 2"
mcp_servers:
  github:
    command: npx
    env:
      GITHUB_TOKEN: {GITHUB}
# previous key: {ANTHROPIC}
#   password: oldpass
# token: put your bot token here
tls:
  privateKey: |
{"".join("    " + line + chr(10) for line in PEM.splitlines())}  maxTokens: 4096
"""


def test_scan_names_paths_and_lines_never_values() -> None:
    found = guard.scan(GATEWAY_CONFIG).findings
    assert [(f.describe(), f.line) for f in found] == [
        ("models.providers.openai.apiKey", 10),
        ("channels.telegram.botToken", 13),
        ("channels.email.smtpPassword", 16),
        ("mcp_servers.github.env.GITHUB_TOKEN", 21),
        ("line 22 (comment)", 22),
        ("line 23 (comment)", 23),
        ("tls.privateKey", 26),
    ]
    rendered = repr(found)
    for secret in (OPENAI, TELEGRAM, "hunter 2", GITHUB, ANTHROPIC, "oldpass", "MIIEow"):
        assert secret not in rendered


def test_redact_masks_exactly_the_secrets_and_keeps_the_rest() -> None:
    masked, findings = redaction.redact(GATEWAY_CONFIG)
    for secret in (OPENAI, TELEGRAM, "hunter 2", GITHUB, ANTHROPIC, "oldpass", "MIIEow"):
        assert secret not in masked
    assert "# triggerfish.yaml\n" in masked and "# token: put your bot token here\n" in masked
    before = yaml_paths.leaves(yaml.safe_load(GATEWAY_CONFIG))
    after = yaml_paths.leaves(yaml.safe_load(masked))
    flagged = {f.path for f in findings if f.where == "value"}
    assert set(before) == set(after)
    for path, value in before.items():
        assert after[path] == (guard.MARKER if path in flagged else value)
    assert guard.scan(masked).findings == []


def test_restore_is_byte_identical_with_the_same_values() -> None:
    masked, findings = redaction.redact(GATEWAY_CONFIG)
    values = yaml_paths.leaves(yaml.safe_load(GATEWAY_CONFIG))
    restored = redaction.restore(masked, [f.as_record() for f in findings], values)
    # Comments keep their marker: only values are put back.
    expected = GATEWAY_CONFIG.replace(ANTHROPIC, guard.MARKER).replace("oldpass", guard.MARKER)
    assert restored == expected


def test_restore_falls_back_to_quoting_when_the_style_cannot_hold_the_value() -> None:
    masked, findings = redaction.redact("a:\n  password: hunter2\n")
    value = "x: y # not a comment"  # as a plain scalar this would change meaning
    restored = redaction.restore(masked, [f.as_record() for f in findings], {"a.password": value})
    assert yaml.safe_load(restored) == {"a": {"password": value}}
    assert restored == 'a:\n  password: "x: y # not a comment"\n'


def test_restore_keeps_numbers_numbers() -> None:
    text = "db:\n  password: 123456\n"
    masked, findings = redaction.redact(text)
    assert (
        redaction.restore(masked, [f.as_record() for f in findings], {"db.password": 123456})
        == text
    )


def test_restore_refuses_missing_values_and_damaged_markers() -> None:
    masked, findings = redaction.redact("a:\n  token: abc\n")
    records = [f.as_record() for f in findings]
    with pytest.raises(RefusedError, match=r"a\.token"):
        redaction.restore(masked, records, {})
    with pytest.raises(InvalidDataError, match="no redaction marker"):
        redaction.restore("a:\n  token: edited\n", records, {"a.token": "abc"})


def test_anchors_and_aliases_are_masked_once_and_named_everywhere() -> None:
    text = "a:\n  apiKey: &k sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2\nb:\n  copy: *k\n"
    masked, findings = redaction.redact(text)
    assert masked == 'a:\n  apiKey: &k "<redacted>"\nb:\n  copy: *k\n'
    assert {f.path for f in findings} == {"a.apiKey", "b.copy"}
    values = {
        "a.apiKey": "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2",
        "b.copy": "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2",
    }
    assert redaction.restore(masked, [f.as_record() for f in findings], values) == text


def test_a_secret_in_a_key_cannot_be_redacted() -> None:
    with pytest.raises(RefusedError, match="cannot redact"):
        redaction.redact(f"users:\n  {GITHUB}: admin\n")


def test_text_that_is_not_yaml_is_scanned_line_by_line() -> None:
    broken = (
        f"channels:\n  slack:\n    botToken: {SLACK}\n  bad: [unclosed\n    password: hunter2\n"
    )
    scan = guard.scan(broken)
    assert not scan.parsed
    assert [f.describe() for f in scan.findings] == ["line 3 (text)", "line 5 (text)"]
    masked, _ = redaction.redact(broken)
    assert SLACK not in masked and "hunter2" not in masked
    assert masked.count("\n") == broken.count("\n")


def test_display_mask_never_fails_and_never_shows_a_secret() -> None:
    shown = redaction.display_mask(f"users:\n  {GITHUB}: admin\n")
    assert GITHUB not in shown


def test_recursive_and_exploding_aliases_are_bounded() -> None:
    assert paths("a: &x [1, *x]\nb: {password: p}\n") == ["b.password"]
    lol = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for name, prev in zip("bcdef", "abcde", strict=True):
        lol += f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
    with pytest.raises(InvalidDataError, match="expands"):
        guard.scan(lol)


_SAFE = st.text(
    alphabet=st.characters(
        min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="\\\"'#:{}[],&*!|>%@`"
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    secret=st.one_of(_SAFE, st.text(min_size=1, max_size=40).filter(lambda s: s.strip())),
    style=st.sampled_from(["plain", "single", "double"]),
    key=st.sampled_from(["apiKey", "botToken", "password", "client_secret"]),
)
def test_any_value_under_a_secret_key_round_trips(secret: str, style: str, key: str) -> None:
    scalar = redaction.render_scalar(secret, style)
    text = f"# config\nchannels:\n  x:\n    {key}: {scalar}\n    other: 1\n"
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return  # that rendering is not YAML for this value: nothing to store
    value = parsed["channels"]["x"][key]
    if guard.classify(key, value) is None:
        return  # a reference or placeholder, not a secret
    masked, findings = redaction.redact(text)
    if value == secret:  # the scalar is exactly the rendered text (no YAML line breaks in it)
        assert masked == text.replace(f"{key}: {scalar}\n", f"{key}: {guard.MARKER_TEXT}\n")
    assert guard.scan(masked).findings == []
    assert yaml.safe_load(masked)["channels"]["x"] == {key: guard.MARKER, "other": 1}
    restored = redaction.restore(
        masked, [f.as_record() for f in findings], {f"channels.x.{key}": value}
    )
    assert yaml.safe_load(restored) == parsed
    if redaction.render_scalar(value, style) == scalar:
        assert restored == text
