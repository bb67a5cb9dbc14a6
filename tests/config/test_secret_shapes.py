"""The secrets guard, shape by shape: each is found, and --redact stores none of it.

Issue 15 found three shapes stored in ``config:vN`` (and so in every
backup) even with ``--redact``: a ``KEY=value`` item, a libpq key/value DSN,
and an AWS secret key beside its key id in a list. These and their kin,
one table row per shape: the text is a small triggerfish.yaml, ``secret``
is the part that must never be stored.
"""

from __future__ import annotations

import base64
import dataclasses
import json

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


# -- issue 35: thirteen shapes `config snapshot` stored with exit 0 ------------------------

ANTHROPIC = "sk-ant-api03-Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aS"
PRIVATE_KEY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
GCP_JSON = json.dumps(
    {
        "type": "service_account",
        "project_id": "tf-prod",
        "private_key_id": "3f2a9c",
        "private_key": f"-----BEGIN PRIVATE KEY-----\n{PRIVATE_KEY}\n-----END PRIVATE KEY-----\n",
        "client_email": "tf@tf-prod.iam.gserviceaccount.com",
    }
)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


DISCORD_TOKEN = "aBcD3fGh1JkLmN0pQr5tUvWxYz-_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdEFGH"
SENDGRID = "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"
REFRESH = "1//0gLmN3pQ5rS7tU9vW1xY3z5AaB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5AaB3dE5fG7hJ9kL1mN3"


@dataclasses.dataclass(frozen=True)
class Stored:
    """A shape issue 35 found stored: the file, where the secret is, and its text."""

    name: str
    text: str
    path: str
    #: Texts that must never be stored nor printed (the value, and what it encodes).
    secrets: tuple[str, ...]


STORED: list[Stored] = [
    Stored(
        "Kubernetes env name/value item",
        "mcp_servers:\n  openai:\n    command: npx\n"
        "    env: [{name: OPENAI_API_KEY, value: oa-Zt8qLw3RmX9vKc2Pn}]\n",
        "mcp_servers.openai.env[0].value",
        ("oa-Zt8qLw3RmX9vKc2Pn",),
    ),
    Stored(
        "high-entropy value under pwd:",
        "caldav:\n  url: https://caldav.example.com/dav/\n  pwd: Xq7vT2mK9pL4zR8wN3bY\n",
        "caldav.pwd",
        ("Xq7vT2mK9pL4zR8wN3bY",),
    ),
    Stored(
        "high-entropy value under pass:",
        "channels:\n  email:\n    imapUser: you@example.com\n    pass: Hq2vT7mK4pL9zR3wN8bZ\n",
        "channels.email.pass",
        ("Hq2vT7mK4pL9zR3wN8bZ",),
    ),
    Stored(
        "base64 GCP service-account JSON with a private key",
        f"google:\n  serviceAccount: {b64(GCP_JSON)}\n",
        "google.serviceAccount",
        (b64(GCP_JSON), PRIVATE_KEY),
    ),
    Stored(
        "!!binary of an sk-ant- key",
        f"models:\n  providers:\n    anthropic:\n      extra: !!binary {b64(ANTHROPIC)}\n",
        "models.providers.anthropic.extra",
        (b64(ANTHROPIC), ANTHROPIC),
    ),
    Stored(
        "?key=<random> in a URL",
        "web:\n  search:\n    endpoint: "
        "https://www.googleapis.com/customsearch/v1?cx=0175766:omu&key=Zt8qLw3RmX9vKc2PnB7dFh4J\n",
        "web.search.endpoint",
        ("Zt8qLw3RmX9vKc2PnB7dFh4J",),
    ),
    Stored(
        "Discord webhook URL",
        "channels:\n  discord:\n    notify: "
        f"https://discord.com/api/webhooks/1234567890123456789/{DISCORD_TOKEN}\n",
        "channels.discord.notify",
        (DISCORD_TOKEN,),
    ),
    Stored(
        "glpat- token",
        "mcp_servers:\n  gitlab:\n    command: npx\n"
        "    args: [-y, '@modelcontextprotocol/server-gitlab', glpat-xR4tW7yB1cD6fH3jK0aS]\n",
        "mcp_servers.gitlab.args[2]",
        ("glpat-xR4tW7yB1cD6fH3jK0aS",),
    ),
    Stored(
        "hf_ token",
        "plugins:\n  hub:\n    login: 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\n",
        "plugins.hub.login",
        ("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",),
    ),
    Stored(
        "npm_ token",
        "tools:\n  npm:\n    registry: https://registry.npmjs.org/\n"
        "    note: npm_Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aS1234\n",
        "tools.npm.note",
        ("npm_Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aS1234",),
    ),
    Stored(
        "SG. SendGrid key",
        f"channels:\n  email:\n    sendgrid: {SENDGRID}\n",
        "channels.email.sendgrid",
        (SENDGRID,),
    ),
    Stored(
        "hvs. Vault token",
        "secrets:\n  vault:\n    address: https://vault.internal:8200\n"
        "    login: hvs.CAESIJ4kLmNoPqRsTuVwXyZ0123456789abcdEFGHijklMNOPqrsTUVwxYZGh4KHGh2cy5a\n",
        "secrets.vault.login",
        ("hvs.CAESIJ4kLmNoPqRsTuVwXyZ0123456789abcdEFGHijklMNOPqrsTUVwxYZGh4KHGh2cy5a",),
    ),
    Stored(
        "1//0 Google refresh token",
        f"google:\n  oauth:\n    refresh: {REFRESH}\n",
        "google.oauth.refresh",
        (REFRESH,),
    ),
]


