"""`triggerfish-admin config`: snapshot, history, show, diff, rollback, import, validate."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from tests.conftest import CliFn, StoreHandle

BASE_CONFIG = """\
# Triggerfish, the owner's gateway
models:
  primary:
    provider: anthropic
    model: claude-sonnet-4-5
  providers:
    anthropic:
      model: claude-sonnet-4-5
      apiKey: "secret:provider:anthropic:apiKey"
channels:
  telegram:
    ownerId: 123456789
    classification: INTERNAL
logging:
  level: normal
"""

# Plain-text secrets in the real formats (fake values).
TELEGRAM = "7890123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"
SLACK_SIGNING = "8f14e45fceea167a5a36dedd4bea2543"
SMTP = "correct horse battery staple"
SECRETS = (TELEGRAM, SLACK_SIGNING, SMTP)

WITH_SECRETS = BASE_CONFIG.replace(
    "    ownerId: 123456789\n",
    f"    ownerId: 123456789\n    botToken: '{TELEGRAM}'\n",
).replace(
    "logging:\n",
    f'  slack:\n    signingSecret: {SLACK_SIGNING}\n  email:\n    smtpPassword: "{SMTP}"\n'
    "logging:\n",
)


@pytest.fixture
def section(request: pytest.FixtureRequest, base_dir: Path) -> str:
    """The storage: section naming a Postgres or S3 store ('' for SQLite, reached by --db).

    On those backends the store is named by the managed file itself, so every
    text the tests write there starts with it.
    """
    if "store" not in request.fixturenames:
        return ""
    store: StoreHandle = request.getfixturevalue("store")
    if store.backend == "sqlite":
        return ""
    return (base_dir / "triggerfish.yaml").read_text()


def managed(path: Path, section: str) -> Path:
    """``path`` whose ``write_text`` puts ``section`` first, and whose reads check that
    it is still there (a rollback keeps the store) and leave it out."""

    def write_text(self: Path, data: str, *args: object, **kwargs: object) -> int:
        return Path.write_text(self, section + data, *args, **kwargs)  # type: ignore[arg-type]

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        text = Path.read_text(self, *args, **kwargs)  # type: ignore[arg-type]
        assert text.startswith(section), "the storage: section was lost"
        return text[len(section) :]

    def write_bytes(self: Path, data: bytes) -> int:
        return Path.write_bytes(self, section.encode("utf-8") + data)

    def read_bytes(self: Path) -> bytes:
        data = Path.read_bytes(self)
        assert data.startswith(section.encode("utf-8")), "the storage: section was lost"
        return data[len(section.encode("utf-8")) :]

    methods = {
        "write_text": write_text,
        "read_text": read_text,
        "write_bytes": write_bytes,
        "read_bytes": read_bytes,
    }
    cls = type("ManagedConfig", (type(path),), {"section": section, **methods})
    return cls(path)  # type: ignore[no-any-return]


@pytest.fixture
def default_store(base_dir: Path) -> Path:
    """The default SQLite store, made explicitly (no command creates it on its own)."""
    from triggerfish_cli.storage.sqlite.backend import SqliteStorage

    path = base_dir / "data" / "triggerfish.db"
    SqliteStorage(path, create=True).close()
    return path


@pytest.fixture
def config(base_dir: Path, section: str) -> Path:
    path = managed(base_dir / "triggerfish.yaml", section)
    path.write_text(BASE_CONFIG)
    return path


def section_of(config: Path) -> str:
    """The storage: section every text written to ``config`` starts with ('' on SQLite)."""
    return str(getattr(config, "section", ""))


def versions(store: StoreHandle) -> dict[int, dict[str, object]]:
    return {
        int(key.split(":v")[1]): json.loads(value)
        for key, value in store.contents().items()
        if key.startswith("config:v")
    }


def assert_no_secrets(store: StoreHandle, *outputs: object) -> None:
    """No secret value anywhere in the store (every key and value) nor in what was printed."""
    for key, value in store.contents().items():
        for secret in SECRETS:
            assert secret not in key and secret not in value, key
    for output in outputs:
        text = f"{getattr(output, 'stdout', '')}{getattr(output, 'stderr', '')}"
        for secret in SECRETS:
            assert secret not in text


def ok(result: object) -> object:
    assert getattr(result, "exit_code") == 0, getattr(result, "stderr")  # noqa: B009
    return result


# -- snapshot, history, show --------------------------------------------------------------


def test_snapshot_history_show(cli: CliFn, store: StoreHandle, config: Path) -> None:
    first = cli(*store.args, "config", "snapshot", "-m", "initial setup")
    assert first.exit_code == 0, first.stderr
    section = section_of(config)
    assert first.stdout == f"stored {config} as v1 ({len(section + BASE_CONFIG)} bytes)\n"
    same = cli(*store.args, "config", "snapshot")
    assert same.exit_code == 0 and "unchanged" in same.stdout and "v1" in same.stdout
    assert list(versions(store)) == [1]

    config.write_text(BASE_CONFIG.replace("normal", "verbose"))
    second = cli(*store.args, "config", "snapshot", "--reason", "debugging", "-f", "json").json()
    assert second == {
        "config": str(config),
        "stored": True,
        "unchanged": False,
        "version": 2,
        "sha256": versions(store)[2]["sha256"],
        "bytes": len(section + BASE_CONFIG) + 1,
        "redacted": [],
        "evicted": [],
        "dry_run": False,
    }
    rows = cli(*store.args, "config", "history", "-f", "json").json()
    assert [(r["version"], r["reason"], r["source"], r["current"]) for r in rows] == [  # type: ignore[index]
        (1, "initial setup", "snapshot", False),
        (2, "debugging", "snapshot", True),
    ]
    assert set(rows[0]) == {  # type: ignore[index]
        "version", "created_at", "user", "reason", "source", "bytes", "sha256",
        "redacted", "restored_from", "imported_from", "current",
    }  # fmt: skip
    table = ok(cli(*store.args, "config", "history"))
    assert "<- now" in table.stdout and "initial setup" in table.stdout  # type: ignore[attr-defined]

    assert cli(*store.args, "config", "show", "1").stdout == section + BASE_CONFIG
    assert cli(*store.args, "config", "show", "v1").stdout == section + BASE_CONFIG
    assert "verbose" in cli(*store.args, "config", "show").stdout
    shown = cli(*store.args, "config", "show", "2", "-f", "json").json()
    assert shown["yaml"] == section + config.read_text() and shown["version"] == 2  # type: ignore[index]
    audit = [json.loads(v) for k, v in store.contents().items() if k.startswith("audit:")]
    assert [a["hook"] for a in audit] == ["admin_config_snapshot"] * 2
    assert all("yaml" not in a for a in audit)


def test_version_arguments_and_missing_versions(
    cli: CliFn, store: StoreHandle, config: Path
) -> None:
    assert cli(*store.args, "config", "show").exit_code == 3
    ok(cli(*store.args, "config", "snapshot"))
    assert cli(*store.args, "config", "show", "x1").exit_code == 2
    missing = cli(*store.args, "config", "show", "9")
    assert missing.exit_code == 3 and "v9" in missing.stderr and "stored: v1" in missing.stderr


def test_snapshot_of_a_missing_file_is_exit_3(
    cli: CliFn, store: StoreHandle, base_dir: Path
) -> None:
    (base_dir / "triggerfish.yaml").unlink(missing_ok=True)  # Postgres and S3 name it with --config
    result = cli(*store.args, "config", "snapshot")
    assert result.exit_code == 3 and "not found" in result.stderr


def test_eleventh_version_removes_the_oldest_and_numbering_continues(
    cli: CliFn, store: StoreHandle, config: Path
) -> None:
    for n in range(11):
        config.write_text(BASE_CONFIG + f"# edit {n}\n")
        ok(cli(*store.args, "config", "snapshot"))
    assert sorted(versions(store)) == list(range(2, 12))
    config.write_text(BASE_CONFIG + "# edit 11\n")
    result = cli(*store.args, "config", "snapshot", "-f", "json").json()
    assert result["version"] == 12 and result["evicted"] == [2]  # type: ignore[index]
    assert sorted(versions(store)) == list(range(3, 13))
    assert cli(*store.args, "config", "show", "2").exit_code == 3
    dry = cli(*store.args, "config", "snapshot", "--dry-run", "-f", "json")
    assert dry.json()["unchanged"] is True and dry.json()["version"] == 12  # type: ignore[index]
    config.write_text(BASE_CONFIG + "# edit 12\n")
    before = store.contents()
    planned = cli(*store.args, "config", "snapshot", "--dry-run", "-f", "json").json()
    assert planned["version"] == 13 and planned["evicted"] == [3] and planned["dry_run"]  # type: ignore[index]
    assert store.contents() == before


# -- diff ---------------------------------------------------------------------------------


def test_diff_text_and_changed_keys(cli: CliFn, store: StoreHandle, config: Path) -> None:
    ok(cli(*store.args, "config", "snapshot"))
    same = ok(cli(*store.args, "config", "diff"))
    assert same.stdout == "" and "no differences" in same.stderr  # type: ignore[attr-defined]
    config.write_text(
        BASE_CONFIG.replace(
            "claude-sonnet-4-5\n  providers", "claude-opus-4-5\n  providers"
        ).replace("logging:\n  level: normal\n", "web:\n  search:\n    provider: brave\n")
    )
    text = ok(cli(*store.args, "config", "diff")).stdout  # type: ignore[attr-defined]
    assert text.startswith("--- v1\n+++ triggerfish.yaml (on disk)\n@@ ")
    assert "-    model: claude-sonnet-4-5\n+    model: claude-opus-4-5\n" in text
    assert "\x1b[" not in text  # never colour off a TTY
    document = cli(*store.args, "config", "diff", "-f", "json").json()
    assert document == {
        "from": "v1",
        "to": "current",
        "identical": False,
        "changes": [
            {"path": "models.primary.model", "change": "changed",
             "old": "claude-sonnet-4-5", "new": "claude-opus-4-5"},
            {"path": "logging.level", "change": "removed", "old": "normal", "new": None},
            {"path": "web.search.provider", "change": "added", "old": None, "new": "brave"},
        ],
    }  # fmt: skip
    ok(cli(*store.args, "config", "snapshot"))
    between = cli(*store.args, "config", "diff", "2", "v1", "-f", "json").json()
    assert between["from"] == "v2" and between["to"] == "v1"  # type: ignore[index]
    assert between["changes"][0]["old"] == "claude-opus-4-5"  # type: ignore[index]
    csv_lines = cli(*store.args, "config", "diff", "1", "current", "-f", "csv").stdout.splitlines()
    assert csv_lines[0] == "path,change,old,new" and len(csv_lines) == 4


def test_diff_is_coloured_only_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from triggerfish_cli.cli.output import Output

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    diff = "--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new\n"
    tty, pipe = Tty(), io.StringIO()
    Output(stdout=tty).diff(diff)
    Output(stdout=pipe).diff(diff)
    assert pipe.getvalue() == diff
    assert "\x1b[" in tty.getvalue() and "+new" in tty.getvalue()
    plain = Tty()
    Output(stdout=plain, color=False).diff(diff)
    assert plain.getvalue() == diff


# -- rollback ------------------------------------------------------------------------------

AWKWARD = (
    '# crlf, unicode, no final newline\r\nmodels:\r\n  primary: {model: "é—☃"}\r\n'
    "logging: {level: debug}"
)


def test_rollback_round_trips_byte_for_byte_and_keeps_the_mode(
    cli: CliFn, store: StoreHandle, config: Path
) -> None:
    config.write_bytes(AWKWARD.encode("utf-8"))
    config.chmod(0o640)
    ok(cli(*store.args, "config", "snapshot", "-m", "good"))
    config.write_text(BASE_CONFIG)
    result = cli(*store.args, "config", "rollback", "1", "--yes", "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert config.read_bytes() == AWKWARD.encode("utf-8")
    assert config.stat().st_mode & 0o777 == 0o640
    document = result.json()
    assert document["target"] == 1 and document["snapshot"] == 2  # type: ignore[index]
    assert document["version"] == 3 and document["written"] is True  # type: ignore[index]
    stored = versions(store)
    section = section_of(config)
    assert stored[2]["source"] == "snapshot" and stored[2]["yaml"] == section + BASE_CONFIG
    assert stored[2]["reason"] == "before rollback to v1"
    assert stored[3]["source"] == "rollback" and stored[3]["restoredFrom"] == 1
    assert stored[3]["yaml"] == section + AWKWARD
    # Rolling back again (default target) undoes it, byte for byte too.
    again = cli(*store.args, "config", "rollback", "--yes")
    assert again.exit_code == 0, again.stderr
    assert "back to v2" in again.stdout
    assert config.read_bytes() == BASE_CONFIG.encode("utf-8")
    assert sorted(versions(store)) == [1, 2, 3, 4]  # already a version: no extra snapshot
    hooks = [json.loads(v)["hook"] for k, v in store.contents().items() if k.startswith("audit:")]
    assert (
        hooks == ["admin_config_snapshot", "admin_config_snapshot"] + ["admin_config_rollback"] * 2
    )
    assert cli(*store.args, "config", "rollback", "4", "--yes").stdout.endswith("already is v4\n")


def test_default_target_is_the_version_before_the_newest(
    cli: CliFn, store: StoreHandle, config: Path
) -> None:
    ok(cli(*store.args, "config", "snapshot"))
    config.write_text(BASE_CONFIG + "# second\n")
    ok(cli(*store.args, "config", "snapshot"))
    plan = cli(*store.args, "config", "rollback", "--dry-run", "-f", "json").json()
    assert plan["target"] == 1 and plan["from_version"] == 2  # type: ignore[index]
    assert plan["snapshot_first"] is False  # type: ignore[index]
    config.write_text(BASE_CONFIG + "# third, not stored yet\n")
    plan = cli(*store.args, "config", "rollback", "--dry-run", "-f", "json").json()
    assert plan["target"] == 2 and plan["snapshot_first"] is True  # type: ignore[index]
    done = cli(*store.args, "config", "rollback", "--yes", "-f", "json").json()
    noop = cli(*store.args, "config", "rollback", "4", "--yes", "-f", "json").json()
    assert set(plan) == set(done) == set(noop)  # type: ignore[arg-type]
    assert (done["snapshot"], done["version"], done["written"]) == (3, 4, True)  # type: ignore[index]
    assert (noop["changed"], noop["written"], noop["version"]) == (False, False, None)  # type: ignore[index]


def test_rollback_asks_on_a_tty_and_needs_yes_otherwise(
    cli: CliFn, store: StoreHandle, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli.cli import output

    ok(cli(*store.args, "config", "snapshot"))
    config.write_text(BASE_CONFIG + "# changed\n")
    refused = cli(*store.args, "config", "rollback", "1")
    assert refused.exit_code == 4 and "--yes" in refused.stderr
    assert "-# changed" in refused.stderr  # the diff was shown first
    assert config.read_text() == BASE_CONFIG + "# changed\n" and sorted(versions(store)) == [1]
    monkeypatch.setattr(output.Output, "stdin_is_tty", property(lambda self: True))
    no = cli(*store.args, "config", "rollback", "1", input="n\n")
    assert no.exit_code == 4 and config.read_text() == BASE_CONFIG + "# changed\n"
    yes = cli(*store.args, "config", "rollback", "1", input="y\n")
    assert yes.exit_code == 0, yes.stderr
    assert config.read_text() == BASE_CONFIG


def test_rollback_dry_run_touches_nothing(
    cli: CliFn, store: StoreHandle, config: Path, base_dir: Path
) -> None:
    ok(cli(*store.args, "config", "snapshot"))
    config.write_text(BASE_CONFIG + "# changed\n")
    before = store.contents()
    result = cli(*store.args, "config", "rollback", "1", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "-# changed" in result.stdout and "would snapshot" in result.stdout
    assert store.contents() == before
    assert config.read_text() == BASE_CONFIG + "# changed\n"


def _untouched(config: Path, text: str) -> None:
    assert config.read_text() == text
    leftovers = [p.name for p in config.parent.iterdir() if p.name.startswith(".triggerfish")]
    assert leftovers == []


def test_disk_full_leaves_the_old_file_untouched(
    cli: CliFn, store: StoreHandle, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok(cli(*store.args, "config", "snapshot"))
    edited = BASE_CONFIG + "# changed\n"
    config.write_text(edited)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    result = cli(*store.args, "config", "rollback", "1", "--yes")
    assert result.exit_code == 9  # cannot write
    assert "No space left on device" in result.stderr and "unchanged" in result.stderr
    assert str(config) in result.stderr.splitlines()[-1]  # after the diff: one line
    _untouched(config, edited)
    stored = versions(store)
    assert sorted(stored) == [1, 2] and stored[2]["source"] == "snapshot"  # no rollback recorded


def test_permission_denied_leaves_the_old_file_untouched(
    cli: CliFn, store: StoreHandle, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    ok(cli(*store.args, "config", "snapshot"))
    edited = BASE_CONFIG + "# changed\n"
    config.write_text(edited)
    real = tempfile.mkstemp

    def denied(*args: object, **kwargs: object) -> object:
        if Path(str(kwargs.get("dir"))) == config.parent:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    result = cli(*store.args, "config", "rollback", "1", "--yes")
    assert result.exit_code == 9 and "Permission denied" in result.stderr  # cannot write
    _untouched(config, edited)
    assert all(v["source"] == "snapshot" for v in versions(store).values())


def test_invalid_yaml_is_never_written(
    cli: CliFn, store: StoreHandle, config: Path, base_dir: Path
) -> None:
    config.write_text("models:\n  primary: [unclosed\n")
    broken = cli(*store.args, "config", "snapshot")
    assert broken.exit_code == 0 and "not valid" not in broken.stdout
    assert "invalid YAML" in broken.stderr and "rollback to it will be refused" in broken.stderr
    config.write_text(BASE_CONFIG)
    ok(cli(*store.args, "config", "snapshot"))
    before = store.contents()
    result = cli(*store.args, "config", "rollback", "1", "--yes")
    line = 3 + section_of(config).count("\n")
    assert result.exit_code == 8 and f"line {line}, column 1" in result.stderr
    assert store.contents() == before
    _untouched(config, BASE_CONFIG)


def test_our_sections_are_checked_strictly_before_writing(
    cli: CliFn, store: StoreHandle, config: Path
) -> None:
    if store.backend == "sqlite":
        bad, where = "storage:\n  backend: nosuch\n", "storage.backend"
    else:  # the store is named by the storage: section: break another of ours
        bad, where = "retention:\n  sessions: soon\n", "retention.sessions"
    config.write_text(BASE_CONFIG + bad)
    ok(cli(*store.args, "config", "snapshot"))
    config.write_text(BASE_CONFIG)
    result = cli(*store.args, "config", "rollback", "1", "--yes")
    assert result.exit_code == 8 and where in result.stderr
    _untouched(config, BASE_CONFIG)


def test_a_file_changed_after_the_plan_is_not_overwritten(config: Path) -> None:
    from triggerfish_cli.config import versions as config_versions
    from triggerfish_cli.config.rollback import apply_rollback, plan_rollback
    from triggerfish_cli.errors import BusyError
    from triggerfish_cli.storage.in_memory import MemoryStorage

    provider = MemoryStorage()
    config_versions.snapshot(provider, config)
    config.write_text(BASE_CONFIG + "# mine\n")
    plan = plan_rollback(provider, config, 1)
    config.write_text(BASE_CONFIG + "# the gateway wrote this meanwhile\n")
    with pytest.raises(BusyError, match="changed since"):
        apply_rollback(provider, plan)
    assert config.read_text() == BASE_CONFIG + "# the gateway wrote this meanwhile\n"
    assert config_versions.version_numbers(provider) == [1]


def test_a_symlinked_config_stays_a_symlink(
    cli: CliFn, store: StoreHandle, config: Path, tmp_path: Path
) -> None:
    real = managed(tmp_path / "git" / "triggerfish.yaml", section_of(config))
    real.parent.mkdir()
    real.write_text(BASE_CONFIG)
    real.chmod(0o600)
    config.unlink()
    config.symlink_to(real)
    ok(cli(*store.args, "config", "snapshot"))
    real.write_text(BASE_CONFIG + "# edited in git\n")
    ok(cli(*store.args, "config", "rollback", "--yes"))
    assert config.is_symlink() and config.resolve() == real
    assert real.read_text() == BASE_CONFIG and real.stat().st_mode & 0o777 == 0o600


def test_rollback_recreates_a_deleted_file(cli: CliFn, store: StoreHandle, config: Path) -> None:
    ok(cli(*store.args, "config", "snapshot"))
    config.unlink()
    if store.backend != "sqlite":
        # Only the deleted file named this store: nothing can be found, nothing is written.
        lost = cli(*store.args, "config", "rollback", "--yes")
        assert lost.exit_code == 3 and "config file not found" in lost.stderr
        assert not config.exists()
        return
    result = cli(*store.args, "config", "rollback", "--yes", "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["snapshot"] is None and result.json()["target"] == 1  # type: ignore[index]
    assert config.read_text() == BASE_CONFIG
    assert config.stat().st_mode & 0o777 == 0o600


# -- a broken config file at 3 a.m. --------------------------------------------------------


def test_a_broken_file_still_finds_the_default_store(
    cli: CliFn, config: Path, base_dir: Path, default_store: Path
) -> None:
    ok(cli("config", "snapshot"))
    config.write_text(BASE_CONFIG + "  oops: [\n")
    history = cli("config", "history", "-f", "json")
    assert history.exit_code == 0, history.stderr
    assert [r["version"] for r in history.json()] == [1]  # type: ignore[union-attr]
    result = cli("config", "rollback", "--yes")
    assert result.exit_code == 0, result.stderr
    assert config.read_text() == BASE_CONFIG


def test_a_broken_file_with_a_storage_section_asks_for_the_store(
    cli: CliFn, config: Path, base_dir: Path, default_store: Path
) -> None:
    ok(cli("config", "snapshot"))
    config.write_text(BASE_CONFIG + "storage:\n  path: [\n")
    result = cli("config", "history")
    assert result.exit_code == 8 and "--db" in result.stderr
    db = base_dir / "data" / "triggerfish.db"
    named = cli("--db", str(db), "config", "rollback", "--yes")
    assert named.exit_code == 0 and "invalid YAML" in named.stderr
    assert config.read_text() == BASE_CONFIG


# -- secrets -------------------------------------------------------------------------------


def test_secrets_are_refused_by_name_never_by_value(
    cli: CliFn, store: StoreHandle, config: Path
) -> None:
    config.write_text(WITH_SECRETS)
    result = cli(*store.args, "config", "snapshot")
    assert result.exit_code == 4
    for path in (
        "channels.telegram.botToken",
        "channels.slack.signingSecret",
        "channels.email.smtpPassword",
    ):
        assert path in result.stderr
    assert "--redact" in result.stderr
    assert versions(store) == {}
    assert_no_secrets(store, result)
    with_json = cli(*store.args, "config", "snapshot", "-f", "json")
    assert with_json.exit_code == 4 and with_json.stdout == ""


def test_redacted_versions_never_hold_the_values(
    cli: CliFn, store: StoreHandle, config: Path
) -> None:
    config.write_text(WITH_SECRETS)
    outputs = [cli(*store.args, "config", "snapshot", "--redact", "-m", "with slack")]
    assert outputs[0].exit_code == 0, outputs[0].stderr
    assert "redacted 3 plain-text secret(s)" in outputs[0].stderr
    record = versions(store)[1]
    assert [r["path"] for r in record["redacted"]] == [  # type: ignore[attr-defined]
        "channels.telegram.botToken", "channels.slack.signingSecret", "channels.email.smtpPassword",
    ]  # fmt: skip
    assert record["yaml"].count('"<redacted>"') == 3  # type: ignore[attr-defined]
    outputs.append(cli(*store.args, "config", "snapshot", "--redact"))
    assert "unchanged" in outputs[-1].stdout
    outputs.append(cli(*store.args, "config", "snapshot"))  # unchanged: nothing to refuse
    assert outputs[-1].exit_code == 0
    history = cli(*store.args, "config", "history", "-f", "json")
    assert history.json()[0]["current"] is True  # type: ignore[index]
    outputs += [history, cli(*store.args, "config", "show"), cli(*store.args, "config", "diff")]
    assert "no differences" in outputs[-1].stderr
    config.write_text(WITH_SECRETS.replace("normal", "debug").replace(SMTP, "another secret value"))
    outputs.append(cli(*store.args, "config", "diff", "-f", "json"))
    assert outputs[-1].json()["changes"] == [  # type: ignore[index]
        {"path": "logging.level", "change": "changed", "old": "normal", "new": "debug"}
    ]
    outputs.append(cli(*store.args, "config", "diff"))
    assert "another secret value" not in outputs[-1].stdout
    outputs.append(cli(*store.args, "config", "validate"))
    assert (
        outputs[-1].exit_code == 0
        and "plain-text secret at channels.email.smtpPassword" in outputs[-1].stdout
    )
    assert_no_secrets(store, *outputs)


def test_rollback_to_a_redacted_version_needs_the_values_again(
    cli: CliFn, store: StoreHandle, config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config.write_text(WITH_SECRETS)
    ok(cli(*store.args, "config", "snapshot", "--redact"))
    config.write_text(BASE_CONFIG)
    ok(cli(*store.args, "config", "snapshot"))
    outputs = [cli(*store.args, "config", "rollback", "1", "--yes")]
    assert outputs[0].exit_code == 4 and "channels.telegram.botToken" in outputs[0].stderr
    assert config.read_text() == BASE_CONFIG
    dry = cli(*store.args, "config", "rollback", "1", "--dry-run", "-f", "json")
    assert dry.json()["secrets_missing"] == [  # type: ignore[index]
        "channels.telegram.botToken", "channels.slack.signingSecret", "channels.email.smtpPassword",
    ]  # fmt: skip
    outputs.append(dry)
    # From a file (nested like the config itself, or flat dotted paths; - is stdin).
    secrets_file = tmp_path / "secrets.yaml"
    secrets_file.write_text(
        f"channels:\n  telegram:\n    botToken: '{TELEGRAM}'\n"
        f"channels.slack.signingSecret: {SLACK_SIGNING}\nchannels.email.smtpPassword: {SMTP}\n"
    )
    outputs.append(
        cli(*store.args, "config", "rollback", "1", "--yes", "--secrets-file", str(secrets_file))
    )
    assert outputs[-1].exit_code == 0, outputs[-1].stderr
    assert config.read_text() == WITH_SECRETS  # byte for byte, secrets in their own quoting
    assert versions(store)[3]["redacted"]  # the rollback's record is redacted too
    assert_no_secrets(store, *outputs)
    # From the current file: back to v2, then forward again to v1 taking them from... v2
    # has none, so it refuses; from a file that has them it works.
    ok(cli(*store.args, "config", "rollback", "2", "--yes"))
    refused = cli(*store.args, "config", "rollback", "1", "--yes", "--secrets-from-current")
    assert refused.exit_code == 4
    config.write_text(WITH_SECRETS.replace("normal", "debug"))
    outputs.append(
        cli(*store.args, "config", "rollback", "1", "--yes", "--secrets-from-current", "--redact")
    )
    assert outputs[-1].exit_code == 0, outputs[-1].stderr
    assert config.read_text() == WITH_SECRETS
    # On a TTY the operator is asked for each value, hidden.
    from triggerfish_cli.cli import output
    from triggerfish_cli.cli.config import rollback as config_cli

    ok(cli(*store.args, "config", "rollback", "2", "--yes"))
    asked: list[str] = []
    answers = {
        "channels.telegram.botToken": TELEGRAM,
        "channels.slack.signingSecret": SLACK_SIGNING,
        "channels.email.smtpPassword": SMTP,
    }
    monkeypatch.setattr(output.Output, "stdin_is_tty", property(lambda self: True))
    monkeypatch.setattr(config_cli, "_ask", lambda path: asked.append(path) or answers[path])
    outputs.append(cli(*store.args, "config", "rollback", "1", input="y\n"))
    assert outputs[-1].exit_code == 0, outputs[-1].stderr
    assert asked == list(answers) and config.read_text() == WITH_SECRETS
    assert_no_secrets(store, *outputs)


def test_rollback_over_a_file_with_secrets_snapshots_it_redacted_and_keeps_a_copy(
    cli: CliFn, store: StoreHandle, config: Path, base_dir: Path
) -> None:
    from triggerfish_cli.config.files import backup_time

    ok(cli(*store.args, "config", "snapshot"))
    config.write_text(WITH_SECRETS)
    refused = cli(*store.args, "config", "rollback", "1", "--yes")
    assert refused.exit_code == 4 and "--redact" in refused.stderr
    assert config.read_text() == WITH_SECRETS
    result = cli(*store.args, "config", "rollback", "1", "--yes", "--redact")
    assert result.exit_code == 0, result.stderr
    assert config.read_text() == BASE_CONFIG
    copies = list((base_dir / "backups").iterdir())
    assert len(copies) == 1 and backup_time(copies[0].name, "triggerfish.yaml") is not None
    assert (
        copies[0].read_text() == section_of(config) + WITH_SECRETS
        and copies[0].stat().st_mode & 0o777 == 0o600
    )
    assert versions(store)[2]["redacted"] and versions(store)[3]["restoredFrom"] == 1
    audit = [json.loads(v) for k, v in store.contents().items() if k.startswith("audit:")]
    assert audit[-1]["hook"] == "admin_config_rollback"
    assert audit[-1]["backupCopy"] == str(copies[0])
    assert audit[-2]["redacted"] == [
        "channels.telegram.botToken", "channels.slack.signingSecret", "channels.email.smtpPassword",
    ]  # fmt: skip
    assert_no_secrets(store, refused, result)


# -- import of the gateway's backups ---------------------------------------------------------


def gateway_backups(base_dir: Path, files: dict[str, str], section: str = "") -> Path:
    """The gateway's copies of the file (each with the file's storage: section, if any)."""
    directory = base_dir / "backups"
    directory.mkdir(exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(section + text if name.startswith("triggerfish") else text)
    return directory


def test_import_backups_with_the_gateways_names(
    cli: CliFn, store: StoreHandle, config: Path, base_dir: Path
) -> None:
    gateway_backups(
        base_dir,
        {
            "triggerfish.yaml.2026-02-16T14-30-45.123Z": BASE_CONFIG + "# b\n",
            "triggerfish.yaml.2026-02-15T09-00-00.000Z": BASE_CONFIG + "# a\n",
            "triggerfish.yaml.2026-02-17T08-15-00.500Z": BASE_CONFIG + "# b\n",  # repeats b
            "triggerfish.yaml.2026-02-18T10-00-00.001Z": BASE_CONFIG,
            "triggerfish.yaml.bak": "ignored: true\n",
            "other.yaml.2026-02-16T14-30-45.123Z": "ignored: true\n",
        },
        section_of(config),
    )
    dry = cli(*store.args, "config", "import-backups", "--dry-run", "-f", "json").json()
    assert [r["version"] for r in dry["imported"]] == [1, 2, 3]  # type: ignore[index]
    assert versions(store) == {}
    result = cli(*store.args, "config", "import-backups", "-f", "json")
    assert result.exit_code == 0, result.stderr
    document = result.json()
    assert [(r["file"], r["version"]) for r in document["imported"]] == [  # type: ignore[index]
        ("triggerfish.yaml.2026-02-15T09-00-00.000Z", 1),
        ("triggerfish.yaml.2026-02-16T14-30-45.123Z", 2),
        ("triggerfish.yaml.2026-02-18T10-00-00.001Z", 3),
    ]
    assert document["skipped"] == [  # type: ignore[index]
        {
            "file": "triggerfish.yaml.2026-02-17T08-15-00.500Z",
            "created_at": "2026-02-17T08:15:00.500Z",
            "skipped": "same as triggerfish.yaml.2026-02-16T14-30-45.123Z",
        },
    ]
    stored = versions(store)
    assert stored[2]["createdAt"] == "2026-02-16T14:30:45.123Z" and stored[2]["source"] == "import"
    assert stored[2]["importedFrom"] == "triggerfish.yaml.2026-02-16T14-30-45.123Z"
    assert stored[3]["yaml"] == section_of(config) + BASE_CONFIG
    assert cli(*store.args, "config", "history", "-f", "json").json()[2]["current"] is True  # type: ignore[index]
    again = cli(*store.args, "config", "import-backups", "-f", "json").json()
    assert again["imported"] == [] and len(again["skipped"]) == 4  # type: ignore[index]
    assert sorted(versions(store)) == [1, 2, 3]


def test_import_refuses_secrets_and_skips_older_copies(
    cli: CliFn, store: StoreHandle, config: Path, base_dir: Path
) -> None:
    ok(cli(*store.args, "config", "snapshot"))
    newest = versions(store)[1]["createdAt"]
    gateway_backups(
        base_dir,
        {
            "triggerfish.yaml.2026-01-01T00-00-00.000Z": BASE_CONFIG + "# old\n",
            "triggerfish.yaml.2099-01-01T00-00-00.000Z": WITH_SECRETS,
        },
    )
    refused = cli(*store.args, "config", "import-backups")
    assert refused.exit_code == 4 and "channels.telegram.botToken" in refused.stderr
    assert sorted(versions(store)) == [1]
    result = cli(*store.args, "config", "import-backups", "--redact", "-f", "json").json()
    assert [r["version"] for r in result["imported"]] == [2]  # type: ignore[index]
    assert result["skipped"][0]["skipped"] == "older than the newest version v1"  # type: ignore[index]
    assert newest < "2099"
    older = cli(*store.args, "config", "import-backups", "--include-older", "-f", "json").json()
    assert [r["version"] for r in older["imported"]] == [3]  # type: ignore[index]
    assert_no_secrets(store, refused)


def test_import_keeps_only_what_fits_the_window(
    cli: CliFn, store: StoreHandle, config: Path, base_dir: Path
) -> None:
    gateway_backups(
        base_dir,
        {
            f"triggerfish.yaml.2026-02-{day:02d}T00-00-00.000Z": BASE_CONFIG + f"# {day}\n"
            for day in range(1, 13)
        },
    )
    result = cli(*store.args, "config", "import-backups", "-f", "json").json()
    assert len(result["imported"]) == 10 and result["evicted"] == []  # type: ignore[index]
    assert [r["skipped"] for r in result["skipped"]] == ["outside the 10-version window"] * 2  # type: ignore[index]
    assert sorted(versions(store)) == list(range(1, 11))
    assert versions(store)[1]["createdAt"] == "2026-02-03T00:00:00.000Z"


def test_import_backups_reads_base_backups_whatever_the_config_path(
    cli: CliFn, gateway_db: Path, base_dir: Path, tmp_path: Path
) -> None:
    """The gateway writes <base>/backups/triggerfish.yaml.<time> for any config path."""
    elsewhere = tmp_path / "etc" / "gateway.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(BASE_CONFIG)
    gateway_backups(base_dir, {"triggerfish.yaml.2026-02-15T09-00-00.000Z": BASE_CONFIG + "# a\n"})
    beside = elsewhere.parent / "backups"  # what an older version of this tool looked at
    beside.mkdir()
    (beside / "gateway.yaml.2026-02-16T09-00-00.000Z").write_text(BASE_CONFIG + "# beside\n")
    (beside / "triggerfish.yaml.2026-02-17T09-00-00.000Z").write_text(BASE_CONFIG + "# beside\n")
    result = cli("--config", str(elsewhere), "config", "import-backups", "-f", "json")
    assert result.exit_code == 0, result.stderr
    document = result.json()
    assert document["dir"] == str(base_dir / "backups")  # type: ignore[index]
    assert [r["file"] for r in document["imported"]] == [  # type: ignore[index]
        "triggerfish.yaml.2026-02-15T09-00-00.000Z"
    ]
    named = cli("--config", str(elsewhere), "config", "import-backups", "--dir", str(beside))
    assert named.exit_code == 0, named.stderr
    assert "triggerfish.yaml.2026-02-17T09-00-00.000Z" in named.stdout
    assert "gateway.yaml" not in named.stdout  # the prefix is the gateway's, not the file's


def test_import_without_a_backups_directory(
    cli: CliFn, store: StoreHandle, config: Path, tmp_path: Path
) -> None:
    # The default directory not there yet (cron before the gateway's first write): nothing to do.
    quiet = cli(*store.args, "config", "import-backups", "-f", "json")
    assert quiet.exit_code == 0
    assert quiet.json() == {  # type: ignore[comparison-overlap]
        "dir": str(config.parent / "backups"), "imported": [], "skipped": [],
        "evicted": [], "dry_run": False,
    }  # fmt: skip
    named = cli(*store.args, "config", "import-backups", "--dir", str(tmp_path / "typo"))
    assert named.exit_code == 3 and "typo" in named.stderr


# -- validate ---------------------------------------------------------------------------------


def test_validate_a_good_file(cli: CliFn, config: Path) -> None:
    result = cli("config", "validate")
    assert result.exit_code == 0 and result.stdout == ""
    assert "valid (0 warning(s))" in result.stderr
    assert cli("config", "validate", "-f", "json").json() == {
        "file": str(config), "valid": True, "errors": [], "warnings": [],
    }  # fmt: skip


def test_validate_reports_line_and_column(cli: CliFn, tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("models:\n  primary:\n    model: [a, b\nlogging: {}\n")
    result = cli("config", "validate", str(path))
    assert result.exit_code == 8
    assert result.stdout.startswith(f"{path}:4:8: error: invalid YAML:")
    path.write_text("models:\n  primary: {}\n\tlogging: {}\n")
    document = cli("config", "validate", str(path), "-f", "json")
    assert document.exit_code == 8
    error = document.json()["errors"][0]  # type: ignore[index]
    assert (error["line"], error["column"]) == (3, 1)


def test_validate_warns_about_unknown_sections_and_refuses_duplicates(
    cli: CliFn, tmp_path: Path
) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("models: {}\nmystery:\n  x: 1\nlogging: {level: normal}\n")
    result = cli("config", "validate", str(path))
    assert result.exit_code == 0
    assert f"{path}:2:1: warning: unknown top-level section 'mystery'" in result.stdout
    path.write_text("models: {}\nlogging:\n  level: normal\n  level: debug\n")
    result = cli("config", "validate", str(path), "-f", "json")
    assert result.exit_code == 8
    assert result.json()["errors"] == [  # type: ignore[index]
        {"severity": "error", "line": 4, "column": 3,
         "message": "duplicate key 'level' (first at line 3)"},
    ]  # fmt: skip


#: The top-level sections of the gateway's config type, as UPSTREAM.md lists them.
UPSTREAM_SECTIONS = (
    "models channels classification web google github notion x caldav scheduler plugins "
    "secrets filesystem tools mcp_servers mcp logging daemon debug"
).split()


def test_validate_knows_every_section_of_the_gateway(cli: CliFn, tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    in_base = ("models", "channels", "logging")  # BASE_CONFIG has these
    rest = [name for name in UPSTREAM_SECTIONS if name not in (*in_base, "debug")]
    body = "".join(f"{name}: {{}}\n" for name in rest)
    path.write_text(BASE_CONFIG + body + "debug: false\nretention:\n  sessions: 30d\n")
    result = cli("config", "validate", str(path), "-f", "json")
    assert result.exit_code == 0, result.stdout
    assert result.json()["warnings"] == []  # type: ignore[index]
    for name in UPSTREAM_SECTIONS:
        assert f"\n{name}:" in "\n" + path.read_text(), name


def _strict_retention(section: object, config_path: Path) -> None:
    from triggerfish_cli.errors import InvalidDataError

    if section != {"sessions": "30d"}:
        raise InvalidDataError(f"{config_path}: retention.sessions: must be a duration")


def test_validate_runs_every_registered_section_validator(
    cli: CliFn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerfish_cli import settings

    monkeypatch.setitem(settings.OUR_SECTIONS, "retention", f"{__name__}:_strict_retention")
    path = tmp_path / "t.yaml"
    path.write_text("models: {}\nretention:\n  sessions: 30d\n")
    assert cli("config", "validate", str(path)).exit_code == 0
    path.write_text("models: {}\nretention:\n  sessions: soon\nstorage:\n  backend: nosuch\n")
    result = cli("config", "validate", str(path), "-f", "json")
    assert result.exit_code == 8
    messages = [e["message"] for e in result.json()["errors"]]  # type: ignore[index]
    assert messages[0] == "retention.sessions: must be a duration"
    assert messages[1].startswith("storage.backend: unknown backend 'nosuch'")
    assert len(messages) == 2


def test_config_is_in_the_root_listing(cli: CliFn) -> None:
    listing = cli("--help").stdout
    assert "config" in listing and "Versions of triggerfish.yaml, and rollback." in listing


def test_the_installed_script_rolls_back(tmp_path: Path, config: Path, default_store: Path) -> None:
    import shutil
    import subprocess
    import sys

    script = shutil.which("triggerfish-admin") or ""
    argv = [script] if script else [sys.executable, "-m", "triggerfish_cli"]
    env = {**os.environ, "TRIGGERFISH_DATA_DIR": str(config.parent)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*argv, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            stdin=subprocess.DEVNULL,
        )

    assert run("config", "snapshot").returncode == 0
    config.write_text(BASE_CONFIG + "# edited\n")
    refused = run("config", "rollback")
    assert refused.returncode == 4 and refused.stdout == ""
    done = run("config", "rollback", "--yes")
    assert done.returncode == 0, done.stderr
    assert config.read_text() == BASE_CONFIG
    assert "recorded as v3" in done.stdout


def test_yaml_that_parses_but_cannot_be_built_is_invalid_data(
    cli: CliFn, store: StoreHandle, config: Path
) -> None:
    config.write_text(BASE_CONFIG + "scheduler:\n  since: 2026-13-45\n")
    result = cli("config", "validate", "-f", "json")
    assert result.exit_code == 8
    assert result.json()["errors"][0]["message"] == "invalid value: month must be in 1..12"  # type: ignore[index]
    snap = cli(*store.args, "config", "snapshot")
    assert snap.exit_code == 0 and "month must be in 1..12" in snap.stderr
    changed_keys = cli(*store.args, "config", "diff", "-f", "json")
    assert changed_keys.exit_code == 8 and "text diff" in changed_keys.stderr
    assert cli(*store.args, "config", "diff").exit_code == 0


# -- the storage: section on rollback ---------------------------------------------------------


def test_a_rollback_never_moves_the_store_silently(
    cli: CliFn, store: StoreHandle, config: Path, base_dir: Path
) -> None:
    """A version from before the store moved: refused, kept or switched, as asked."""
    section = section_of(config)
    old = "" if section else f'storage:\n  backend: sqlite\n  path: "{base_dir}/old.db"\n'
    before_move = old + BASE_CONFIG + "# before the move\n"
    gateway_backups(base_dir, {"triggerfish.yaml.2026-02-15T09-00-00.000Z": before_move})
    ok(cli(*store.args, "config", "import-backups"))
    raw = config.parent / config.name
    current = Path.read_text(raw)

    refused = cli(*store.args, "config", "rollback", "1", "--yes")
    assert refused.exit_code == 4, refused.stderr
    assert "move this tool and the gateway to another store" in refused.stderr
    assert "--storage keep" in refused.stderr
    assert Path.read_text(raw) == current and sorted(versions(store)) == [1]
    dry = cli(*store.args, "config", "rollback", "1", "--dry-run")
    assert dry.exit_code == 0 and "refused without --storage keep|switch" in dry.stderr
    assert Path.read_text(raw) == current and sorted(versions(store)) == [1]

    kept = cli(*store.args, "config", "rollback", "1", "--storage", "keep", "--yes")
    assert kept.exit_code == 0, kept.stderr
    assert "keeping the file's storage: section" in kept.stderr
    # Everything else of v1, and this file's own storage: section (or none, as now).
    assert Path.read_text(raw) == BASE_CONFIG + "# before the move\n" + section
    history = cli(*store.args, "config", "history", "-f", "json").json()
    assert [r["source"] for r in history] == ["import", "snapshot", "rollback"]  # type: ignore[index]

    Path.write_text(raw, current)
    switched = cli(*store.args, "config", "rollback", "1", "--storage", "switch", "--yes")
    assert switched.exit_code == 0, switched.stderr
    assert "switches the store" in switched.stderr
    assert Path.read_text(raw) == before_move
    # The rollback is recorded in the store that held the versions.
    assert [v["source"] for _, v in sorted(versions(store).items())][-1] == "rollback"


def test_keeping_the_storage_section_splices_text_only() -> None:
    from triggerfish_cli.config.storage import keep_current, salvage_block
    from triggerfish_cli.errors import RefusedError

    version = "# top\nmodels: {}\nstorage:\n  backend: sqlite\n  # old\nlogging: {}\n"
    current = "storage:  # ours\n  backend: postgres\n  schema: tf\nmodels: {}\n"
    assert keep_current(version, current) == (
        "# top\nmodels: {}\nstorage:  # ours\n  backend: postgres\n  schema: tf\nlogging: {}\n"
    )
    assert keep_current(version, "models: {}\n") == "# top\nmodels: {}\nlogging: {}\n"
    assert keep_current("models: {}", current) == (
        "models: {}\nstorage:  # ours\n  backend: postgres\n  schema: tf\n"
    )
    with pytest.raises(RefusedError):
        keep_current("{models: {}, storage: {backend: s3}}", current)
    broken = "storage:\n  backend: s3\n  bucket: b\n# note\nmodels: [unclosed\n"
    assert salvage_block(broken) == "storage:\n  backend: s3\n  bucket: b\n"
    assert salvage_block("models: {}\n") is None


def test_a_broken_file_still_names_its_remote_store(
    cli: CliFn, store: StoreHandle, config: Path
) -> None:
    ok(cli(*store.args, "config", "snapshot"))
    config.write_text(BASE_CONFIG + "  oops: [\n")
    result = cli(*store.args, "config", "rollback", "--yes")
    assert result.exit_code == 0, result.stderr
    assert config.read_text() == BASE_CONFIG
    if store.backend != "sqlite":
        assert "its storage: section names" in result.stderr
