"""triggerfish.yaml loading and the storage: section."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CliFn
from triggerfish_cli.errors import InvalidDataError, NotFoundError
from triggerfish_cli.settings import check_our_sections, load_settings
from triggerfish_cli.storage.factory import resolve_storage


def test_missing_default_config_is_no_settings(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "triggerfish.yaml", explicit=False)
    assert not settings.exists and settings.data == {}
    with pytest.raises(NotFoundError):
        load_settings(tmp_path / "triggerfish.yaml", explicit=True)


def test_yaml_errors_name_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("a: 1\nb: [unclosed\n")
    with pytest.raises(InvalidDataError, match=r"line \d+, column \d+"):
        _ = load_settings(path, explicit=True).data


def test_not_utf8_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_bytes(b"storage: \xff\xfe\n")
    with pytest.raises(InvalidDataError, match="not UTF-8"):
        load_settings(path, explicit=True)


def test_storage_section_resolution(tmp_path: Path) -> None:
    path = tmp_path / "triggerfish.yaml"
    path.write_text("storage:\n  backend: sqlite\n  path: x.db\n  busy_timeout_ms: 250\n")
    config = resolve_storage(load_settings(path, explicit=True))
    assert (config.backend, config.path, config.source) == ("sqlite", tmp_path / "x.db", "config")
    assert config.options == {"busy_timeout_ms": 250}
    assert config.chosen_by == f"from storage.path in {path}"
    db = resolve_storage(load_settings(path, explicit=True), db=tmp_path / "other.db")
    assert db.path == tmp_path / "other.db" and db.options == {"busy_timeout_ms": 250}
    memory = resolve_storage(load_settings(path, explicit=True), backend="memory")
    assert memory.backend == "memory"


def test_check_our_sections(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("models: {x: 1}\nstorage:\n  backend: sqlite\n")
    check_our_sections(load_settings(path, explicit=True))
    path.write_text("storage:\n  backend: nope\n")
    with pytest.raises(InvalidDataError, match="unknown backend"):
        check_our_sections(load_settings(path, explicit=True))


def test_config_without_storage_does_not_import_yaml(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("models:\n  primary: claude\n")
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from triggerfish_cli.settings import load_settings\n"
        "from triggerfish_cli.storage.factory import resolve_storage\n"
        f"resolve_storage(load_settings(Path({str(path)!r}), explicit=True))\n"
        "print('yaml' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_yaml_values_that_cannot_be_built_are_invalid_data() -> None:
    from triggerfish_cli.errors import InvalidDataError
    from triggerfish_cli.settings import parse_yaml_mapping

    with pytest.raises(InvalidDataError, match=r"month must be in 1\.\.12"):
        parse_yaml_mapping("since: 2026-13-45\n", "t.yaml")


def test_backend_help_names_every_backend(cli: CliFn) -> None:
    text = " ".join(cli("--help").stdout.split())
    assert "sqlite, memory, postgres or s3" in text


def test_enterprise_sections_are_checked_without_their_client_libraries(tmp_path: Path) -> None:
    """Validating a postgres or s3 storage: section never imports psycopg or boto3."""
    path = tmp_path / "t.yaml"
    path.write_text(
        "storage:\n  backend: postgres\n  dsn: host=db user=tf\n  schema: prod\n", encoding="utf-8"
    )
    other = tmp_path / "s.yaml"
    other.write_text("storage:\n  backend: s3\n  bucket: acme-tf\n  prefix: p\n", encoding="utf-8")
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from triggerfish_cli.settings import load_settings, check_our_sections\n"
        "from triggerfish_cli.storage.factory import resolve_storage\n"
        f"for p in ({str(path)!r}, {str(other)!r}):\n"
        "    s = load_settings(Path(p), explicit=True)\n"
        "    check_our_sections(s)\n"
        "    print(resolve_storage(s).backend)\n"
        "print(sorted({'psycopg', 'boto3', 'botocore'} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["postgres", "s3", "[]"], out.stderr