@pytest.mark.parametrize("shape", STORED, ids=[s.name for s in STORED])
def test_issue_35_shapes_are_found_by_path_and_masked(shape: Stored) -> None:
    result = guard.scan(shape.text)
    assert [f.describe() for f in result.findings] == [shape.path]
    masked, _ = redaction.redact(shape.text, result)
    for secret in shape.secrets:
        assert secret not in repr(result.findings)
        assert secret not in masked, f"{shape.name}: still in the stored text"
    assert guard.scan(masked).findings == []


# Their kin: the families these belong to, each found wherever it sits.
KIN: list[tuple[str, str, str]] = [
    # (name, yaml text, the path found)
    (
        "key/value pair",
        "headers: [{key: X-Api-Key, value: k-Zt8qLw3RmX9vKc2Pn}]\n",
        "headers[0].value",
    ),
    ("Name/Value pair", "Env: [{Name: DB_PASSWORD, Value: hunter2}]\n", "Env[0].Value"),
    ("DB_PASS", "env: {DB_PASS: hunter2hunter2}\n", "env.DB_PASS"),
    ("userPwd", "db: {userPwd: 'Tr1cky!'}\n", "db.userPwd"),
    ("numeric pass", "smtp: {pass: 123456}\n", "smtp.pass"),
    ("!!binary under apiKey", f"apiKey: !!binary {b64('hunter2')}\n", "apiKey"),
    ("!!binary key material", "privateKey: !!binary AAECAwQFBgcICQ==\n", "privateKey"),
    ("URL-safe base64", f"blob: {base64.urlsafe_b64encode(GCP_JSON.encode()).decode()}\n", "blob"),
    (
        "base64 of JSON naming a secret",
        f"config: {b64(json.dumps({'client_secret': 'abc123'}))}\n",
        "config",
    ),
    ("base64 of base64", f"x: {b64(b64(ANTHROPIC))}\n", "x"),
    (
        "base64 of YAML",
        f"manifest: {b64('kind: Secret' + chr(10) + 'password: hunter2' + chr(10))}\n",
        "manifest",
    ),
    ("JSON in a string", 'gcp: \'{"type": "x", "client_secret": "abc123"}\'\n', "gcp"),
    (
        "&signature= in a URL",
        "u: https://x.example/f?Expires=1&Signature=Zt8qLw3RmX9vKc2PnB7dFh4J\n",
        "u",
    ),
    ("?auth= in a URL", "u: https://x.example/f?auth=Zt8qLw3RmX9vKc2PnB7dFh4J\n", "u"),
    (
        "discordapp.com webhook",
        f"h: https://ptb.discordapp.com/api/v10/webhooks/123456789/{DISCORD_TOKEN}\n",
        "h",
    ),
    (
        "Teams webhook",
        "h: https://acme.webhook.office.com/webhookb2/1f2e3d4c-aa@bb/IncomingWebhook/9a8b7c6d\n",
        "h",
    ),
    (
        "Telegram bot API URL",
        "h: https://api.telegram.org"
        "/bot7890123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1/sendMessage\n",
        "h",
    ),
    ("gldt- deploy token", "a: [gldt-xR4tW7yB1cD6fH3jK0aS]\n", "a[0]"),
    ("glrt- runner token", "a: [glrt-xR4tW7yB1cD6fH3jK0aS]\n", "a[0]"),
    ("glptt- trigger token", "a: [glptt-0123456789abcdef0123456789abcdef01234567]\n", "a[0]"),
    ("api_org_ Hugging Face token", "a: [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]\n", "a[0]"),
    (
        "PyPI token",
        "a: [pypi-AgEIcHlwaS5vcmcCJDk5ZjM0NTY3LWE4YjktNGMwZC1iMmUzLTRmNWE2YjdjOGQ5ZQ]\n",
        "a[0]",
    ),
    ("hvb. Vault batch token", "a: [hvb.AAAAAQJ4kLmNoPqRsTuVwXyZ0123456789abcdEFGH]\n", "a[0]"),
    ("legacy s. Vault token", "a: [s.Zq8vN2kL5mP9xR4tW7yB1cD6]\n", "a[0]"),
    ("ya29. Google access token", "a: [ya29.a0AfH6SMBxR4tW7yB1cD6fH3jK0aSZq8vN2kL5mP9]\n", "a[0]"),
    ("xoxe- Slack refresh token", "a: [xoxe-1-My0xLTEyMzQ1Njc4OTAxMjM0LWFiY2Rl]\n", "a[0]"),
    ("Stripe webhook secret", "a: [whsec_Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aS]\n", "a[0]"),
    (
        "Notion token",
        "notion: {workspace: ntn_Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aSZq8vN2kL5mP9}\n",
        "notion.workspace",
    ),
    ("Groq key", "a: [gsk_Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aSZq8vN2kL5mP9xR4t]\n", "a[0]"),
    ("xAI key", "a: [xai-Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aSZq8vN2kL5mP9xR4t]\n", "a[0]"),
    ("Replicate token", "a: [r8_Zq8vN2kL5mP9xR4tW7yB1cD6fH3jK0aSZq]\n", "a[0]"),
    ("Tavily key", "a: [tvly-dev-Zq8vN2kL5mP9xR4tW7yB1cD6fH3]\n", "a[0]"),
]


