"""TRIGGERFISH_DATA_DIR set to ``<base>/data`` by mistake: the exit-7 error names the
store one level up, when there is one. Run through the installed console script."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.gateway import write_gateway_store
from tests.helpers.script import one_line, run_script


def test_a_data_dir_one_level_too_deep_gets_a_hint_naming_the_store(tmp_path: Path) -> None:
    base = tmp_path / "base"
    store = write_gateway_store(base / "data" / "triggerfish.db")
    for args in (["kv", "namespaces"], ["status"], ["--backend", "sqlite", "kv", "list"]):
        run = run_script(*args, env={"TRIGGERFISH_DATA_DIR": str(base / "data")})
        assert run.returncode == 7, (args, run.stderr)
        line = one_line(run.stderr)
        assert f"no Triggerfish store at {base}/data/data/triggerfish.db" in line
        assert f"a store is one level up, at {store}" in line
        assert f"set TRIGGERFISH_DATA_DIR={base})" in line
        assert "creates it on first start" not in line and "demo create" not in line
    assert not (base / "data" / "data").exists()  # nothing made where it looked


def test_no_hint_without_a_store_one_level_up(tmp_path: Path) -> None:
    (tmp_path / "base" / "data").mkdir(parents=True)
    run = run_script("kv", "namespaces", env={"TRIGGERFISH_DATA_DIR": str(tmp_path / "base")})
    assert run.returncode == 7
    assert "one level up" not in one_line(run.stderr)
