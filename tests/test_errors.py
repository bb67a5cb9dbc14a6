"""The exit codes: one ExitStatus enum, every error class on one of its values."""

from __future__ import annotations

import errno
import os
import resource

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


# -- out of resources (issue 35): exit 10, never "unexpected" -----------------------------


def _raised_from(inner: BaseException, outer: BaseException, *, hide: bool) -> BaseException:
    """``outer`` raised while handling ``inner`` (``from None`` when ``hide``)."""
    try:
        try:
            raise inner
        except BaseException:
            if hide:
                raise outer from None
            raise outer  # noqa: B904 - the implicit context is what is tested
    except BaseException as exc:
        return exc


def test_a_shortage_of_files_memory_or_threads_is_exit_10() -> None:
    emfile = OSError(errno.EMFILE, "Too many open files", "/a/module.py")
    found = errors.resource_error(emfile)
    assert found is not None and found.exit_code == 10
    assert str(found) == (
        "/a/module.py: too many open files (raise the open-file limit, ulimit -n, and run it again)"
    )
    for hide in (True, False):  # converted by the core, with or without its cause shown
        wrapped = _raised_from(emfile, errors.InvalidDataError("x.yaml: cannot read"), hide=hide)
        found = errors.resource_error(wrapped)
        assert found is not None and found.exit_code == 10
        assert found.message == "x.yaml: cannot read"
    nomem = errors.resource_error(MemoryError())
    assert nomem is not None and str(nomem).startswith("out of memory (")
    thread = errors.resource_error(RuntimeError("can't start new thread"))
    assert thread is not None and thread.message == "cannot start a thread"
    for loader in (
        "libsqlite3.so.0: failed to map segment from shared object",
        "/x/_socket.so: cannot open shared object file: Too many open files",
    ):
        found = errors.resource_error(ImportError(loader))
        assert found is not None and found.exit_code == 10
    assert errors.resource_error(ImportError("No module named 'nosuch'")) is None
    assert errors.resource_error(RuntimeError("kaboom")) is None
    assert errors.resource_error(OSError(errno.ENOENT, "No such file")) is None
    assert errors.resource_error(errors.BusyError("locked")) is None


def test_out_of_files_asks_the_system() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert not errors.out_of_files()
    held = []
    try:
        # lower the soft limit to what is open now: not one more file can be opened
        probe = os.open(os.devnull, os.O_RDONLY)
        held.append(probe)
        resource.setrlimit(resource.RLIMIT_NOFILE, (probe + 1, hard))
        assert errors.out_of_files()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for fd in held:
            os.close(fd)
    assert not errors.out_of_files()