@pytest.mark.parametrize(("name", "text", "path"), KIN, ids=[k[0] for k in KIN])
def test_kin_are_found_by_path(name: str, text: str, path: str) -> None:
    result = guard.scan(text)
    assert [f.describe() for f in result.findings] == [path], name
    masked, _ = redaction.redact(text, result)
    assert guard.scan(masked).findings == []


@pytest.mark.parametrize(
    "text",
    [
        "mcp_servers: {x: {env: {PWD: /srv/triggerfish, OLDPWD: ~/work}}}\n",
        "env: [PWD=., 'PWD=$HOME'] \nvars: {PWD: ., OLDPWD: $HOME, pwd: '..'}\n",
        "proxy: {bypass: proxy.internal.example, compass: north-north-west}\n",
        "env: [{name: LOG_LEVEL, value: debug}, {name: PORT, value: '8080'}]\n",
        "env: [{name: OPENAI_API_KEY, valueFrom: {secretKeyRef: {name: tf, key: openai}}}]\n",
        "env: [{name: OPENAI_API_KEY, value: 'secret:provider:openai:apiKey'}]\n",
        "env: [{name: ANTHROPIC_API_KEY, value: '${ANTHROPIC_API_KEY}'}]\n",
        "url: https://maps.example/api?key=name&sig=1&page=2\n",
        "url: https://www.googleapis.com/customsearch/v1?key=secret:web:search:apiKey\n",
        f"ca: {b64('-----BEGIN CERTIFICATE-----' + chr(10) + 'MIIB' + chr(10))}\n",
        "png: !!binary iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk\n",
        f"greeting: {b64('hello, world: this is not a secret')}\n",
        "names: [api_version_for_the_models_endpoint_v2_final, hf_hub_cache_directory]\n",
        "tags: [s.prefix, glossary-terms, r.example.com, b.tld]\n",
        "pattern: '[a-z]+-[0-9]{4}'\n",
        'rules: \'{"when": "always", "then": "notify"}\'\n',
        "model: claude-sonnet-4-5-20250929\n",
        "id: 017576662512468239146\n",
        "webhook: https://discord.com/api/webhooks\n",
    ],
)
def test_kin_that_are_not_secrets_pass(text: str) -> None:
    assert guard.scan(text).findings == []


