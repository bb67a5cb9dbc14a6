"""The PostgreSQL backend: the store, its tsvector memory index, advisory locks."""
