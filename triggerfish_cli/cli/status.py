"""`triggerfish-admin status`: which store am I on, and who else is on it."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from triggerfish_cli.cli.backup.options import EndpointOpt
from triggerfish_cli.cli.context import AppState
from triggerfish_cli.cli.options import FormatOpt, begin, fmt_value
from triggerfish_cli.cli.output import Output
from triggerfish_cli.cli.output.text import Column
from triggerfish_cli.cli.status_rows import status_rows
from triggerfish_cli.errors import MissingStoreError, TriggerfishError, UsageError

HELP = (
    "Which store am I on, and who else is on it. Reads only.\n\n"
    "The backend and where the store is (path, DSN or bucket; never a password), how it "
    "was chosen (--db, an environment variable, the storage: section, or the gateway's "
    "default: TRIGGERFISH_DATA_DIR, Docker's /data, ~/.triggerfish), whether it exists, "
    "its id; on SQLite its size, WAL size, journal mode and the live writers (pid, "
    "command, user, whether we may pause them, whether one is stopped); the gateway "
    "daemon (<base>/daemon.json); "
    "the last sweep and backup recorded in the store, the newest backup of this store in "
    "the default destination, memory index drift (counts) and the config versions held. "
    "--format json for monitoring. Exit 7 when the store does not exist.\n\n"
    "--check: a monitoring plugin (Nagios, Icinga, Sensu, ...). It checks the age of the "
    "newest verified backup of this store (--backup-age; an encrypted one verified without "
    "its key counts), the time since a verify checked a backup's contents "
    "(--full-verify-age), the time since the last successful sweep of every namespace "
    "(--sweep-age), the WAL size (--wal-size), memory index drift "
    "(--index-drift), the config versions held (--config-versions, alerting when fewer) "
    "and that the backup destination can be reached (--backups, --endpoint-url); a live "
    "writer stopped (state T) is CRITICAL. Limits "
    "are WARN[:CRIT] (26h:50h, 64MiB:256MiB, 0:100) or off, from the flags, else the "
    "checks: section of triggerfish.yaml, else the defaults (backup and sweep 26h:50h, "
    "full verify 8d, WAL 64MiB:256MiB, drift 0:100, config versions 1). Only this "
    "store's records count: those naming its id. It prints a status line "
    "(TRIGGERFISH <STATE> - ... | perfdata) and one line per finding; --format json gives "
    "the same findings. With --check the exit codes are the plugin convention's, not the "
    "usual ones: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the worst finding wins; any "
    "error, a store that does not exist included, is UNKNOWN with one line). It reads "
    "only."
)

app = typer.Typer(
    name="status",
    help=HELP,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _limit_opt(name: str, example: str, what: str) -> Any:
    return typer.Option(
        f"--{name}",
        metavar="WARN[:CRIT]",
        help=f"With --check: {what} (e.g. {example}; off turns it off).",
        show_default=False,
    )


CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Check thresholds as a monitoring plugin: exit 0 OK, 1 WARNING, 2 CRITICAL, "
        "3 UNKNOWN (not the usual exit codes).",
    ),
]
BackupAgeOpt = Annotated[
    str | None,
    _limit_opt("backup-age", "26h:50h", "the newest verified backup of this store older than"),
]
FullVerifyAgeOpt = Annotated[
    str | None,
    _limit_opt(
        "full-verify-age",
        "8d",
        "the last verify that checked a backup's contents (with the key, for an "
        "encrypted one) older than",
    ),
]
SweepAgeOpt = Annotated[
    str | None,
    _limit_opt("sweep-age", "26h:50h", "the last successful retention sweep older than"),
]
WalSizeOpt = Annotated[
    str | None, _limit_opt("wal-size", "64MiB:256MiB", "the SQLite WAL larger than")
]
IndexDriftOpt = Annotated[
    str | None,
    _limit_opt("index-drift", "0:100", "more memory index entries to fix than"),
]
ConfigVersionsOpt = Annotated[
    str | None,
    _limit_opt("config-versions", "3:1", "fewer stored config versions than"),
]
BackupsOpt = Annotated[
    str | None,
    typer.Option(
        "--backups",
        metavar="DIR|s3://BUCKET/PREFIX",
        help="With --check: the backup destination to check (default: checks.backups, "
        "else <base>/backups/store/).",
        show_default=False,
    ),
]


@app.command("status", help=HELP)
def status_cmd(
    ctx: typer.Context,
    fmt: FormatOpt = None,
    check: CheckOpt = False,
    backup_age: BackupAgeOpt = None,
    full_verify_age: FullVerifyAgeOpt = None,
    sweep_age: SweepAgeOpt = None,
    wal_size: WalSizeOpt = None,
    index_drift: IndexDriftOpt = None,
    config_versions: ConfigVersionsOpt = None,
    backups: BackupsOpt = None,
    endpoint_url: EndpointOpt = None,
) -> None:
    # lazy: triggerfish_cli.status adds 1 module to `status --help`
    from triggerfish_cli.status import collect

    st, out = begin(ctx, fmt)
    flags = {
        "backup_age": backup_age,
        "full_verify_age": full_verify_age,
        "sweep_age": sweep_age,
        "wal_size": wal_size,
        "index_drift": index_drift,
        "config_versions": config_versions,
        "backups": backups,
        "endpoint_url": endpoint_url,
    }
    if check:
        raise typer.Exit(run_check(st, fmt_value(fmt), flags))
    given = [name for name, value in flags.items() if value is not None]
    if given:
        raise UsageError(f"--{given[0].replace('_', '-')} only applies with --check")
    report = collect(st.storage_config(), st.provider)
    if report.exists:
        show(out, report.as_dict())
    else:  # a monitor gets the report of a missing store too (a table only the error)
        out.result(report.as_dict(), lambda: None)
        raise report.missing or MissingStoreError(f"no Triggerfish store at {report.location}")


def show(out: Output, document: dict[str, Any]) -> None:
    def table() -> None:
        rows = status_rows(document)
        out.record(rows, [Column(name, name) for name in rows])

    out.result(document, table, always=True)


def run_check(st: AppState, fmt: str | None, flags: dict[str, str | None]) -> int:
    """``status --check``: the plugin's output and exit code; any error is UNKNOWN (3)."""
    # lazy: checks.limits and checks.run add 24 modules (hashlib, concurrent) to `status --help`
    from triggerfish_cli.checks.limits import thresholds
    from triggerfish_cli.checks.run import failed, run_checks

    out = st.output(fmt, quiet=False)
    try:
        settings = st.settings()
        limits = thresholds(settings.data.get("checks"), flags, settings.path)
        report = run_checks(st.storage_config(), st.provider, limits)
    except Exception as exc:  # a plugin says UNKNOWN, whatever went wrong
        message = str(exc) if isinstance(exc, TriggerfishError) else f"{type(exc).__name__}: {exc}"
        report = failed(" ".join(message.split()))
    out.result(
        report.as_dict(), lambda: out.stdout.write("\n".join(report.lines()) + "\n"), always=True
    )
    return report.exit_code
