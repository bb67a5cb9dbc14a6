"""The SQLite backend: the store, its write gate, the FTS5 memory index, the streamed snapshot."""
