"""triggerfish-admin: the operator's command line for Triggerfish storage."""

__version__ = "0.1.0"
