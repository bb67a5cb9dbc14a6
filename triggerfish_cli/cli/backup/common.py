"""`triggerfish-admin backup`: the group every backup command registers on."""

from triggerfish_cli.cli.options import sub_app

app = sub_app(
    "backup",
    "Back the store up; list, verify, restore and prune backups.\n\n"
    "Each backup is one file, triggerfish-<UTC time>.db.zst (SQLite, physical) or "
    ".jsonl.zst (logical: JSON Lines of every key, restorable into any backend), "
    "with its manifest at its end. Default destination: <base>/backups/store/.",
)
