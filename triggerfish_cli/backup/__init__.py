"""Backups: archives, encryption, destinations (local, S3), create, verify, restore, prune, diff."""
