"""The S3 backend: the store, its lease, the backup destination."""