# Every top-level section of the gateway's config (UPSTREAM.md) and ours, as an
# operator writes them: references, URLs, ids, paths, schedules. Nothing here is a secret.
GATEWAY_SECTIONS = """\
models:
  primary: {provider: anthropic, model: claude-sonnet-4-5-20250929}
  providers:
    anthropic: {apiKey: "secret:provider:anthropic:apiKey"}
    openai: {model: gpt-4o, apiKey: "secret:provider:openai:apiKey"}
    ollama: {model: llama3, endpoint: "http://localhost:11434"}
  failover: [claude-haiku-4-5, gpt-4o, ollama/llama3]
channels:
  telegram: {ownerId: 123456789, botToken: "secret:telegram:botToken", classification: INTERNAL}
  discord: {guildId: "1234567890123456789", botToken: "secret:discord:botToken"}
  slack: {signingSecret: "secret:slack:signingSecret", appToken: "secret:slack:appToken"}
  signal: {endpoint: "tcp://127.0.0.1:7583", account: "+14155552671"}
  email: {imapHost: imap.gmail.com, imapUser: you@gmail.com, imapPassword: "secret:email:imap"}
classification: {mode: personal}
web:
  search: {provider: brave, api_key: "secret:web:search:apiKey"}
  fetch: {userAgent: "Mozilla/5.0 (X11; Linux x86_64) Triggerfish/0.9", timeoutMs: 15000}
google:
  clientId: 123456789012-abcdefghijklmnopqrstuvwxyz012345.apps.googleusercontent.com
  clientSecret: "secret:google:clientSecret"
  scopes: [https://www.googleapis.com/auth/calendar.readonly]
github: {token: "secret:github:token", owner: acme, repos: [acme/triggerfish]}
notion: {token: "secret:notion:token", rootPageId: 1f2e3d4c5b6a79881f2e3d4c5b6a7988}
x: {apiKey: "secret:x:apiKey", handle: "@acme"}
caldav:
  url: https://caldav.fastmail.com/dav/calendars/user/you@fastmail.com/
  username: you@fastmail.com
  password: "secret:caldav:password"
scheduler:
  cron:
    jobs:
      - {id: morning-briefing, schedule: "0 7 * * *", task: "Prepare the briefing"}
  trigger: {interval: 30m, quiet_hours: "22:00-07:00"}
plugins:
  weather: {enabled: true, path: ~/.triggerfish/plugins/weather}
secrets: {backend: keychain, service: triggerfish}
filesystem: {roots: [/home/you/Documents, ./workspace], readOnly: false}
tools:
  exec: {allow: [git, ls, rg], cwd: /home/you/work, env: {PWD: /home/you/work}}
mcp_servers:
  github:
    command: npx
    args: [-y, "@modelcontextprotocol/server-github"]
    env:
      - {name: GITHUB_PERSONAL_ACCESS_TOKEN, value: "secret:github:token"}
      - {name: LOG_LEVEL, value: info}
  kube:
    command: kubectl-mcp
    env: [{name: KUBECONFIG, value: /home/you/.kube/config}]
mcp: {timeoutMs: 30000, retries: 2}
logging: {level: normal, file: ~/.triggerfish/logs/triggerfish.log}
daemon: {pidFile: /run/triggerfish.pid, port: 18789}
debug: {traces: false}
storage: {backend: sqlite, path: data/triggerfish.db, busy_timeout_ms: 5000}
retention: {conversations: 90d, lineage: 30d}
"""


def test_a_gateway_config_with_every_section_passes() -> None:
    assert guard.scan(GATEWAY_SECTIONS).findings == []


def test_a_binary_secret_is_masked_with_its_tag_and_put_back_byte_for_byte() -> None:
    text = f"models:\n  x:\n    extra: &k !!binary {b64(ANTHROPIC)}\n    model: m\n    again: *k\n"
    masked, findings = redaction.redact(text)
    assert masked == text.replace(f"!!binary {b64(ANTHROPIC)}", '"<redacted>"')
    assert [f.kind for f in findings] == ["Anthropic API key (base64)"] * 2
    values = {"models.x.extra": ANTHROPIC.encode(), "models.x.again": ANTHROPIC.encode()}
    assert redaction.restore(masked, [f.as_record() for f in findings], values) == text
