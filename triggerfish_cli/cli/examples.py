"""One or two examples for every command, shown at the end of its --help and in the man page."""

from __future__ import annotations

from typing import Any

from triggerfish_cli import PROG

P = PROG

#: command path (after the program name) -> example command lines.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "kv namespaces": (f"{P} kv namespaces --ages", f"{P} kv namespaces -f json | jq '.[].keys'"),
    "kv list": (f"{P} kv list sessions: --limit 3", f"{P} kv list --namespace conv --keys-only"),
    "kv get": (f"{P} kv get main-session-id", f"{P} kv get prefs:owner:bumpers_default --raw"),
    "kv set": (f"{P} kv set prefs:owner:bumpers_default true", f"{P} kv set note:x --raw < x.txt"),
    "kv delete": (
        f"{P} kv delete --prefix 'pairing:pending:' --dry-run",
        f"{P} kv delete pairing:pending:telegram --yes",
    ),
    "kv clear": (f"{P} kv clear --dry-run", f"{P} --db scratch.db kv clear --yes"),
    "kv export": (f"{P} kv export conv: > conv.jsonl", f"{P} kv export -f csv -o all.csv"),
    "kv import": (
        f"{P} kv import conv.jsonl --dry-run",
        f"{P} kv export -t RESTRICTED | {P} --db copy.db kv import --create -t RESTRICTED -",
    ),
    "demo create": (
        f"{P} demo create --records 20000",
        f"{P} demo create --db demo.db --seed 3 --now 2026-05-01",
    ),
    "config snapshot": (
        f"{P} config snapshot -m 'before the model switch'",
        f"{P} config snapshot --redact",
    ),
    "config history": (f"{P} config history", f"{P} config history -f json"),
    "config show": (f"{P} config show v12", f"{P} config show -f json"),
    "config diff": (
        f"{P} config diff v12 current",
        f"{P} config diff --exit-code -q || echo changed",
    ),
    "config rollback": (f"{P} config rollback v12 --dry-run", f"{P} config rollback v12 --yes"),
    "config import-backups": (
        f"{P} config import-backups --dry-run",
        f"{P} config import-backups --redact",
    ),
    "config validate": (f"{P} config validate", f"{P} config validate new.yaml -f json"),
    "memory search": (
        f"{P} memory search acme stack --taint INTERNAL --limit 5",
        f"{P} memory search 'deploy*' --raw -A",
    ),
    "memory get": (f"{P} memory get user-name", f"{P} memory get user-name --taint RESTRICTED"),
    "memory list": (f"{P} memory list --tag persona", f"{P} memory list -A --limit 20"),
    "memory save": (
        f"{P} memory save user-name 'User is Alice' --tags persona",
        f"echo 'likes tea' | {P} memory save drink --taint INTERNAL",
    ),
    "memory delete": (
        f"{P} memory delete user-name --dry-run",
        f"{P} memory delete user-name --yes",
    ),
    "memory history": (f"{P} memory history user-name", f"{P} memory history user-name -A"),
    "memory stats": (f"{P} memory stats", f"{P} memory stats --taint RESTRICTED -f json"),
    "memory reindex": (
        f"{P} memory reindex --taint RESTRICTED --dry-run",
        f"{P} memory reindex --taint RESTRICTED",
    ),
    "memory purge": (
        f"{P} memory purge --older-than 90d --dry-run",
        f"{P} memory purge --older-than 1y --yes",
    ),
    "retention policies": (f"{P} retention policies", f"{P} retention policies -f json"),
    "retention plan": (
        f"{P} retention plan --list --namespace sessions",
        f"{P} retention plan --exit-code -q || echo 'a sweep has work to do'",
    ),
    "retention sweep": (
        f"{P} retention sweep --dry-run",
        f"{P} retention sweep --yes --quiet --max-delete 500000 --wait 600",
    ),
    "backup create": (
        f"{P} backup create --verify --label nightly",
        f"{P} backup create --logical --max-taint INTERNAL --to s3://bucket/handover/",
    ),
    "backup list": (f"{P} backup list", f"{P} backup list --from s3://bucket/tf/ --all-stores"),
    "backup verify": (f"{P} backup verify --latest", f"{P} backup verify --all"),
    "backup restore": (
        f"{P} backup restore --latest --dry-run",
        f"{P} backup restore --latest --include cron --merge --dry-run",
    ),
    "backup keygen": (
        f"{P} backup keygen -o ~/.config/triggerfish/backup.key",
        f"{P} backup keygen -o backup.key > backup.pub",
    ),
    "backup diff": (
        f"{P} backup diff --latest",
        f"{P} backup diff A.db.zst B.jsonl.zst --keys --exit-code",
    ),
    "backup prune": (
        f"{P} backup prune --keep-daily 7 --keep-monthly 6 --dry-run",
        f"{P} -q backup prune --keep-last 10 --yes",
    ),
    "migrate": (
        f"{P} migrate --from ~/.triggerfish/data/triggerfish.db --to pg.yaml --dry-run",
        f"{P} migrate --from old.db --to new.db --yes",
    ),
    "status": (f"{P} status", f"{P} status -f json | jq '.live_writers'"),
    "help": (f"{P} help kv list", f"{P} help --json | jq '.commands[].name'"),
    "completion": (
        f"source <({P} completion bash)",
        f"mkdir -p ~/.local/share/bash-completion/completions && "
        f"{P} completion bash > ~/.local/share/bash-completion/completions/{P}",
    ),
}


def epilog(path: str) -> str | None:
    """The ``Examples:`` block ending the help of the command at ``path``."""
    lines = EXAMPLES.get(path)
    if not lines:
        return None
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


def attach(command: Any, path: str = "") -> None:
    """Set the examples as the epilog of ``command`` and every command below it."""
    found = epilog(path)
    if found is not None:
        command.epilog = found
    for name, sub in getattr(command, "commands", {}).items():
        attach(sub, f"{path} {name}".strip())
