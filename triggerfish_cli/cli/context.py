"""Per-invocation state shared by every command: global options, settings, the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from triggerfish_cli.paths import default_config_path
from triggerfish_cli.settings import Settings, StorageConfig, load_settings

if TYPE_CHECKING:
    from triggerfish_cli.cli.output import Output
    from triggerfish_cli.storage.provider import StorageProvider


#: Whether this run is the whole process (the console entry point, cli/app.py ``main``),
#: which ends with its command; under CliRunner (tests) commands share a long-lived one.
_WHOLE_PROCESS = [False]


def own_process() -> None:
    """Called by the entry point: process-wide choices are this run's to make."""
    _WHOLE_PROCESS[0] = True


@dataclass
class AppState:
    #: --db as given: a store address or a SQLite path (storage/factory.py).
    db: str | None = None
    config: Path | None = None
    backend: str | None = None
    #: Where --db and --backend came from: the option, or its environment variable.
    db_from: str = "--db"
    backend_from: str = "--backend"
    fmt: str = "table"
    quiet: bool = False
    color: bool = True
    debug: bool = False
    columns: str | None = None
    wide: bool = False
    headers: bool = True
    totals: bool | None = None
    _settings: Settings | None = None
    _providers: list[Any] = field(default_factory=list)
    #: How many notices of each provider (by id) were printed.
    _told: dict[int, int] = field(default_factory=dict)

    @property
    def owns_process(self) -> bool:
        """This run is the whole process (see :func:`own_process`)."""
        return _WHOLE_PROCESS[0]

    @property
    def config_path(self) -> Path:
        return self.config if self.config is not None else default_config_path()

    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.config_path, explicit=self.config is not None)
        return self._settings

    def use_settings(self, settings: Settings) -> None:
        """Work with ``settings`` instead of the config file's (which cannot be read)."""
        self._settings = settings

    def storage_config(self) -> StorageConfig:
        # lazy: storage.factory adds 32 modules to `--help`
        from triggerfish_cli.storage.factory import resolve_storage

        return resolve_storage(
            self.settings(),
            db=self.db,
            backend=self.backend,
            db_from=self.db_from,
            backend_from=self.backend_from,
        )

    def provider(self, *, create: bool = False) -> StorageProvider:
        """Open the store once per invocation; it is closed when the command ends.

        A store that does not exist is exit 7 naming it and how it was chosen;
        only ``create`` (demo create, kv import --create, a restore into an empty
        target) makes one.
        """
        if self._providers:
            return self._providers[0]  # type: ignore[no-any-return]
        # lazy: storage.factory adds 32 modules to `--help`
        from triggerfish_cli.storage.factory import open_provider

        provider = open_provider(self.storage_config(), create=create)
        self._providers.append(provider)
        self.tell(provider)
        return provider

    def opened(self) -> StorageProvider | None:
        """The store this invocation opened, if it did."""
        return self._providers[0] if self._providers else None

    def keep(self, provider: StorageProvider) -> StorageProvider:
        """Close ``provider`` (opened by the command) when the command ends, with the rest."""
        self._providers.append(provider)
        self.tell(provider)
        return provider

    def tell(self, provider: StorageProvider) -> None:
        """Warn on stderr of what ``provider`` noted since the last look (its notices: a
        process that a run of ours that died had left stopped, resumed)."""
        notices = provider.notices()
        told = self._told.get(id(provider), 0)
        if len(notices) > told:
            out = self.output()
            for notice in notices[told:]:
                out.warn(notice)
            self._told[id(provider)] = len(notices)

    def close(self) -> None:
        while self._providers:
            provider = self._providers.pop()
            try:
                provider.close()
            finally:
                self.tell(provider)

    def output(self, fmt: str | None = None, quiet: bool | None = None) -> Output:
        # lazy: cli.output adds 19 modules to `--help`
        from triggerfish_cli.cli.output import Output
        from triggerfish_cli.cli.output.text import TableOptions, parse_columns

        return Output(
            fmt or self.fmt,
            quiet=self.quiet if quiet is None else quiet,
            color=self.color,
            table=TableOptions(parse_columns(self.columns), self.wide, self.headers, self.totals),
        )


def state(ctx: typer.Context) -> AppState:
    """The AppState of this invocation (a default one when a sub-app runs alone)."""
    root = ctx.find_root()
    if not isinstance(root.obj, AppState):
        root.obj = AppState()
        root.call_on_close(root.obj.close)
    return root.obj
