"""The S3 backend's client: boto3 configured with timeouts and retries, errors, the pool.

:class:`S3Connection` is the base of the backend's parts (object access,
writes and :class:`~triggerfish_cli.storage.s3.backend.S3Storage` itself).
boto3 is imported only when a client is made. Values are read and written
by a small thread pool (S3 is one request per object; latency, not
bandwidth, is the limit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from triggerfish_cli.errors import (
    BackendUnavailableError,
    BusyError,
    NotFoundError,
    RefusedError,
    TriggerfishError,
)
from triggerfish_cli.storage.base import BaseStorage
from triggerfish_cli.storage.remote_settings import CREDENTIALS_HINT
from triggerfish_cli.storage.s3.keys import KeyCodec
from triggerfish_cli.threads import block_signals

_T = TypeVar("_T")
_R = TypeVar("_R")

DEFAULT_WORKERS = 16
CONNECT_TIMEOUT = 5
#: Seconds to wait for each answer, and tries per request (botocore's "standard"
#: retries: a timeout, a dropped connection or a 5xx is tried again after a random
#: backoff of at most 2**attempt s). A request that never gets an answer fails
#: after at most max_attempts * (connect_timeout + read_timeout) + backoff.
READ_TIMEOUT = 20
MAX_ATTEMPTS = 3


class MissingBucketError(BackendUnavailableError):
    """The bucket does not exist: a store there is unavailable (exit 7); a backup
    destination read from is not found (exit 3, S3Destination)."""


class PreconditionFailed(TriggerfishError):
    """An If-Match condition did not hold (the object changed)."""


class S3Connection(BaseStorage):
    """The client, its error translation and the thread pool, shared by every part."""

    bucket: str
    #: The store's own prefix in the bucket ("" or ending in "/").
    prefix: str
    endpoint_url: str | None
    read_only: bool
    codec: KeyCodec
    workers: int
    #: (connect_timeout, read_timeout, max_attempts) of the requests made now.
    timeouts: tuple[int, int, int]
    client: Any
    #: ServerSideEncryption / SSEKMSKeyId of every put (storage: sse).
    put_extra: dict[str, str]
    _pool: ThreadPoolExecutor | None

    def _make_client(
        self,
        endpoint_url: str | None,
        region: str | None,
        connect_timeout: int,
        read_timeout: int,
        attempts: int,
    ) -> Any:
        # lazy: boto3/botocore, loaded only when S3 is used
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": attempts, "mode": "standard"},
            max_pool_connections=self.workers + 4,
            s3={"addressing_style": "path"} if endpoint_url else {},
            user_agent_extra="triggerfish-admin",
        )
        with self.errors("open"):
            session = boto3.session.Session(region_name=region)
            client: Any = session.client("s3", endpoint_url=endpoint_url, config=config)
        return client

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _where(self) -> str:
        endpoint = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"{self.describe()}{endpoint}"

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        # lazy: boto3/botocore, loaded only when S3 is used
        from botocore import exceptions

        try:
            yield
        except exceptions.ClientError as exc:
            raise self._client_error(exc, what) from exc
        except exceptions.NoCredentialsError:
            raise BackendUnavailableError(
                f"{self._where()}: {what}: no AWS credentials found", hint=CREDENTIALS_HINT
            ) from None
        except (
            exceptions.EndpointConnectionError,
            exceptions.ConnectTimeoutError,
            exceptions.ReadTimeoutError,
            exceptions.ConnectionClosedError,
        ) as exc:
            connect, read, attempts = self.timeouts
            raise BackendUnavailableError(
                f"{self._where()}: {what}: cannot reach S3: {exc} ({attempts} attempt(s), "
                f"connect_timeout {connect} s, read_timeout {read} s)",
                hint="check storage.endpoint_url and the network; completed work is kept",
            ) from None
        except exceptions.BotoCoreError as exc:
            raise BackendUnavailableError(f"{self._where()}: {what}: {exc}") from None

    def _client_error(self, exc: Any, what: str) -> TriggerfishError:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message") or code)
        where = f"{self._where()}: {what}"
        if code in ("NoSuchBucket", "404") and what == "open":
            return MissingBucketError(
                f"{where}: bucket {self.bucket!r} not found",
                hint="create the bucket first; triggerfish-admin never creates buckets",
            )
        if code in (
            "AccessDenied",
            "403",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "ExpiredToken",
            "InvalidToken",
        ):
            return BackendUnavailableError(
                f"{where}: access denied ({code})", hint=CREDENTIALS_HINT
            )
        if code in ("SlowDown", "ServiceUnavailable", "RequestTimeout", "503"):
            return BusyError(f"{where}: S3 is throttling ({code})", hint="retry later")
        if code in ("NoSuchKey", "404"):
            return NotFoundError(f"{where}: {message}")
        if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            return PreconditionFailed(f"{where}: {message}")
        return TriggerfishError(f"{where}: {code}: {message}")

    def _check_writable(self) -> None:
        if self.read_only:
            raise RefusedError(f"{self.describe()}: the store was opened read-only")

    def _map(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        """``fn`` over ``items`` on the thread pool, results in order."""
        if len(items) <= 1 or self.workers <= 1:
            return [fn(item) for item in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self.workers, thread_name_prefix="triggerfish-s3", initializer=block_signals
            )
        return list(self._pool.map(fn, items))

    def _object(self, name: str) -> str:
        return self.prefix + name
