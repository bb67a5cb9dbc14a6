"""Raw key-value work: the namespace report, guarded writes and deletes, export/import.

Everything here takes a :class:`StorageProvider` and returns plain data; the
``kv`` commands only parse options and print what these functions return.

``keys.py``: namespaces, single keys, the raw view, prefixes; ``transfer.py``:
export and import.
"""
