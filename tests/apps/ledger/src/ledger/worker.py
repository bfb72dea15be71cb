"""The Celery app: its broker comes from the environment (LEDGER_BROKER_URL), as the deploy's secrets give it; every
task goes to the queue ledger.entries. It has no result backend, as many apps that only send tasks have none (the
deploy's smoke jobs answer all the same): post_entry hands its answer back on a Redis list of its own."""

from __future__ import annotations

import os
import socket

from celery import Celery

app = Celery("ledger", broker=os.environ.get("LEDGER_BROKER_URL", "redis://localhost:6379/5"))
app.conf.update(
    task_default_queue="ledger.entries",
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    # Celery beat (the ledger-beat singleton) sends ledger.tick every 5 seconds.
    beat_schedule={"ledger-tick": {"task": "ledger.tick", "schedule": 5.0}},
)


@app.task(name="ledger.post_entry")
def post_entry(account: str, cents: int, reply: str = "") -> dict:
    """Post one entry; says which worker did it on the Redis list `reply` (ledger-post waits there)."""
    import json  # pylint: disable=import-outside-toplevel

    import redis  # pylint: disable=import-outside-toplevel

    done = {"account": account, "cents": cents, "host": socket.gethostname(), "pid": os.getpid()}
    if reply:
        client = redis.Redis.from_url(app.conf.broker_url)
        client.rpush(reply, json.dumps(done))
        client.expire(reply, 600)
    return done


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
