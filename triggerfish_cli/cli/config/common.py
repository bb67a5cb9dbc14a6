"""What the `config` commands share: the group, its arguments, the store of the versions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggerfish_cli.cli.context import AppState
from triggerfish_cli.cli.options import complete_config_version, sub_app

if TYPE_CHECKING:
    from triggerfish_cli.cli.output import Output
    from triggerfish_cli.storage.provider import StorageProvider

app = sub_app(
    "config",
    "Versions of triggerfish.yaml, and rollback.\n\n"
    "Versions live in the store as config:v<N> (the 10 newest are kept). The file is the "
    "global --config (default <base>/triggerfish.yaml). Plain-text secrets are never stored: "
    "they are refused, or masked with --redact.",
)

VersionArg = Annotated[
    str | None,
    typer.Argument(
        help="A version: 13 or v13 (default: see the command).",
        show_default=False,
        autocompletion=complete_config_version,
    ),
]
ReasonOpt = Annotated[
    str | None,
    typer.Option("--reason", "-m", help="Why: stored with the version.", show_default=False),
]
RedactOpt = Annotated[
    bool,
    typer.Option(
        "--redact",
        help='Store plain-text secrets masked as "<redacted>" instead of refusing (exit 4).',
    ),
]


def versions_store(st: AppState, out: Output, *, dry_run: bool = False) -> StorageProvider:
    """The store holding the versions; a rollback killed or failing between writing the
    file and recording its version is finished first (a dry run only says so)."""
    # lazy: config.rollback adds 20 modules to `config --help`
    from triggerfish_cli.config.rollback import PENDING_KEY, Pending, finish_pending
    from triggerfish_cli.errors import TriggerfishError

    provider = _open_provider(st, out)
    if dry_run:
        pending = provider.get(PENDING_KEY)
        if pending is not None and (found := Pending.load(pending)) is not None:
            out.warn(
                f"an interrupted rollback of {found.path} to v{found.target} is pending: "
                "the next config command without --dry-run finishes it"
            )
        return provider
    try:
        note = finish_pending(provider)
    except TriggerfishError as exc:
        out.warn(f"an interrupted rollback could not be finished: {exc.message}")
    else:
        if note is not None:
            out.info(note)
    return provider


def _open_provider(st: AppState, out: Output) -> StorageProvider:
    """The store holding the versions, even when the config file itself is broken or gone.

    At 3 a.m. the file may not parse: then its storage: block alone names the
    store, or the default store is used (config_storage.fallback_settings),
    with a warning either way.
    """
    # lazy: config.storage adds 2 modules to `config --help`
    from triggerfish_cli.config.storage import fallback_settings
    from triggerfish_cli.errors import (
        InvalidDataError,
        MissingStoreError,
        NotFoundError,
        TriggerfishError,
    )

    try:
        st.storage_config()
    except (InvalidDataError, NotFoundError) as exc:
        named = st.db is not None or st.backend is not None
        settings, from_block = fallback_settings(st.config_path, store_named=named)
        st.use_settings(settings)
        if not from_block:
            try:
                provider = st.provider()
            except MissingStoreError:
                raise exc from None  # no default store to fall back on: the file's error
            out.warn(f"{exc.message}; working on {provider.describe()} without it")
            return provider
        try:
            provider = st.provider()
        except TriggerfishError:
            raise InvalidDataError(
                exc.message,
                hint="its storage: section cannot be read; pass --db PATH|URL or --backend "
                "to name the store holding the versions",
            ) from None
        out.warn(f"{exc.message}; its storage: section names {provider.describe()}")
        return provider
    return st.provider()


def version_or_newest(provider: StorageProvider, text: str | None) -> Any:
    # lazy: config.versions adds 18 modules to `config --help`
    from triggerfish_cli.config import versions as cv
    from triggerfish_cli.errors import NotFoundError

    if text is not None:
        return cv.get_version(provider, cv.parse_version_arg(text))
    newest = cv.list_versions(provider).newest
    if newest is None:
        raise NotFoundError("no config versions stored", hint="run `config snapshot` first")
    return newest
