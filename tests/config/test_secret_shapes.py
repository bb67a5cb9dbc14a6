"""The secrets guard, shape by shape: each is found, and --redact stores none of it.

Issue 15 found three shapes stored in ``config:vN`` (and so in every
backup) even with ``--redact``: a ``KEY=value`` item, a libpq key/value DSN,
and an AWS secret key beside its key id in a list. These and their kin,
one table row per shape: the text is a small triggerfish.yaml, ``secret``
is the part that must never be stored.
"""

from __future__ import annotations

import pytest

from triggerfish_cli.config import redaction
from triggerfish_cli.config import secrets_guard as guard

AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

SHAPES: list[tuple[str, str, str]] = [
    # (name, yaml text, the secret in it)
    ("env KEY=value item", f"env: [AWS_SECRET_ACCESS_KEY={AWS_SECRET}]\n", AWS_SECRET),
    ("env KEY=value block item", "env:\n  - DB_PASSWORD=hunter2hunter2\n", "hunter2hunter2"),
    ("args --password=", "args: ['--user=tf', '--password=s3cr3t-Pa55']\n", "s3cr3t-Pa55"),
    ("libpq key/value DSN", 'dsn: "host=db password=hunter2hunter2"\n', "hunter2hunter2"),
    ("libpq quoted password", "dsn: \"host=db password='two words'\"\n", "two words"),
    (
        "ADO.NET connection string",
        'db: "Server=db;User Id=tf;Password=Tr1ckyPass!;"\n',
        "Tr1ckyPass!",
    ),
    ("URL password", "url: mysql://tf:hunter2@db.internal/tf\n", "hunter2"),
    ("URL query password", "url: https://db.example/x?user=a&password=Xy9kQ2mL\n", "Xy9kQ2mL"),
    ("AWS key pair in a list", f"aws: [{AWS_ID}, {AWS_SECRET}]\n", AWS_SECRET),
    (
        "a random value beside a key id",
        f"aws: [{AWS_ID}, Zx81Qw-Lp02Mn_Vb73Kc]\n",
        "Zx81Qw-Lp02Mn_Vb73Kc",
    ),
    ("AWS secret key anywhere", f"note: {AWS_SECRET}\n", AWS_SECRET),
    (
        "GCP service account key",
        'gcp: {"type": "service_account", "private_key": '
        '"-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\n-----END PRIVATE KEY-----\\n"}\n',
        "MIIEvQIBADAN",
    ),
    (
        "GCP API key",
        "maps: AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q\n",
        "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    ),
    (
        "GCP OAuth client secret",
        "oauth: 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\n",
        "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",
    ),
    (
        "Azure storage connection string",
        "azure: DefaultEndpointsProtocol=https;AccountName=tf;"
        "AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4==;EndpointSuffix=core\n",
        "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4==",
    ),
    (
        "Azure SAS signature",
        "blob: https://tf.blob.core.windows.net/c?sv=2022-11-02&sig=AbCdEf0123456789%2BxYz%3D\n",
        "AbCdEf0123456789%2BxYz%3D",
    ),
    (
        "Azure client secret",
        "client: 8Qx8Q~AbCdEfGhIjKlMnOpQrStUvWxYz0123456\n",
        "8Qx8Q~AbCdEfGhIjKlMnOpQrStUvWxYz0123456",
    ),
    (
        "GitHub token",
        "gh: ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A\n",
        "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A",
    ),
    (
        "Slack token",
        "slack: xoxb-2401234567-4012345678901-AbCdEfGhIjKl\n",
        "xoxb-2401234567-4012345678901-AbCdEfGhIjKl",
    ),
    (
        "Slack webhook URL",
        "hook: https://hooks.slack.com/services/T0123ABCD/B0123ABCD/aBcDeFgHiJkLmNoPqRsTuVwX\n",
        "aBcDeFgHiJkLmNoPqRsTuVwX",
    ),
    (
        "OpenAI key",
        "llm: sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2M3n4\n",
        "sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2M3n4",
    ),
    (
        "Anthropic key",
        "llm: sk-ant-api03-Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aS\n",
        "sk-ant-api03-Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aS",
    ),
    (
        "PGP private key block",
        "pgp: |\n  -----BEGIN PGP PRIVATE KEY BLOCK-----\n  lQOYBF0abc\n"
        "  -----END PGP PRIVATE KEY BLOCK-----\n",
        "lQOYBF0abc",
    ),
    (
        "high-entropy value under a secret-sounding name",
        "webhookSigningValue: q9Zr4Lm2Xv8Tn6Bw1Kc5Hd7Jf3Pz\n"
        "clientSecretRef: q9Zr4Lm2Xv8Tn6Bw1Kc5Hd7Jf3Py\n",
        "q9Zr4Lm2Xv8Tn6Bw1Kc5Hd7Jf3Py",
    ),
]


@pytest.mark.parametrize(("name", "text", "secret"), SHAPES, ids=[s[0] for s in SHAPES])
def test_each_shape_is_found_and_redaction_keeps_none_of_it(
    name: str, text: str, secret: str
) -> None:
    result = guard.scan(text)
    assert result.findings, f"{name}: not found"
    assert secret not in repr(result.findings)
    masked, _ = redaction.redact(text, result)
    assert secret not in masked, f"{name}: still in the stored text"
    assert guard.scan(masked).findings == []  # store_version's last line of defence passes


@pytest.mark.parametrize(
    "text",
    [
        "env: [LOG_LEVEL=debug, PASSWORD_FILE=/run/secrets/db]\n",
        "env: [DB_PASSWORD=${DB_PASSWORD}, API_TOKEN=secret:provider:x:token]\n",
        'dsn: "host=db user=tf dbname=tf sslmode=require"\n',
        "url: https://db.example/x?user=a&page=2\n",
        "commit: 9f2c3b1a4d5e6f708192a3b4c5d6e7f8091a2b3c\n",  # a git sha: hex, lower case
        "limits: [max_tokens=4096]\n",
        "model: claude-sonnet-4-5-20250929\n",
        "path: /usr/local/share/triggerfish/skills/weather/SKILL.md\n",
    ],
)
def test_kin_that_are_not_secrets_are_left_alone(text: str) -> None:
    assert guard.scan(text).findings == []
