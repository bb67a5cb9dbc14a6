"""Logical archives carry any key and value across exactly (property test, core level)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from triggerfish_cli.backup.create import create_backup
from triggerfish_cli.backup.dest import LocalDestination
from triggerfish_cli.backup.load import load_logical
from triggerfish_cli.backup.verify import verify_file
from triggerfish_cli.storage.in_memory import MemoryStorage

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=40, deadline=None)
@given(
    items=st.dictionaries(TEXT, TEXT, max_size=30),
    compression=st.sampled_from(["zstd", "gzip", "none"]),
)
def test_a_logical_backup_restores_exactly(items: dict[str, str], compression: str) -> None:
    source = MemoryStorage()
    source.set_many(items.items())
    with tempfile.TemporaryDirectory() as work:
        dest = LocalDestination(Path(work) / "b", create=True)
        created = create_backup(source, dest, compression=compression)
        assert created.manifest.kind == "logical" and created.manifest.keys == len(items)
        archive = dest.path(created.name)
        result = verify_file(archive)
        assert result.ok, result.failures
        target = MemoryStorage()
        loaded = load_logical(archive, created.name, target, "empty", scratch=Path(work))
        assert loaded.written == len(items)
        restored = {k: v for k, v in target.scan() if ":admin_backup_" not in k}
        assert restored == items
