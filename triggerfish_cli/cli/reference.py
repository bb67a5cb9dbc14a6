"""The documents generated from the command tree (:mod:`triggerfish_cli.cli.command_tree`).

The Markdown reference and the shell completion scripts are rendered here, the
man page in :mod:`triggerfish_cli.cli.manpage`, so none of them can drift from
the program. ``scripts/generate_docs.py`` writes the files; a test fails when a
committed one differs from what this module renders.
"""


from __future__ import annotations

from typing import Any

from triggerfish_cli import PROG, __version__
from triggerfish_cli.cli.command_tree import GENERATED, command_tree, environment, plain, walk
from triggerfish_cli.cli.manpage import render_man
from triggerfish_cli.cli.typer_compat import shell_script
from triggerfish_cli.errors import EXIT_CODES

SHELLS = ("bash", "zsh", "fish")


# -- Markdown -------------------------------------------------------------------


def _md_param(param: dict[str, Any]) -> str:
    names = ", ".join(f"`{opt}`" for opt in param["opts"] + param["secondary_opts"])
    extra = []
    if param.get("choices"):
        extra.append("one of " + ", ".join(f"`{c}`" for c in param["choices"]))
    if param.get("default") not in (None, False, "") and not param.get("flag"):
        extra.append(f"default `{param['default']}`")
    if param.get("envvar"):
        extra.append(f"env `{param['envvar']}`")
    if param["required"]:
        extra.append("required")
    tail = f" ({'; '.join(extra)})" if extra else ""
    label = (
        names if param["kind"] == "option" else f"`{(param['metavar'] or param['name']).upper()}`"
    )
    return f"- {label}: {plain(param['help'])}{tail}"


def render_markdown(tree: dict[str, Any]) -> str:
    lines = [
        f"<!-- {GENERATED} -->",
        "",
        f"# {PROG} command reference",
        "",
        f"Version {__version__}. Every command and option, from the program itself "
        f"(`{PROG} help --json` gives the same tree as JSON).",
        "",
    ]
    for node in walk(tree):
        depth = min(node["path"].count(" ") + 2, 4)
        lines += [f"{'#' * depth} `{node['path']}`", ""]
        if node["help"]:
            lines += [node["help"], ""]
        lines += ["```", f"{node['path']} {node['usage']}".rstrip(), "```", ""]
        if node["params"]:
            lines += [_md_param(param) for param in node["params"]] + [""]
        if node["examples"]:
            lines += ["Examples:", "", "```sh", *node["examples"], "```", ""]
        if node["commands"]:
            lines += ["Commands: " + ", ".join(f"`{c['name']}`" for c in node["commands"]), ""]
    lines += ["## Exit status", "", "| code | meaning |", "|---|---|"]
    lines += [f"| {code} | {meaning} |" for code, meaning in EXIT_CODES.items()]
    lines += ["", "## Environment", ""]
    lines += [f"- `{name}`: {text}" for name, text in environment(tree)]
    return "\n".join(lines).rstrip() + "\n"


# -- shell completion --------------------------------------------------------------


def completion_script(shell: str) -> str:
    """The completion script for ``shell``: a shim that asks the program itself."""
    var = "_" + PROG.replace("-", "_").upper() + "_COMPLETE"
    script = shell_script(PROG, var, shell).strip()
    if shell == "zsh":  # `#compdef` must stay the first line for fpath autoloading
        first, _, rest = script.partition("\n")
        return f"{first}\n# {GENERATED}\n{rest.strip()}\n"
    return f"# {GENERATED}\n{script}\n"


def generated_files() -> dict[str, str]:
    """Relative path -> content of every generated file."""
    tree = command_tree()
    files = {
        "man/triggerfish-admin.1": render_man(tree),
        "docs/cli.md": render_markdown(tree),
    }
    for shell, name in (
        ("bash", "triggerfish-admin.bash"),
        ("zsh", "_triggerfish-admin"),
        ("fish", "triggerfish-admin.fish"),
    ):
        files[f"completions/{name}"] = completion_script(shell)
    return files
