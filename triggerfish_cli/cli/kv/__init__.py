"""`triggerfish-admin kv`: inspect and edit the raw key-value store.

One module per family of commands, each registering on the group in
common.py; importing them here, in this order, is the order of the help.
"""

# The order of these imports is the order of the help: keep it.
from triggerfish_cli.cli.kv import listing  # isort: split

from triggerfish_cli.cli.kv import values  # isort: split

from triggerfish_cli.cli.kv import delete  # isort: split

from triggerfish_cli.cli.kv import transfer
from triggerfish_cli.cli.kv.common import app

__all__ = ["app", "delete", "listing", "transfer", "values"]
