"""The Celery app: its broker and result store come from the environment (LEDGER_BROKER_URL), as the deploy's
secrets give them; every task goes to the queue ledger.entries."""

from __future__ import annotations

import os
import socket

from celery import Celery

app = Celery("ledger", broker=os.environ.get("LEDGER_BROKER_URL", "redis://localhost:6379/5"),
             backend=os.environ.get("LEDGER_BROKER_URL", "redis://localhost:6379/5"))
app.conf.update(
    task_default_queue="ledger.entries",
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    result_expires=600,
    # Celery beat (the ledger-beat singleton) sends ledger.tick every 5 seconds.
    beat_schedule={"ledger-tick": {"task": "ledger.tick", "schedule": 5.0}},
)


@app.task(name="ledger.post_entry")
def post_entry(account: str, cents: int) -> dict:
    """Post one entry; answers which worker did it."""
    return {"account": account, "cents": cents, "host": socket.gethostname(), "pid": os.getpid()}


@app.task(name="ledger.reconcile")
def reconcile(account: str, seconds: float) -> dict:
    """A long task: reconciles an account for `seconds` (a deploy must wait for it, not lose it)."""
    import time  # pylint: disable=import-outside-toplevel

    time.sleep(seconds)
    return {"account": account, "seconds": seconds, "host": socket.gethostname(), "pid": os.getpid()}


@app.task(name="ledger.tick")
def tick() -> int:
    """Sent by beat: counts in ledger:ticks, so a test sees that exactly one scheduler runs."""
    import redis  # pylint: disable=import-outside-toplevel

    return redis.Redis.from_url(app.conf.broker_url).incr("ledger:ticks")
