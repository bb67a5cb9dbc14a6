"""The ``storage:`` settings of the Postgres and S3 backends, and their URL forms.

Kept apart from the backends so that checking a config file (``config
validate``, ``migrate --to minio.yaml``) never imports psycopg or boto3,
and works where they are not installed.

Store addresses (:func:`parse_address`): the ``postgresql://`` and ``s3://``
URLs that ``--db``/``TRIGGERFISH_DB`` and ``migrate --from/--to`` take.

Secrets never go in triggerfish.yaml or on the command line: a DSN with a
password, a ``password:`` setting, or AWS credentials in the section are
refused (exit 4) with where they belong instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from triggerfish_cli.errors import InvalidDataError, RefusedError, UsageError
from triggerfish_cli.settings import StorageConfig, check_keys, positive_int

DEFAULT_SCHEMA = "triggerfish"
DEFAULT_CONNECT_TIMEOUT = 5
#: Longest S3 store prefix accepted: the rest of the 1024 bytes is for keys.
MAX_PREFIX = 512

PASSWORD_HINT = (
    "remove the password from the DSN and give it to libpq instead: "
    "PGPASSWORD, ~/.pgpass (mode 0600) or a PGSERVICEFILE entry"
)

_PG_SECRETS = {"password", "pass", "passwd", "secret", "sslpassword"}

CREDENTIALS_HINT = (
    "credentials come from the standard AWS chain: AWS_PROFILE, "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws/credentials, SSO or an instance role"
)
_S3_SECRETS = {
    "access_key",
    "access_key_id",
    "aws_access_key_id",
    "secret_key",
    "secret_access_key",
    "aws_secret_access_key",
    "session_token",
    "aws_session_token",
    "password",
    "secret",
}
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")


# -- postgres ------------------------------------------------------------------------


def dsn_has_password(dsn: str) -> bool:
    """Whether a libpq connection string carries a password (URL or key=value form)."""
    text = dsn.strip()
    if re.match(r"^postgres(?:ql)?://", text, re.IGNORECASE):
        parts = urlsplit(text)
        netloc = parts.netloc.rpartition("@")[0]
        if ":" in netloc:
            return True
        return any(k.lower() in ("password", "sslpassword") for k, _ in parse_qsl(parts.query))
    return re.search(r"(?:^|\s)(?:ssl)?password\s*=", text, re.IGNORECASE) is not None


def check_dsn(dsn: str, where: str) -> None:
    """Refuse a DSN holding a password (exit 4): secrets never go in config or argv."""
    if dsn_has_password(dsn):
        raise RefusedError(f"{where}: the DSN contains a password", hint=PASSWORD_HINT)


def check_schema(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidDataError(f"{where}: must be a schema name, not {value!r}")
    if len(value.encode("utf-8")) > 63:
        raise InvalidDataError(f"{where}: {value!r} is longer than PostgreSQL's 63 bytes")
    if value.lower().startswith("pg_") or "\x00" in value:
        raise InvalidDataError(f"{where}: {value!r} is reserved by PostgreSQL")
    return value


def postgres_section(section: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """Validator of ``storage: {backend: postgres, dsn, schema, connect_timeout}``."""
    secrets = sorted(str(k) for k in section if str(k).lower() in _PG_SECRETS)
    if secrets:
        raise RefusedError(
            f"storage.{secrets[0]}: passwords never go in triggerfish.yaml", hint=PASSWORD_HINT
        )
    check_keys(section, {"backend", "dsn", "schema", "connect_timeout"}, "storage")
    options: dict[str, Any] = {}
    dsn = section.get("dsn", "")
    if dsn is None:
        dsn = ""
    if not isinstance(dsn, str):
        raise InvalidDataError(f"storage.dsn: must be a connection string, not {dsn!r}")
    check_dsn(dsn, "storage.dsn")
    options["dsn"] = dsn
    if "schema" in section:
        options["schema"] = check_schema(section["schema"], "storage.schema")
    if "connect_timeout" in section:
        options["connect_timeout"] = positive_int(
            section["connect_timeout"], "storage.connect_timeout"
        )
    return options


def describe_postgres(config: StorageConfig) -> str:
    """Where a Postgres store that is not open is: its DSN (never a password) and schema."""
    options = config.options
    return f"postgres:{options.get('dsn') or '(libpq environment)'} schema " + str(
        options.get("schema", DEFAULT_SCHEMA)
    )


def postgres_location(config: StorageConfig) -> str:
    """``status``'s location of a Postgres store: its DSN and schema."""
    options = config.options
    dsn = options.get("dsn") or "(the libpq environment)"
    return f"{dsn} schema {options.get('schema', DEFAULT_SCHEMA)}"


