"""`triggerfish-admin memory`: the agent's persistent memory, at a chosen taint.

One module per family of commands, each registering on the group in
common.py; importing them here, in this order, is the order of the help.
"""

from triggerfish_cli.cli.memory import fulltext, records, upkeep
from triggerfish_cli.cli.memory.common import app

__all__ = ["app", "fulltext", "records", "upkeep"]
