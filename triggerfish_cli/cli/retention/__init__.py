"""`triggerfish-admin retention`: see the policies, plan a sweep, sweep.

One module per command, each registering on the group in common.py;
importing them here, in this order, is the order of the help.
"""

# The order of these imports is the order of the help: keep it.
from triggerfish_cli.cli.retention import policies  # isort: split

from triggerfish_cli.cli.retention import plan  # isort: split

from triggerfish_cli.cli.retention import sweep
from triggerfish_cli.cli.retention.common import app

__all__ = ["app", "plan", "policies", "sweep"]