def split_postgres_url(url: str) -> tuple[str, str | None]:
    """``postgresql://h/db?schema=s`` -> (DSN without ``schema``, ``s``).

    ``schema`` is ours, not libpq's: it is taken out of the query string.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = None
    kept = []
    for key, value in query:
        if key == "schema":
            schema = unquote(value)
        else:
            kept.append(f"{key}={value}")
    return parts._replace(query="&".join(kept)).geturl(), schema


# -- s3 --------------------------------------------------------------------------------


def check_bucket(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _BUCKET.match(value):
        raise InvalidDataError(f"{where}: not a bucket name: {value!r}")
    return str(value)


def normalize_prefix(value: Any, where: str) -> str:
    """``"prod"`` -> ``"prod/"``; ``""`` -> ``""`` (the bucket's root)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidDataError(f"{where}: must be a key prefix, not {value!r}")
    if value.startswith("/") or "//" in value:
        raise InvalidDataError(f"{where}: {value!r} must not start with / or contain //")
    if value and not value.endswith("/"):
        value += "/"
    if len(value.encode("utf-8")) > MAX_PREFIX:
        raise InvalidDataError(f"{where}: longer than {MAX_PREFIX} bytes")
    return str(value)


def check_endpoint(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidDataError(f"{where}: must be a URL, not {value!r}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidDataError(f"{where}: must be an http(s):// URL, not {value!r}")
    if parts.username or parts.password:
        raise RefusedError(f"{where}: credentials never go in the URL", hint=CREDENTIALS_HINT)
    return value


def s3_section(section: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """Validator of ``storage: {backend: s3, bucket, prefix, endpoint_url, region}``."""
    secrets = sorted(str(k) for k in section if str(k).lower() in _S3_SECRETS)
    if secrets:
        raise RefusedError(
            f"storage.{secrets[0]}: credentials never go in triggerfish.yaml",
            hint=CREDENTIALS_HINT,
        )
    check_keys(
        section,
        {
            "backend",
            "bucket",
            "prefix",
            "endpoint_url",
            "region",
            "connect_timeout",
            "read_timeout",
            "max_attempts",
            "sse",
            "sse_kms_key_id",
        },
        "storage",
    )
    if "bucket" not in section:
        raise InvalidDataError("storage.bucket: required for the s3 backend")
    options: dict[str, Any] = {
        "bucket": check_bucket(section["bucket"], "storage.bucket"),
        "prefix": normalize_prefix(section.get("prefix"), "storage.prefix"),
    }
    if section.get("endpoint_url") is not None:
        options["endpoint_url"] = check_endpoint(section["endpoint_url"], "storage.endpoint_url")
    if section.get("region") is not None:
        region = section["region"]
        if not isinstance(region, str) or not re.match(r"^[a-z0-9-]+$", region):
            raise InvalidDataError(f"storage.region: not a region name: {region!r}")
        options["region"] = region
    for name in ("connect_timeout", "read_timeout", "max_attempts"):
        if name in section:
            options[name] = positive_int(section[name], f"storage.{name}")
    # lazy: backup.settings (+2 modules) is not loaded by `kv get --raw`
    from triggerfish_cli.backup.settings import check_sse

    sse, key_id = check_sse(section.get("sse"), section.get("sse_kms_key_id"), "storage.")
    if sse:
        options["sse"] = sse
    if key_id:
        options["sse_kms_key_id"] = key_id
    return options


def describe_s3(config: StorageConfig) -> str:
    """Where an S3 store that is not open is: ``s3://bucket/prefix``."""
    options = config.options
    return f"s3://{options.get('bucket')}/{options.get('prefix', '')}"


def s3_location(config: StorageConfig) -> str:
    """``status``'s location of an S3 store: its bucket and prefix, and the endpoint."""
    options = config.options
    where = f"s3://{options.get('bucket', '')}/{options.get('prefix', '')}"
    endpoint = options.get("endpoint_url")
    return f"{where} at {endpoint}" if endpoint else where


def parse_s3_url(url: str) -> dict[str, Any]:
    """``s3://bucket/some/prefix`` -> options (endpoint and region from the AWS env)."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise InvalidDataError(f"{url}: expected s3://bucket/prefix")
    return {
        "bucket": check_bucket(parts.netloc, url),
        "prefix": normalize_prefix(parts.path.lstrip("/"), url),
    }


# -- store addresses ---------------------------------------------------------------

#: The schemes of store addresses, and the backend each names.
SCHEMES = {"postgresql": "postgres", "postgres": "postgres", "s3": "s3"}
ADDRESS_HINT = "give a SQLite path, postgresql://HOST/DB?schema=NAME or s3://BUCKET/PREFIX"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def parse_address(
    spec: str, where: str, *, endpoint_url: str | None = None
) -> StorageConfig | None:
    """A ``postgresql://`` or ``s3://`` address -> its store; None when ``spec`` is none.

    ``where`` names the option (``--to``, ``--db``, ``TRIGGERFISH_DB``) in
    messages and ``chosen_by``. A path with a colon (``./a:b.db``, ``a:b``)
    is no address; ``name://...`` with an unknown name, and a known scheme
    without its ``//`` (``s3:bucket``), are exit 2, as is a malformed
    address. A password or credentials in it are refused (exit 4) before any
    message could repeat them.
    """
    match = _SCHEME.match(spec)
    if match is None:
        return None
    scheme, rest = match.group(1).lower(), spec[match.end() :]
    if scheme not in SCHEMES:
        if rest.startswith("//"):
            raise UsageError(f"{where}: unknown kind of store {scheme}://", hint=ADDRESS_HINT)
        return None
    if not rest.startswith("//"):
        raise UsageError(
            f"{where}: {scheme}: must be followed by // ({scheme}://...)",
            hint=f"{ADDRESS_HINT}; a SQLite file of that name: ./{scheme}:...",
        )
    backend = SCHEMES[scheme]
    try:
        if backend == "postgres":
            options = _postgres_address(spec, where)
        else:
            options = _s3_address(spec, where)
    except InvalidDataError as exc:
        raise UsageError(f"{where}: {exc.message}", hint=exc.hint or ADDRESS_HINT) from None
    if backend == "s3" and endpoint_url is not None:
        options["endpoint_url"] = check_endpoint(endpoint_url, "--endpoint-url")
    return StorageConfig(backend, options=options, source=where, chosen_by=f"from {where}")


def _postgres_address(spec: str, where: str) -> dict[str, Any]:
    check_dsn(spec, where)  # first: nothing below may echo a password
    parts = urlsplit(spec)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise InvalidDataError(f"not a port number in {parts.netloc!r}") from None
    dsn, schema = split_postgres_url(spec)
    options: dict[str, Any] = {"dsn": dsn}
    if schema is not None:
        options["schema"] = check_schema(schema, "schema")
    return options


def _s3_address(spec: str, where: str) -> dict[str, Any]:
    parts = urlsplit(spec)
    if "@" in parts.netloc:
        raise RefusedError(f"{where}: credentials never go in the address", hint=CREDENTIALS_HINT)
    if parts.query or parts.fragment:
        raise InvalidDataError("an s3:// address takes no ?query or #fragment")
    return parse_s3_url(spec)
