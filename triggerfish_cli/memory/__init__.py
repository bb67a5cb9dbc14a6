"""Memory records and their search indexes (FTS5 on SQLite, tsvector on Postgres)."""
