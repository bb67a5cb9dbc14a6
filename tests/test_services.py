"""The test servers themselves: reachable, and mandatory under CI."""

from __future__ import annotations

from tests.helpers.services import S3, Postgres


def test_postgres_is_reachable(postgres: Postgres) -> None:
    import psycopg

    with psycopg.connect(postgres.dsn, connect_timeout=3) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        found = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (postgres.schema,)
        ).fetchone()
        assert found == (1,)


def test_s3_server_is_a_real_http_endpoint(s3: S3) -> None:
    bucket = s3.new_bucket()
    client = s3.client()
    client.put_object(Bucket=bucket, Key="a/b", Body=b"x")  # type: ignore[attr-defined]
    listed = client.list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]
    assert [o["Key"] for o in listed["Contents"]] == ["a/b"]
    assert s3.endpoint_url.startswith("http://127.0.0.1:")
