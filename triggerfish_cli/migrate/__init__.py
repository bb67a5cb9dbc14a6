"""Moving a store between backends: stream, resume, verify.

``migrate --from SOURCE --to TARGET`` copies every key of one store into
another (SQLite, Postgres, S3, in any direction), then proves the copy.

The copy
    Keys stream from the source in binary key order, in batches of
    ``batch_size``; each batch is one ``set_batched`` on the target (one
    transaction on Postgres, parallel PUTs on S3, transactions short enough
    for the write gate on SQLite).

Resuming
    After each batch is written, the target's progress record
    ``tfadmin:migrate`` (a JSON value: source, last key, count) is updated.
    An interrupted run (Ctrl-C, a dropped connection, a crash) is finished
    by running the same command again: it continues after the recorded
    key. Because keys come in order and a batch is recorded only after it
    was written, every source key up to the recorded one is in the target;
    the at most one batch written after the record is written again
    (writes are idempotent). The record is removed when the copy verified.

Verification
    Afterwards both stores are read again, side by side in key order, and
    compared per namespace: key counts, an order-independent checksum (the
    sum modulo 2**128 of BLAKE2b-128 over ``len(key)``, key and value, the
    same on both sides) and each key's value. Keys changed in the source
    during the copy (a gateway still writing) show up as mismatches: stop
    the gateway, rerun with ``--merge``.

Safety
    The source is opened read-only (SQLite ``mode=ro``, a read-only
    Postgres session, no S3 writes) and is never modified. A target that
    holds keys is refused unless ``--merge`` (source values then win); a
    target with another migration's progress record is refused. One audit
    record is written to the target when the copy verified.

Beyond kv
    Only ``kv`` is copied. SQLite's memory search tables (``memory_fts``,
    ``memory_meta``) are an index derived from the ``memory:`` keys: into a
    SQLite target it is rebuilt from them after a verified copy (the gateway
    searches it); Postgres and S3 targets index or scan by themselves. Tables of
    our own (``tfadmin_*``) hold local state (locks, catalogs) and stay.
"""
