"""``status --check``: thresholds over what ``status`` reads, as a Nagios/Icinga plugin.

Each check gives one :class:`Finding`: its name, a state (``OK``,
``WARNING``, ``CRITICAL``, ``UNKNOWN``), a one-line message, the value it
measured and its limits. The checks:

- ``backup_age``: the age of the newest *verified* backup of this store (its
  manifest's creation time; verified: ``backup verify`` recorded a pass for
  that very archive, or, for an encrypted one, a keyless pass: its encrypted
  bytes intact) in the backup destination; none at all counts as older
  than any limit;
- ``full_verify_age``: the time since a verify that checked the contents
  (with the key, for an encrypted backup; made here or on another host, its
  verdict beside the archive) passed one of this store's backups; none
  counts as older than any limit (default ``8d``, a warning only: keyless
  verifies alone are a WARNING, never CRITICAL);
- ``sweep_age``: the time since the last *successful* ``retention sweep`` of
  this store (the newest sweep audit record naming this store's id, without
  an error, not interrupted, over every namespace: not ``--namespace``);
  none recorded counts as older than any limit;
- ``wal_size``: the size of the SQLite store's ``-wal`` file (other
  backends have none: OK);
- ``index_drift``: memory index entries to fix (missing, stale and orphaned
  together, as ``memory reindex --dry-run`` counts them);
- ``config_versions``: stored versions of triggerfish.yaml, alerting when
  *fewer* than the limit are held;
- ``backup_destination``: the destination can be reached: a local directory
  that exists and that we may write into, or an S3 prefix we can list
  (CRITICAL when unreachable; UNKNOWN for any other error).
- ``live_writers``: CRITICAL when a live writer of the SQLite store is
  stopped (state T), WARNING when this very check resumed one that a run of
  ours that died had left stopped (storage/sqlite/gate_ledger.py); no finding
  otherwise.

A limit is ``WARN[:CRIT]``: durations in the project's grammar (``26h:50h``,
``timespec``), sizes (``64MiB:256MiB``), counts (``0:100``). A value above
WARN (below, for ``config_versions``) is a warning, above CRIT critical; a
limit without CRIT never becomes critical, and ``off`` turns a check off.
Limits come from the ``checks:`` section of triggerfish.yaml, overridden by
the command's flags, over the defaults in :data:`CHECKS`.

The overall state is the worst finding: CRITICAL, then WARNING, then
UNKNOWN, then OK (nagios-plugins' ``max_state_alt``); the exit code is the
plugin convention's 0, 1, 2, 3. A store that does not exist is UNKNOWN. The
checks only read: nothing is written to the store or the destination.
"""
