"""triggerfish-admin: the operator's command line for Triggerfish storage."""

__version__ = "0.1.0"

#: The command's name, as installed and as every message, page and example names it.
PROG = "triggerfish-admin"
