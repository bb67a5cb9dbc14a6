"""The layering rules of DESIGN.md, checked on the source."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "triggerfish_cli"


def import_targets(tree: ast.Module, *, annotations: bool = True) -> list[tuple[str, str | None]]:
    """``(module, name)`` of every import, at the top or inside a function:
    ``import a.b`` is ``("a.b", None)``, ``from a import b`` is ``("a", "b")``.
    ``annotations=False`` leaves out those under ``if TYPE_CHECKING:`` (never run)."""
    skipped: set[int] = set()
    if not annotations:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) in (
                "TYPE_CHECKING",
                "typing.TYPE_CHECKING",
            ):
                skipped.update(id(child) for child in ast.walk(node))
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.module, alias.name) for alias in node.names)
    return found


def imports_of(path: Path) -> set[str]:
    return {module.split(".")[0] for module, _ in import_targets(ast.parse(path.read_text()))}


def test_core_never_imports_typer_or_rich() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.relative_to(PACKAGE).parts[:1]:
            continue
        assert not imports_of(path) & {"typer", "rich", "click"}, path


def test_only_output_imports_rich() -> None:
    output = PACKAGE / "cli" / "output"
    for path in (PACKAGE / "cli").rglob("*.py"):
        if output not in path.parents:
            assert "rich" not in imports_of(path), path
    assert any("rich" in imports_of(path) for path in output.glob("*.py"))  # the check sees it


def test_core_never_prints_or_exits() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.relative_to(PACKAGE).parts[:1] or path.name == "__main__.py":
            continue
        if path.relative_to(PACKAGE).as_posix() == "storage/sqlite/watchdog.py":
            continue  # a program of its own (the write gate's watchdog process)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("print", "exit", "quit"), (path, node.lineno)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                assert (node.value.id, node.attr) != ("sys", "exit"), (path, node.lineno)


def test_startup_does_not_import_heavy_modules(gateway_db: Path) -> None:
    code = (
        "import sys\n"
        "from triggerfish_cli.cli.app import app\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(app, ['kv', 'get', 'prefs:owner:bumpers_default', '--raw'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = {'rich', 'yaml', 'sqlite_utils', 'zstandard', 'psycopg', 'boto3', 'orjson'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_ruff_and_mypy_are_clean() -> None:
    root = PACKAGE.parent
    ruff = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--quiet", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    mypy = subprocess.run(
        [sys.executable, "-m", "mypy"], capture_output=True, text=True, timeout=300, cwd=root
    )
    assert mypy.returncode == 0, mypy.stdout + mypy.stderr


# -- the write gate: nothing writes to a SQLite store around it ---------------------------

#: Where SQLite write statements may appear outside a gated transaction, and why.
PRIVATE_DATABASES = {
    "storage/sqlite/backend.py": "the backend itself: every write goes through transaction()",
    "storage/sqlite/session.py": "the backend's plumbing: a read transaction (BEGIN)",
    "storage/sqlite/sql.py": "private_transaction itself (BEGIN IMMEDIATE), for private files",
    "storage/sqlite/files.py": "WAL mode set on a store being made, before anyone else has it",
    "storage/sqlite/write_gate.py": "the gate itself (BEGIN IMMEDIATE / COMMIT)",
    "storage/postgres/backend.py": "Postgres: real concurrency control, no gate",
    "storage/postgres/schema.py": "Postgres: real concurrency control, no gate",
    "storage/postgres/writes.py": "Postgres: real concurrency control, no gate",
    "storage/postgres/lock.py": "Postgres advisory locks",
    "storage/postgres/index.py": "Postgres: real concurrency control, no gate",
    "storage/sqlite/fts_query.py": "a private in-RAM FTS5 probe table (:memory:)",
    "storage/sqlite/integrity.py": "a private scratch copy of a backup being verified",
    "storage/sqlite/snapshot.py": "the backup's own copy file, written by SQLite's backup API",
}
WRITE_WORDS = ("BEGIN", "INSERT", "REPLACE", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER")
#: Pragmas that change the file (the rest set up our own connection).
FILE_PRAGMAS = ("JOURNAL_MODE", "USER_VERSION", "APPLICATION_ID", "PAGE_SIZE", "AUTO_VACUUM")
GATED = {"transaction", "_transaction", "private_transaction"}
#: Helpers that write on the connection their caller passes them: every call of
#: one must itself sit inside a gated transaction (checked).
GATED_HELPERS = {
    "storage/sqlite/fts.py": {"_reindex_one"},
    "storage/sqlite/fts_marks.py": {"mark_range"},
}


def _is_write(sql: str) -> bool:
    head = " ".join(sql.split()).upper()
    if head.startswith("PRAGMA"):
        name, _, value = head.removeprefix("PRAGMA ").partition("=")
        return bool(value) and name.strip().split(".")[-1] in FILE_PRAGMAS
    if head.startswith("WITH"):  # a CTE in front of an INSERT, UPDATE, DELETE
        return any(f" {word} " in f" {head} " for word in WRITE_WORDS[1:5])
    return head.startswith(WRITE_WORDS)


def _strings(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "sql" constants."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            value = node.value.value
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(value, str):
                    found[target.id] = value
    return found


def _sql_of(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) else "?" for part in node.values
        )
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _name_of(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _ungated_writes(path: Path, helpers: set[str] | None = None) -> list[int]:
    """Lines of write statements (and calls of ``helpers``) outside gated transactions."""
    helpers = helpers or set()
    tree = ast.parse(path.read_text())
    constants = _strings(tree)
    bad: list[int] = []

    def visit(node: ast.AST, gated: bool, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.With):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and _name_of(call.func) in GATED:
                    gated = True
        if isinstance(node, ast.Call) and not gated and function not in helpers:
            name = _name_of(node.func)
            if name in ("execute", "executemany", "executescript") and node.args:
                sql = _sql_of(node.args[0], constants)
                if sql is not None and _is_write(sql):
                    bad.append(node.lineno)
            elif name in helpers:
                bad.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, gated, function)

    visit(tree, False, "")
    return bad


def test_no_module_writes_to_a_sqlite_store_around_the_write_gate() -> None:
    """Every write statement sits inside a gated transaction (or a private database's)."""
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in PRIVATE_DATABASES:
            continue
        lines = _ungated_writes(path, GATED_HELPERS.get(relative))
        if lines:
            offenders[relative] = lines
    assert offenders == {}


def test_the_write_check_finds_an_ungated_write(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "SQL = 'DELETE FROM kv WHERE key = ?'\n"
        "def bad(conn):\n    conn.execute(SQL, ('a',))\n"
        "def good(provider):\n"
        "    with provider.transaction('x') as conn:\n        conn.execute(SQL, ('a',))\n"
        "        helper(conn)\n"
        "def reads(conn):\n"
        "    conn.execute('SELECT 1'); conn.execute('PRAGMA wal_checkpoint(PASSIVE)')\n"
        "    conn.execute('PRAGMA mmap_size=1'); conn.execute('PRAGMA journal_mode=WAL')\n"
        "def helper(conn):\n    conn.execute(SQL, ('b',))\n"
        "def careless(conn):\n    helper(conn)\n"
    )
    assert _ungated_writes(sample, {"helper"}) == [3, 10, 14]


# -- the package's own import graph ---------------------------------------------------------


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at the top or inside a function."""
    modules = {_module_name(path, package): path for path in package.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    root = package.name
    for name, path in modules.items():
        for module, imported in import_targets(ast.parse(path.read_text()), annotations=False):
            if module != root and not module.startswith(root + "."):
                continue
            full = f"{module}.{imported}" if imported else module
            target = full if full in modules else known(module)
            if target and target != name:
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_even_through_imports_inside_functions() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_check_finds_one(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from pkg import a\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
    )
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.sub.b"]]


def test_no_core_module_imports_the_cli() -> None:
    graph = import_graph()
    offenders = {
        module: sorted(target for target in targets if target.startswith("triggerfish_cli.cli"))
        for module, targets in graph.items()
        if not module.startswith("triggerfish_cli.cli") and module != "triggerfish_cli.__main__"
    }
    assert {module: found for module, found in offenders.items() if found} == {}


def test_only_typer_compat_touches_typer_internals() -> None:
    """Typer's private modules (``typer._click``, its completion code) are reached
    through cli/typer_compat.py alone (tests/cli/test_typer_compat.py pins them)."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "typer_compat.py":
            continue
        for module, name in import_targets(ast.parse(path.read_text())):
            if module.startswith("typer._") or (module == "typer" and (name or "").startswith("_")):
                offenders.append(path.relative_to(PACKAGE).as_posix())
    assert offenders == []


# -- one backend seam: outside storage/, no backend module, class or SQL ------------------

STORAGE = PACKAGE / "storage"
#: Modules outside storage/ that may reach into a backend, each with why: none
#: any more (issue 19 moved the last ones behind the Backend table). A new entry
#: needs a reason no capability can carry.
SEAM_EXCEPTIONS: dict[str, str] = {}


def backend_packages(package: Path = PACKAGE) -> set[str]:
    """The backends: the subpackages of storage/ (``triggerfish_cli.storage.sqlite``, ...)."""
    storage = package / "storage"
    return {f"{package.name}.storage.{path.parent.name}" for path in storage.glob("*/__init__.py")}


def backend_imports(path: Path, backends: set[str]) -> list[str]:
    """The backend modules ``path`` imports, at the top or inside a function."""
    found = []

    def within(name: str) -> bool:
        return any(name == b or name.startswith(b + ".") for b in backends)

    for module, name in import_targets(ast.parse(path.read_text())):
        if within(module):
            found.append(module)
        elif name and within(f"{module}.{name}"):
            found.append(f"{module}.{name}")
    return found


def _outside_storage(package: Path = PACKAGE) -> Iterator[tuple[str, Path]]:
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if not relative.startswith("storage/"):
            yield relative, path


def test_no_backend_import_outside_storage() -> None:
    backends = backend_packages()
    assert {"triggerfish_cli.storage.sqlite", "triggerfish_cli.storage.postgres"} <= backends
    offenders = {
        relative: found
        for relative, path in _outside_storage()
        if relative not in SEAM_EXCEPTIONS and (found := backend_imports(path, backends))
    }
    assert offenders == {}


def test_the_backend_import_check_finds_one(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "storage" / "fast").mkdir(parents=True)
    (package / "storage" / "fast" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg.storage.fast.db import Db\n")
    (package / "b.py").write_text("from pkg.storage import fast\nfrom pkg.storage import other\n")
    backends = backend_packages(package)
    assert backends == {"pkg.storage.fast"}
    assert backend_imports(package / "a.py", backends) == ["pkg.storage.fast.db"]
    assert backend_imports(package / "b.py", backends) == ["pkg.storage.fast"]


def backend_classes(package: Path = PACKAGE) -> set[str]:
    """Every class defined in a backend's package."""
    names = set()
    for init in (package / "storage").glob("*/__init__.py"):
        for path in init.parent.rglob("*.py"):
            tree = ast.parse(path.read_text())
            names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    return names


def isinstance_checks_on(path: Path, classes: set[str]) -> list[int]:
    """Lines of ``isinstance``/``issubclass`` calls naming one of ``classes``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (
            isinstance(node, ast.Call)
            and _name_of(node.func) in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            continue
        kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
        if any(_name_of(kind) in classes for kind in kinds):
            lines.append(node.lineno)
    return lines


def test_no_isinstance_on_a_backend_class_outside_storage() -> None:
    classes = backend_classes()
    assert {"SqliteStorage", "PostgresStorage", "S3Storage"} <= classes
    offenders = {
        relative: lines
        for relative, path in _outside_storage()
        if relative not in SEAM_EXCEPTIONS and (lines := isinstance_checks_on(path, classes))
    }
    assert offenders == {}


def test_the_isinstance_check_finds_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(p, m):\n"
        "    if isinstance(p, SqliteStorage): pass\n"
        "    if isinstance(p, (int, m.PostgresStorage)): pass\n"
        "    if isinstance(p, MemoryRecord): pass\n"
    )
    assert isinstance_checks_on(sample, {"SqliteStorage", "PostgresStorage"}) == [2, 3]


SQL_WORDS = (
    "SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER",
    "PRAGMA", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "VACUUM", "ATTACH", "WITH",
)  # fmt: skip


def sql_strings(path: Path) -> list[int]:
    """Lines of string constants (f-strings too) that begin with an SQL statement word."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            text = first.value if isinstance(first, ast.Constant) else None
        words = str(text).split(maxsplit=1)
        if text and words and words[0] in SQL_WORDS and len(words) > 1:
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_sql_outside_storage() -> None:
    offenders = {
        relative: lines
        for relative, path in _outside_storage()
        if relative not in SEAM_EXCEPTIONS and (lines := sql_strings(path))
    }
    assert offenders == {}


def test_the_sql_check_finds_some(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "A = 'SELECT key FROM kv'\n"
        "def f(conn, t):\n"
        "    conn.execute(f'DELETE FROM {t} WHERE key = ?')\n"
        "    conn.execute('''\n        PRAGMA journal_mode''')\n"
        "    return 'Select a store', 'UPDATE', 'with care'\n"
    )
    assert sql_strings(sample) == [1, 3, 4]


def test_every_seam_exception_is_still_needed() -> None:
    """An exception that no longer reaches into a backend is taken off the list."""
    backends, classes = backend_packages(), backend_classes()
    unneeded = [
        relative
        for relative in SEAM_EXCEPTIONS
        if not (
            backend_imports(PACKAGE / relative, backends)
            or isinstance_checks_on(PACKAGE / relative, classes)
            or sql_strings(PACKAGE / relative)
        )
    ]
    assert unneeded == []


#: The backends' names (storage/backends.py: BACKENDS).
BACKEND_NAMES = {"sqlite", "postgres", "s3", "memory"}
_NAMESPACE = "the memory: key namespace (memory:<agent>:<LEVEL>:<key>), not the backend"
#: Comparisons with a backend's name outside storage/ that ask no backend question, each
#: ``(module, name)`` with why. Anything else asks the Backend table or the provider.
BACKEND_NAME_COMPARISONS: dict[tuple[str, str], str] = {
    ("backup/counts.py", "memory"): _NAMESPACE,
    ("memory/keys.py", "memory"): _NAMESPACE,
    ("memory/record.py", "memory"): _NAMESPACE,
}


def backend_name_comparisons(path: Path) -> list[tuple[int, str]]:
    """``(line, name)`` of each comparison (``==``, ``!=``, ``in``, a ``match`` case)
    with a string literal naming a backend."""
    found: set[tuple[int, str]] = set()

    def names(side: ast.expr) -> list[str]:
        items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        return [
            item.value
            for item in items
            if isinstance(item, ast.Constant) and item.value in BACKEND_NAMES
        ]

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found.update((node.lineno, name) for name in names(side))
        elif isinstance(node, ast.MatchValue):
            found.update((node.lineno, name) for name in names(node.value))
    return sorted(found)


def backend_name_checks(
    package: Path, allowed: dict[tuple[str, str], str]
) -> tuple[dict[str, list[int]], list[tuple[str, str]]]:
    """Modules outside storage/ comparing with a backend's name where ``allowed`` does not
    let them, with their lines; and entries of ``allowed`` no longer needed."""
    offenders: dict[str, list[int]] = {}
    seen: set[tuple[str, str]] = set()
    for relative, path in _outside_storage(package):
        for line, name in backend_name_comparisons(path):
            seen.add((relative, name))
            if (relative, name) not in allowed:
                offenders.setdefault(relative, []).append(line)
    return offenders, [entry for entry in allowed if entry not in seen]


def test_no_comparison_with_a_backend_name_outside_storage() -> None:
    """Which backend a store is never decides anything outside storage/ (issue 19)."""
    from triggerfish_cli.storage.backends import known_backends

    assert set(known_backends()) == BACKEND_NAMES
    assert backend_name_checks(PACKAGE, BACKEND_NAME_COMPARISONS) == ({}, [])


def test_the_backend_name_check_finds_one(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "storage").mkdir(parents=True)
    (package / "storage" / "backends.py").write_text("def f(b):\n    return b == 'sqlite'\n")
    (package / "status.py").write_text(
        "def f(config, section, parts):\n"
        "    if config.backend == 'postgres': pass\n"
        "    if 's3' != section.get('backend'): pass\n"
        "    if config.backend in ('sqlite', 'file'): pass\n"
        "    match config.backend:\n"
        "        case 'memory': pass\n"
        "    if parts[0] == 'memory' or parts[1] == 'sqlite_master': pass\n"
        "    return Config('sqlite'), {'s3': 1}, config.backend == 'memory:'\n"
    )
    (package / "keys.py").write_text("def f(parts):\n    return parts[0] != 'memory'\n")
    allowed = {("keys.py", "memory"): "a namespace", ("gone.py", "s3"): "split meanwhile"}
    offenders, stale = backend_name_checks(package, allowed)
    assert offenders == {"status.py": [2, 3, 4, 6, 7]}
    assert stale == [("gone.py", "s3")]


#: The longest a module may be (DESIGN.md: small enough to read in one sitting).
CORE_LINES, CLI_LINES = 500, 250

#: Modules still over their limit, each with the most lines it may have until it is
#: split (issue 19's remaining splits): none may grow, and one split below its limit
#: must leave this table. Every other module keeps to the limit.
OVERSIZED: dict[str, int] = {}


def oversized(package: Path, allowed: dict[str, int]) -> tuple[list[str], list[str]]:
    """Modules over their limit (or their ceiling in ``allowed``), and entries of
    ``allowed`` that are no longer needed (the module is gone or within its limit)."""
    over: list[str] = []
    sizes: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        lines = len(path.read_text().splitlines())
        sizes[name] = lines
        limit = CLI_LINES if name.startswith("cli/") else CORE_LINES
        if lines > allowed.get(name, limit):
            over.append(f"{name}: {lines} lines (at most {allowed.get(name, limit)})")
    stale = [
        name
        for name in allowed
        if sizes.get(name, 0) <= (CLI_LINES if name.startswith("cli/") else CORE_LINES)
    ]
    return over, stale


def test_modules_keep_to_their_size_limits() -> None:
    assert oversized(PACKAGE, OVERSIZED) == ([], [])


def test_the_size_check_finds_a_long_module_and_a_stale_entry(tmp_path: Path) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "long.py").write_text("x = 1\n" * (CLI_LINES + 1))
    (tmp_path / "core.py").write_text("x = 1\n" * CORE_LINES)  # at the limit: fine
    (tmp_path / "grown.py").write_text("x = 1\n" * 600)
    over, stale = oversized(tmp_path, {"grown.py": 550, "core.py": 700})
    assert over == [
        f"cli/long.py: {CLI_LINES + 1} lines (at most {CLI_LINES})",
        "grown.py: 600 lines (at most 550)",
    ]
    assert stale == ["core.py"]


# -- one output call owns the table-or-JSON choice ----------------------------------------

#: The output formats (``cli/options.py`` Format).
FORMAT_NAMES = {"table", "json", "jsonl", "csv"}

#: Modules under cli/ outside cli/output/ that still choose by the format, each with why.
#: Every other command hands its result to Output (``result``, ``result_rows``,
#: ``outcome``, ``rows``, ...), which alone picks the table or the document.
FORMAT_CHOICES = {
    "cli/context.py": "AppState.output hands the global --format to the Output it builds",
    "cli/help.py": "help: -f json picks the command tree as JSON, another document than help",
    "cli/kv/transfer.py": "kv export: the format of the file written (or its suffix), not a view",
}


def format_choices(path: Path) -> list[int]:
    """Lines that read a ``.fmt`` attribute or compare with a format name
    (``"json"``, ``("table", "csv")``, ``Format.csv``)."""

    def names_a_format(side: ast.expr) -> bool:
        items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        return any(
            (isinstance(item, ast.Constant) and item.value in FORMAT_NAMES)
            or (
                isinstance(item, ast.Attribute)
                and item.attr in FORMAT_NAMES
                and _name_of(item.value) == "Format"
            )
            for item in items
        )

    def chooses(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr == "fmt" and isinstance(node.ctx, ast.Load)
        return isinstance(node, ast.Compare) and any(
            names_a_format(side) for side in (node.left, *node.comparators)
        )

    return sorted({node.lineno for node in ast.walk(ast.parse(path.read_text())) if chooses(node)})


def format_choosers(
    package: Path, allowed: dict[str, str]
) -> tuple[dict[str, list[int]], list[str]]:
    """Modules under cli/ (outside cli/output/) that choose by the format and are not in
    ``allowed``, with their lines; and entries of ``allowed`` that no longer do."""
    found: dict[str, list[int]] = {}
    for path in sorted((package / "cli").rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if not relative.startswith("cli/output/") and (lines := format_choices(path)):
            found[relative] = lines
    offenders = {name: lines for name, lines in found.items() if name not in allowed}
    return offenders, [name for name in allowed if name not in found]


def test_only_output_chooses_by_the_format() -> None:
    assert format_choosers(PACKAGE, FORMAT_CHOICES) == ({}, [])


def test_the_format_check_finds_a_command_that_chooses(tmp_path: Path) -> None:
    (tmp_path / "cli" / "output").mkdir(parents=True)
    (tmp_path / "cli" / "show.py").write_text(
        "def show(out, fmt, st):\n"
        "    if out.fmt != 'table':\n"
        "        out.record({})\n"
        "    elif fmt in ('csv', 'jsonl'):\n"
        "        pass\n"
        "    chosen = st.fmt\n"
        "    return chosen == Format.json, fmt == 'yaml', out.title\n"
    )
    (tmp_path / "cli" / "output" / "results.py").write_text(
        "def f(self):\n    return self.fmt == 'json'\n"
    )
    (tmp_path / "cli" / "app.py").write_text("def f(st, fmt):\n    st.fmt = fmt.value\n")
    (tmp_path / "cli" / "gone.py").write_text("x = 1\n")
    (tmp_path / "core.py").write_text("def f(kind):\n    return kind == 'json'\n")
    offenders, stale = format_choosers(tmp_path, {"cli/gone.py": "split meanwhile"})
    assert offenders == {"cli/show.py": [2, 4, 6, 7]}
    assert stale == ["cli/gone.py"]


TESTS = Path(__file__).parent


def misplaced_tests(tests: Path, package: Path) -> list[str]:
    """Flat test modules named after a domain package (``test_backup_*.py`` beside
    ``triggerfish_cli/backup/``): their home is the mirroring ``tests/<package>/``."""
    packages = sorted(
        child.name
        for child in package.iterdir()
        if (child / "__init__.py").exists() and child.name != "cli"
    )
    return sorted(
        path.name
        for path in tests.glob("test_*.py")
        if any(
            path.stem == f"test_{name}" or path.stem.startswith(f"test_{name}_")
            for name in packages
        )
    )


def test_tests_mirror_the_domain_packages() -> None:
    assert misplaced_tests(TESTS, PACKAGE) == []
    # and the command tests the command packages (tests/cli/backup/ for cli/backup/)
    assert misplaced_tests(TESTS / "cli", PACKAGE / "cli") == []


def test_the_mirror_check_finds_a_flat_domain_test(tmp_path: Path) -> None:
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    (package / "backup").mkdir(parents=True)
    (package / "backup" / "__init__.py").write_text("")
    (package / "backupish.py").write_text("")  # a module, not a package: no rule
    tests.mkdir()
    for name in ("test_backup.py", "test_backup_prune.py", "test_backupish.py", "test_demo.py"):
        (tests / name).write_text("")
    assert misplaced_tests(tests, package) == ["test_backup.py", "test_backup_prune.py"]


# -- an import inside a function says why it is there (issue 19) -------------------------

#: Modules whose imports inside functions do not all say why yet, each with the most
#: unexplained ones it may still have: none may grow, and one that reaches 0 must
#: leave this table. Every other module explains each of them with a ``# lazy:`` comment
#: (an import cycle, or a start-up cost measured with ``python -X importtime``). None
#: any more: issue 19 audited the last ones; the table stays for the check's machinery.
LAZY_IMPORTS_TO_AUDIT: dict[str, int] = {}


def unexplained_imports(path: Path) -> list[int]:
    """Lines of the imports inside a function that carry no ``# lazy: <why>`` comment,
    on their own line(s) or the line above; imports that follow one another directly
    share the comment above the first."""
    lines = path.read_text().splitlines()
    inside: dict[int, ast.Import | ast.ImportFrom] = {}
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in ast.walk(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    inside[child.lineno] = child
    explained_ends: set[int] = set()
    found: list[int] = []
    for lineno in sorted(inside):
        node = inside[lineno]
        end = node.end_lineno or lineno
        above = lines[lineno - 2].strip() if lineno > 1 else ""
        if (
            any("# lazy:" in line for line in lines[lineno - 1 : end])
            or above.startswith("# lazy:")
            or lineno - 1 in explained_ends
        ):
            explained_ends.add(end)
        else:
            found.append(lineno)
    return found


def lazy_imports(package: Path, allowed: dict[str, int]) -> tuple[list[str], list[str]]:
    """Modules with more unexplained imports inside functions than ``allowed`` lets them
    have (0 for a module not in it), and entries of ``allowed`` no longer needed."""
    over: list[str] = []
    counts: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        lines = unexplained_imports(path)
        counts[name] = len(lines)
        if len(lines) > allowed.get(name, 0):
            over.append(
                f"{name}: {len(lines)} imports inside functions without a `# lazy:` comment"
                f" (at most {allowed.get(name, 0)}), lines {lines}"
            )
    stale = [name for name in allowed if counts.get(name, 0) == 0]
    return over, stale


def test_every_import_inside_a_function_says_why() -> None:
    assert lazy_imports(PACKAGE, LAZY_IMPORTS_TO_AUDIT) == ([], [])


def test_the_lazy_import_check_finds_an_offender_and_a_stale_entry(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bare.py").write_text(
        "import os\n"
        "def f():\n    import json\n    return json, os\n"
        "def g():\n    # lazy: yaml costs 30 ms at start-up\n    import yaml\n"
        "    from a import (\n        b,\n    )\n    from c import d\n\n    import e\n"
        "    import f  # lazy: cycle with f\n"
        "class C:\n    def m(self):\n        import zlib\n"
    )
    (tmp_path / "done.py").write_text("def f():\n    import json  # lazy: a reason\n")
    (tmp_path / "audited.py").write_text("def f():\n    import json\n    import csv\n")
    over, stale = lazy_imports(tmp_path, {"done.py": 1, "audited.py": 2, "gone.py": 3})
    assert over == [
        "sub/bare.py: 3 imports inside functions without a `# lazy:` comment (at most 0),"
        " lines [3, 13, 17]"
    ]
    assert stale == ["done.py", "gone.py"]
