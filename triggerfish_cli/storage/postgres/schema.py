"""The PostgreSQL backend's tables: the kv table checked (or made) on open, the store's id.

::

    CREATE TABLE kv (key text COLLATE "C" PRIMARY KEY, value text NOT NULL)

``COLLATE "C"`` makes the primary-key index byte-ordered, so key order is
binary order (as on SQLite and S3); a table with another collation or other
column types is refused. The id lives in ``<schema>.tfadmin_store``
(storage/identity.py).
"""

from __future__ import annotations

from triggerfish_cli.errors import InvalidDataError, MissingStoreError
from triggerfish_cli.serialization import now_iso
from triggerfish_cli.storage.identity import ID_TABLE
from triggerfish_cli.storage.postgres.connection import PostgresConnection


class NoStoreError(MissingStoreError):
    """The schema has no kv table (and the store was not to be created)."""


class PostgresSchema(PostgresConnection):
    """The kv table's check on open, and the store's identity table."""

    def _prepare_table(self, create: bool) -> None:
        conn = self.connection
        row = conn.execute("SELECT to_regclass(%s)::oid", (self.table,)).fetchone()
        oid = row[0] if row else None
        if oid is None:
            if not create:
                raise NoStoreError(
                    f"no Triggerfish store in schema {self.schema!r} of {self._server} "
                    "(it has no kv table)",
                    hint="check storage.schema; `migrate --to` makes a store there",
                )
            # lazy: psycopg, loaded only when a Postgres store is used
            from psycopg import sql

            schema = sql.Identifier(self.schema).as_string(conn).replace("%", "%%")
            exists = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
            ).fetchone()
            with conn.transaction():
                if exists is None:
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {self.kv} "
                    '(key text COLLATE "C" PRIMARY KEY, value text NOT NULL)'
                )
            return
        columns = {
            name: (kind, collation, binary)
            for name, kind, collation, binary in conn.execute(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod), c.collname, "
                "c.collprovider = 'c' AND c.collcollate IN ('C', 'POSIX') "
                "FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation "
                "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
                (oid,),
            ).fetchall()
        }
        if columns.get("key", ("",))[0] != "text" or columns.get("value", ("",))[0] != "text":
            raise InvalidDataError(
                f"{self.describe()}: table kv is not (key text, value text): "
                "not a Triggerfish store"
            )
        if not columns["key"][2]:  # "C", "POSIX" or "ucs_basic": byte order
            raise InvalidDataError(
                f'{self.describe()}: kv.key has collation {columns["key"][1]!r}, not "C": '
                "prefixes and key order would be wrong",
                hint=f'ALTER TABLE {self.table} ALTER COLUMN key TYPE text COLLATE "C"',
            )

    def _id_table(self) -> tuple[str, str]:
        # lazy: psycopg, loaded only when a Postgres store is used
        from psycopg import sql

        name = sql.Identifier(self.schema, ID_TABLE).as_string(self.connection)
        return name, name.replace("%", "%%")

    def store_id(self) -> str | None:
        """This store's id, from ``<schema>.tfadmin_store``; None when never recorded."""
        name, quoted = self._id_table()
        with self.errors("read the store's id"):
            row = self.connection.execute("SELECT to_regclass(%s)::oid", (name,)).fetchone()
            if row is None or row[0] is None:
                return None
            found = self.connection.execute(
                f"SELECT value FROM {quoted} WHERE name = 'id'"
            ).fetchone()
        return None if found is None else str(found[0])

    def record_store_id(self, candidate: str) -> None:
        """Record ``candidate`` as the id, unless one is there already (first one wins)."""
        _, quoted = self._id_table()
        with self.errors("record the store's id"), self.connection.transaction():
            self.connection.execute(
                f"CREATE TABLE IF NOT EXISTS {quoted} (name text PRIMARY KEY, value text NOT NULL)"
            )
            self.connection.execute(
                f"INSERT INTO {quoted} (name, value) VALUES ('id', %s), ('created', %s) "
                "ON CONFLICT (name) DO NOTHING",
                (candidate, now_iso()),
            )
