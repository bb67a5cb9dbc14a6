"""`triggerfish-admin retention` on every persistent backend (the `store` fixture).

The gateway's rows (tests/helpers/gateway.py) are loaded into each backend;
plans and sweeps must give the same results everywhere, and the sweep's lock
must keep a second process out on every backend.
"""

from __future__ import annotations

import threading

from tests.cli.retention.test_retention import AS_OF, GONE
from tests.conftest import CliFn, StoreHandle
from tests.helpers import lock_holder
from tests.helpers.gateway import GATEWAY_ROWS


def test_plan_and_sweep_give_the_same_results_on_every_backend(
    cli: CliFn, store: StoreHandle
) -> None:
    store.seed(GATEWAY_ROWS)
    plan = cli(*store.args, "retention", "plan", "--as-of", AS_OF, "-f", "json")
    assert plan.exit_code == 0, plan.stderr
    assert store.contents() == GATEWAY_ROWS  # a plan writes nothing
    refused = cli(*store.args, "retention", "sweep", "--as-of", AS_OF)
    assert refused.exit_code == 4 and store.contents() == GATEWAY_ROWS
    dry = cli(*store.args, "retention", "sweep", "--dry-run", "--as-of", AS_OF, "-f", "json")
    assert dry.exit_code == 0 and store.contents() == GATEWAY_ROWS
    result = cli(*store.args, "retention", "sweep", "--yes", "--as-of", AS_OF, "-f", "json")
    assert result.exit_code == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict)
    assert (summary["planned"], summary["deleted"], summary["changed"]) == (8, 8, 0)
    assert summary["store"].startswith(f"{store.backend}:")
    rows = store.contents()
    audit = [key for key in rows if key.startswith("audit:")]
    assert audit == [summary["audit_key"]]
    assert {k: v for k, v in rows.items() if k not in audit} == {
        k: v for k, v in GATEWAY_ROWS.items() if k not in GONE
    }
    again = cli(*store.args, "retention", "sweep", "--yes", "--as-of", AS_OF, "-f", "json")
    assert again.json()["deleted"] == 0  # type: ignore[index]


def test_a_sweep_while_another_process_holds_the_lock_is_exit_6_or_waits(
    cli: CliFn, store: StoreHandle
) -> None:
    store.seed(GATEWAY_ROWS)
    holder = lock_holder.start(store.args, "retention-sweep")
    try:
        busy = cli(*store.args, "retention", "sweep", "--yes", "--as-of", AS_OF)
        assert busy.exit_code == 6, busy.stderr
        assert "retention-sweep" in busy.stderr and "held by another process" in busy.stderr
        assert len(busy.stderr.strip().splitlines()) <= 2  # the error and its hint
        waited = cli(*store.args, "retention", "sweep", "--yes", "--wait", "0.3", "--as-of", AS_OF)
        assert waited.exit_code == 6 and "after waiting 0.3 s" in waited.stderr
        assert store.contents() == GATEWAY_ROWS
        threading.Timer(0.5, lock_holder.release, [holder]).start()
        ok = cli(
            *store.args, "retention", "sweep", "--yes", "--wait", "60", "--as-of", AS_OF,
            "-f", "json",
        )  # fmt: skip
        assert ok.exit_code == 0, ok.stderr
        done = ok.json()
        assert isinstance(done, dict)
        # The holder may still have the store open for a moment after it let go: a live
        # writer, so its cron-history (1 of the 8) is rightly left for later then.
        history = {n["namespace"]: n for n in done["namespaces"]}["cron-history:"]
        assert done["deleted"] == done["planned"] == 7 + history["planned"]
        assert holder.wait(30) == 0  # the holder had the lock until it let go
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
