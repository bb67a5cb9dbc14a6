"""`triggerfish-admin backup`: create, list, verify, restore and prune backups.

One module per command (or close family), each registering on the group in
common.py; importing them here, in this order, is the order of the help.
"""

# The order of these imports is the order of the help: keep it.
from triggerfish_cli.cli.backup import create  # isort: split

from triggerfish_cli.cli.backup import listing  # isort: split

from triggerfish_cli.cli.backup import verify  # isort: split

from triggerfish_cli.cli.backup import restore  # isort: split

from triggerfish_cli.cli.backup import diff  # isort: split

from triggerfish_cli.cli.backup import prune  # isort: split

from triggerfish_cli.cli.backup import keygen
from triggerfish_cli.cli.backup.common import app

__all__ = ["app", "create", "diff", "keygen", "listing", "prune", "restore", "verify"]
