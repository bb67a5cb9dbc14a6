"""No error suggests an option the command lacks (issue 36).

Errors name options two ways (tests/helpers/option_mentions.py): alone, an
option of the command that raised the error; in backticks after a command
(```backup list --all-stores```), an option of that command. Two checks:

- every error a command raises in a test is checked against that command
  (the autouse fixture in tests/conftest.py); the tests below trigger the
  ones whose hints name options, among them the hint that once sent
  ``backup restore`` to its non-existent ``--all-stores``;
- a static scan of every error and hint text in the code: an option named
  with its command exists on that command, an error raised in a command's
  own function names only that command's options, and any other option
  alone exists on some command.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CliFn
from tests.helpers.option_mentions import allowed, every_command, foreign, mentions, path_of
from triggerfish_cli.cli.typer_compat import click

PACKAGE = Path(__file__).resolve().parents[2] / "triggerfish_cli"


def _text(node: ast.AST) -> str:
    """The text of a string expression, in source order (an interpolation as ``X``)."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else ""
    if isinstance(node, ast.JoinedStr):
        return "".join(
            _text(part) if isinstance(part, ast.Constant) else "X" for part in node.values
        )
    return " ".join(_text(child) for child in ast.iter_child_nodes(node))


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _error_texts(node: ast.AST) -> Iterator[ast.AST]:
    """The expressions that make up an error's message or hint."""
    if isinstance(node, ast.Call):
        if _name(node.func).endswith("Error"):
            yield from node.args
            yield from (keyword.value for keyword in node.keywords)
        elif isinstance(node.func, ast.Attribute) and "hint" in _name(node.func.value).lower():
            yield from node.args  # hints.append(...)
    elif isinstance(node, ast.keyword) and node.arg == "hint":
        yield node.value
    elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any("hint" in _name(target).lower() for target in targets):
            yield node.value


def texts() -> Iterator[tuple[str, str, str]]:
    """``(module, function, text)`` of every error and hint text in the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in [tree, *ast.walk(tree)]:
            if function is not tree and not isinstance(
                function, (ast.FunctionDef, ast.AsyncFunctionDef)
            ):
                continue
            name = getattr(function, "name", "")
            for node in _own_nodes(function):
                for expression in _error_texts(node):
                    text = _text(expression)
                    if "--" in text:
                        yield module.removesuffix(".__init__"), name, text


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` outside the functions defined in it."""
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield child
        yield from _own_nodes(child)


def _callbacks() -> dict[tuple[str, str], tuple[click.Command, ...]]:
    """(module, function) of each command's own function -> the command's chain."""
    found = {}
    for chain in every_command():
        callback = chain[-1].callback
        original = getattr(callback, "__wrapped__", callback)
        if original is not None:
            found[(original.__module__, original.__name__)] = chain
    return found


def test_the_scan_finds_the_texts_that_name_options() -> None:
    """The scan sees the hints it must (a scan that finds nothing passes vacuously)."""
    found = {(module, function) for module, function, _ in texts()}
    assert ("triggerfish_cli.cli.backup.selection", "none_of") in found
    assert ("triggerfish_cli.backup.prune", "check") in found
    assert ("triggerfish_cli.cli.backup.restore", "restore_cmd") in found
    assert len(found) > 30


def test_every_option_an_error_names_exists_where_it_says() -> None:
    chains = list(every_command())
    everywhere = set().union(*(allowed(chain) for chain in chains))
    callbacks = _callbacks()
    assert len(callbacks) > 40
    wrong = []
    for module, function, text in texts():
        own = callbacks.get((module, function))
        if own is not None:
            wrong += [f"{module}.{function}: {w}" for w in foreign(text, own)]
            continue
        for option, named, where in mentions(text):
            if named is not None and option not in allowed(named):
                wrong.append(f"{module}.{function}: {where!r}: `{path_of(named)}` has no {option}")
            elif named is None and option not in everywhere:
                wrong.append(f"{module}.{function}: {where!r}: no command has {option}")
    assert wrong == []


def test_the_check_catches_an_option_of_another_command() -> None:
    """The checker itself: the hint restore gave before issue 36 fails it."""
    chain = next(c for c in every_command() if path_of(c) == "backup restore")
    old = "bk: no backups of x (1 backup(s) of other stores there: --all-stores to see them)"
    assert foreign(old, chain) == ["'--all-stores': `backup restore` has no --all-stores"]
    assert foreign("(1 of other stores there: `backup list --all-stores`)", chain) == []
    assert foreign("use `triggerfish-admin memory save --taint LEVEL`", chain) == []
    assert foreign("pass --force, or --db PATH", chain) == []  # its own, and a global one
    assert foreign("`backup list --nope`", chain) == [
        "'`backup list --nope`': `backup list` has no --nope"
    ]


@pytest.fixture
def backed_up(cli: CliFn, gateway_db: Path, tmp_path: Path) -> Path:
    backups = tmp_path / "backups"
    run = cli("backup", "create", "--to", str(backups))
    assert run.exit_code == 0, run.stderr
    return backups


def test_triggered_hints_name_options_of_their_command(
    cli: CliFn, backed_up: Path, tmp_path: Path
) -> None:
    """Errors whose hints name options, raised in this process: the autouse fixture
    checks each against the command that raised it (and fails the test if one names
    an option the command lacks)."""
    other = tmp_path / "other.db"
    assert cli("--db", str(other), "demo", "create", "-r", "20").exit_code == 0
    cases = [
        # another store's backups only: the hint points at `backup list --all-stores`
        (3, "--db", str(other), "backup", "restore", "--latest", "--from", str(backed_up)),
        (3, "--db", str(other), "backup", "verify", "--latest", "--from", str(backed_up)),
        (3, "--db", str(other), "backup", "diff", "--latest", "--from", str(backed_up)),
        (3, "--db", str(other), "backup", "verify", "--all", "--from", str(backed_up)),
        (2, "backup", "prune", "--from", str(backed_up)),  # give one of --keep-last, ...
        (2, "backup", "restore", "--latest", "--to", "postgresql://h/db"),
        (2, "backup", "restore", "--undo", "--latest"),
        (4, "--db", str(other), "backup", "restore", _name_in(backed_up), "--from",
         str(backed_up), "--yes"),  # another store's: pass --other-store
        (4, "backup", "restore", "--latest", "--from", str(backed_up)),  # pass --yes
        (8, "kv", "set", "sessions:x", "{not json"),  # pass --raw
        (4, "kv", "set", "memory:a:PUBLIC:k", '"v"'),  # `triggerfish-admin memory save`
    ]  # fmt: skip
    for expected, *args in cases:
        run = cli(*args)
        assert run.exit_code == expected, (args, run.stderr)
        assert run.stderr.startswith("error:") and "--" in run.stderr, (args, run.stderr)


def _name_in(directory: Path) -> str:
    (archive,) = directory.glob("*.zst")
    return archive.name


def test_the_conftest_check_is_installed() -> None:
    """The autouse fixture wraps every command's invoke (tests/conftest.py)."""
    typer_core = importlib.import_module("typer.core")
    assert getattr(typer_core.TyperCommand.invoke, "checks_option_mentions", False)
