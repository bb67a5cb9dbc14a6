"""The man page, rendered from the command tree (roff)."""

from __future__ import annotations

import re
from typing import Any

from triggerfish_cli import PROG, __version__
from triggerfish_cli.cli.command_tree import GENERATED, environment, plain, walk
from triggerfish_cli.errors import EXIT_CODES

FILES: tuple[tuple[str, str], ...] = (
    (
        "~/.triggerfish/triggerfish.yaml",
        "The gateway's config file; the storage: section "
        "(and the other sections of ours) choose the backend and policies.",
    ),
    (
        "~/.triggerfish/data/triggerfish.db",
        "The default SQLite store (WAL; -wal and -shm beside "
        "it), created with the gateway's schema when missing.",
    ),
    ("~/.triggerfish/backups/", "The gateway's own copies of triggerfish.yaml."),
)

EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Look at what is in the store:", "triggerfish-admin kv namespaces --ages"),
    ("Export one namespace as JSON Lines:", "triggerfish-admin kv export conv: > conv.jsonl"),
    (
        "Delete every key under a literal prefix, after a dry run:",
        "triggerfish-admin kv delete --prefix 'pairing:pending:' --dry-run\n"
        "triggerfish-admin kv delete --prefix 'pairing:pending:' --yes",
    ),
    (
        "A nightly retention sweep from cron: silent on success, so cron mails only failures; "
        "it waits up to 10 minutes for a running sweep and stops before deleting anything "
        "when the plan is implausibly large:",
        "17 3 * * *  triggerfish-admin retention sweep --yes --quiet --max-delete 500000 "
        "--wait 600",
    ),
    (
        "See what a sweep would delete, key by key, without writing anything:",
        "triggerfish-admin retention plan --list",
    ),
    (
        "A scripted backup: create and verify one archive, keep 7 dailies and 6 monthlies, "
        "and read the manifest (key counts, sha256) from the JSON it prints; the exit code "
        "says whether it worked:",
        "manifest=$(triggerfish-admin backup create --verify --label nightly --format json) "
        "|| exit $?\n"
        "triggerfish-admin -q backup prune --keep-daily 7 --keep-monthly 6 --yes\n"
        "triggerfish-admin backup restore --undo --dry-run",
    ),
    (
        "Search the agent's memory as a session at INTERNAL would (nothing above INTERNAL "
        "is returned or counted):",
        "triggerfish-admin memory search acme stack --taint INTERNAL --limit 5",
    ),
    (
        "Roll triggerfish.yaml back to version 12 after looking at the change:",
        "triggerfish-admin config history\n"
        "triggerfish-admin config diff v12 current\n"
        "triggerfish-admin config rollback v12 --dry-run\n"
        "triggerfish-admin config rollback v12 --yes",
    ),
)


def _roff(text: str) -> str:
    """Escape text for roff: backslashes, dashes, leading dots and quotes."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    out = []
    for line in text.splitlines() or [""]:
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def _man_paragraphs(text: str) -> list[str]:
    lines: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        if paragraph.strip():
            lines += [".PP", _roff(" ".join(paragraph.split()))]
    return lines


def _man_param(param: dict[str, Any]) -> list[str]:
    if param["kind"] == "option":
        names = ", ".join(
            f"\\fB{_roff(opt)}\\fR" for opt in param["opts"] + param["secondary_opts"]
        )
        if not param.get("flag"):
            meta = param.get("metavar") or (
                "{" + ",".join(param["choices"]) + "}"
                if param.get("choices")
                else _METAVARS.get(param["type"], param["type"].upper())
            )
            names += f" \\fI{_roff(str(meta))}\\fR"
    else:
        names = f"\\fI{_roff((param['metavar'] or param['name']).upper())}\\fR"
    text = plain(param["help"])
    if param.get("envvar"):
        text += f" (environment: {param['envvar']})"
    return [".TP", names, _roff(text)]


_METAVARS = {
    "integer": "N",
    "integer range": "N",
    "float": "NUMBER",
    "float range": "NUMBER",
    "text": "TEXT",
    "path": "PATH",
    "filename": "FILE",
}


def render_man(tree: dict[str, Any]) -> str:
    lines = [
        f'.\\" {GENERATED}',
        f'.TH TRIGGERFISH\\-ADMIN 1 "" "{PROG} {__version__}" "User Commands"',
        ".SH NAME",
        f"{_roff(PROG)} \\- {_roff(tree['summary'].rstrip('.'))}",
        ".SH SYNOPSIS",
        f".B {_roff(PROG)}",
        "[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        *_man_paragraphs(tree["help"]),
        ".SH GLOBAL OPTIONS",
    ]
    for param in tree["params"]:
        lines += _man_param(param)
    lines.append(".SH COMMANDS")
    for node in walk(tree):
        if node is tree:
            continue
        lines += [
            ".SS " + _roff(node["path"].removeprefix(PROG + " ")),
            f".B {_roff(node['path'])}",
            _roff(node["usage"]),
        ]
        lines += _man_paragraphs(node["help"])
        if node["params"]:
            lines.append(".RS")
            for param in node["params"]:
                lines += _man_param(param)
            lines.append(".RE")
        if node["examples"]:
            lines += [".PP", "Examples:", ".RS", ".nf", *map(_roff, node["examples"]), ".fi", ".RE"]
    lines.append(".SH ENVIRONMENT")
    for name, text in environment(tree):
        lines += [".TP", f"\\fB{_roff(name)}\\fR", _roff(text)]
    lines.append(".SH FILES")
    for name, text in FILES:
        lines += [".TP", f"\\fI{_roff(name)}\\fR", _roff(text)]
    lines += [".SH EXIT STATUS"]
    for code, meaning in EXIT_CODES.items():
        lines += [".TP", f"\\fB{code}\\fR", _roff(meaning[0].upper() + meaning[1:] + ".")]
    lines.append(".SH EXAMPLES")
    for caption, command in EXAMPLES:
        lines += [".PP", _roff(caption), ".PP", ".RS", ".nf", _roff(command), ".fi", ".RE"]
    lines += [".SH SEE ALSO", "\\fBsqlite3\\fR(1), \\fBcrontab\\fR(5)"]
    return "\n".join(lines) + "\n"

