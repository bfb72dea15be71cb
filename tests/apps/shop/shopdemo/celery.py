"""The Celery app. Reliability settings follow reliability.md: ack late, requeue when a worker dies,
reserve one task at a time, and a short visibility timeout so lost tasks come back quickly in tests."""

from __future__ import annotations

import os
import signal
import socket
import time

from celery import Celery

from shopdemo import _build, store
from shopdemo.settings import BUILD_ID, broker_url, result_url, visibility_timeout

if (_build.CRASH_ON_START and os.environ.get("STURDY_INSTANCE")) or os.environ.get("SHOP_CRASH_ON_IMPORT") == "1":
    # The "crashes on start" variant (or a unit given SHOP_CRASH_ON_IMPORT=1): a worker that dies at import, as a bad
    # release does, printing its broker URL as careless code does (the collection must mask the password). The variant
    # dies in the app's units only (STURDY_INSTANCE), as code that fails on something only a running instance meets:
    # an app that does not import at all is refused earlier, by the deploy's task-name check, before any switch.
    raise RuntimeError(f"build {BUILD_ID} is broken on purpose (crash-on-start variant), broker {broker_url()}")
# SHOP_SLOW_START=<seconds>: a worker that takes that long to import (for a start timeout).
time.sleep(float(os.environ.get("SHOP_SLOW_START") or 0))

# SHOP_RESULT_BACKEND=none: the app as many run, storing no results (a process type of the rabbitmq scenario).
app = Celery("shopdemo", broker=broker_url(),
             backend=None if os.environ.get("SHOP_RESULT_BACKEND") == "none" else result_url())
if broker_url().startswith(("amqp", "pyamqp")):
    # On RabbitMQ the queues are quorum queues: the broker counts deliveries there (classic queues do not), which the
    # delivery ceiling needs. The web and the workers declare them alike.
    app.conf.update(task_default_queue_type="quorum", task_create_missing_queue_type="quorum")
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_default_queue="default",
    broker_transport_options={"visibility_timeout": visibility_timeout()},
    task_time_limit=int(os.environ.get("SHOP_TASK_TIME_LIMIT", "25")),
    # A prefork child is replaced after the task that took it past 200 MB (KiB here), not OOM-killed in one.
    worker_max_memory_per_child=200_000,
    result_expires=3600,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="shopdemo.record")
def record(key: str, value: str) -> dict:
    """Record `value` under `key` once: a redelivered task finds the effect and changes nothing twice."""
    db = store.client()
    db.incr(store.RUNS.format(key=key))
    if db.set(store.EFFECT.format(key=key), value, nx=True):
        db.incr(store.EFFECTS_TOTAL)
    return {"key": key, "build_id": BUILD_ID, "host": socket.gethostname(), "pid": os.getpid()}


@app.task(name="shopdemo.sleep")
def sleep(key: str, seconds: float) -> dict:
    """A long task: counts its runs, works for `seconds`, then records its effect once."""
    db = store.client()
    db.incr(store.RUNS.format(key=key))
    time.sleep(float(seconds))
    if db.set(store.EFFECT.format(key=key), "done", nx=True):
        db.incr(store.EFFECTS_TOTAL)
    return {"key": key, "build_id": BUILD_ID, "host": socket.gethostname(), "pid": os.getpid()}


@app.task(name="shopdemo.fail")
def fail(key: str) -> None:
    """A task that fails (its outcome counted as failed)."""
    store.client().incr(store.RUNS.format(key=key))
    raise ValueError(f"{key} fails on purpose")


@app.task(name="shopdemo.flaky", bind=True, max_retries=1)
def flaky(self, key: str) -> dict:
    """A task that asks to be retried once, then succeeds (its first run counted as retried)."""
    store.client().incr(store.RUNS.format(key=key))
    if not self.request.retries:
        raise self.retry(countdown=0)
    return {"key": key, "build_id": BUILD_ID}


@app.task(name="shopdemo.poison")
def poison(key: str) -> None:
    """A poison message: kills the process that runs it (as a segfault or the OOM killer would), every time."""
    store.client().incr(store.RUNS.format(key=key))
    os.kill(os.getpid(), signal.SIGKILL)


if getattr(_build, "REFUND_TASK", False):
    # The "refund-task" variant registers a task the other builds do not know.

    @app.task(name="shopdemo.refund")
    def refund(key: str) -> dict:
        db = store.client()
        db.incr(store.RUNS.format(key=key))
        db.set(store.EFFECT.format(key=key), "refunded", nx=True)
        return {"key": key, "build_id": BUILD_ID, "host": socket.gethostname()}
