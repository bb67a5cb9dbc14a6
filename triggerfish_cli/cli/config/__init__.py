"""`triggerfish-admin config`: versions of triggerfish.yaml, and a safe way back.

One module per command (snapshot, history and show together), each
registering on the group in common.py; importing them here, in this order,
is the order of the help.
"""

# The order of these imports is the order of the help: keep it.
from triggerfish_cli.cli.config import versions  # isort: split

from triggerfish_cli.cli.config import diff  # isort: split

from triggerfish_cli.cli.config import rollback  # isort: split

from triggerfish_cli.cli.config import import_backups  # isort: split

from triggerfish_cli.cli.config import validate
from triggerfish_cli.cli.config.common import app

__all__ = ["app", "diff", "import_backups", "rollback", "validate", "versions"]
