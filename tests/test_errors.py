"""The exit codes: one ExitStatus enum, every error class on one of its values."""

from __future__ import annotations

from triggerfish_cli import errors
from triggerfish_cli.errors import EXIT_CODES, ExitStatus, TriggerfishError


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_every_error_exits_with_a_documented_status() -> None:
    from triggerfish_cli.cli.boundary import Interrupted
    from triggerfish_cli.retention.sweep import SweepInterrupted

    classes = [TriggerfishError, *_subclasses(TriggerfishError)]
    assert Interrupted in classes and SweepInterrupted in classes and len(classes) > 10
    for cls in classes:
        assert cls.exit_code in EXIT_CODES, cls
        assert type(cls.exit_code) is int, cls  # a plain int wherever it is printed


def test_the_table_is_the_enum_in_order() -> None:
    assert list(EXIT_CODES) == [status.value for status in ExitStatus]
    assert EXIT_CODES[5] == ExitStatus.VERIFICATION_FAILED.meaning
    assert errors.VerificationError.exit_code == 5 and errors.WriteError.exit_code == 9
