"""triggerfish.yaml: versions, rollback, diff and validation, secrets, the gateway's own backups."""
