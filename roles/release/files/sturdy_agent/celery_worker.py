# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inside a Celery worker (STURDY_AGENT=celery): readiness, watchdog and stop notices to systemd, the smoke task and
its consumer, the sturdy_health query, the gate before the pool (celery_gate), task records and counts, the publish
stamp, and the fixes for messages Celery or kombu would lose.
Imported only in a Celery worker's process; Celery and kombu come from the app's venv."""

from __future__ import annotations

import datetime
import inspect
import os
import socket
import threading
import time
import types

from .celery_gate import install_gate
from .core import (STATE, identity, loaded_build, notify, own_queue, own_smoke_queue, paused_here, paused_status,
                   reply_url, unit_name)
from .names import SENT_HEADER, SMOKE_PREFIX, SMOKE_TASK
from .records import (close_dead_children_records, count_outcome, prune_task_records, record_task_end,
                      record_task_start, task_record_path)

COUNTED = {"task_success": "succeeded", "task_failure": "failed", "task_retry": "retried"}


def answer(token: str, conf, consumed: list[str], ran_in: str = "pool", busy: list | None = None) -> dict:
    """What the smoke job answers: from the pool (ran_in "pool"), or from the worker's main process while every pool
    slot is busy (ran_in "worker", busy: the tasks occupying the slots)."""
    options = conf.broker_transport_options or {}
    return {
        **identity(token, ran_in, busy or [], consumed, STATE.get("main_pid", os.getpid())),
        "settings": {
            "acks_late": bool(conf.task_acks_late),
            "reject_on_worker_lost": bool(conf.task_reject_on_worker_lost),
            "prefetch_multiplier": conf.worker_prefetch_multiplier,
            "concurrency": STATE.get("concurrency"),
            "pool": STATE.get("pool"),
            "max_tasks_per_child": STATE.get("max_tasks_per_child"),
            "max_memory_per_child": STATE.get("max_memory_per_child"),
            "task_time_limit": conf.task_time_limit,
            "task_soft_time_limit": conf.task_soft_time_limit,
            "visibility_timeout": options.get("visibility_timeout"),
        },
    }


def pool_name(pool) -> str | None:
    """The worker's pool as Celery names it (prefork, solo, threads' "thread", gevent...): the class the command line
    gave, or the name or "module:Class" of worker_pool."""
    module = pool.split(":", 1)[0] if isinstance(pool, str) else getattr(pool, "__module__", "")
    return module.rsplit(".", 1)[-1] or None


def health(queues: list[str], tasks: list[dict]) -> dict:
    """The answer to the sturdy_health remote-control query: what this worker runs and is doing."""
    release, build_id = loaded_build()
    return {
        "build_id": build_id,
        "release": release,
        "host": socket.gethostname(),
        "unit": unit_name(),
        "pid": STATE.get("main_pid", os.getpid()),
        "queues": sorted(q for q in queues if not q.startswith(SMOKE_PREFIX)),
        "tasks": tasks,
    }


def register_health() -> None:
    """The sturdy_health remote-control query, registered in the worker once it is set up (not at interpreter
    start: a pool that patches the standard library must come first)."""
    from celery.worker import state as worker_state  # pylint: disable=import-outside-toplevel
    from celery.worker.control import inspect_command  # pylint: disable=import-outside-toplevel

    @inspect_command(name="sturdy_health")
    def sturdy_health(state, **_):
        consumer = getattr(state.consumer, "task_consumer", None)
        queues = [q.name for q in consumer.queues] if consumer else []
        tasks = [{"id": r.id, "name": r.name, "started": r.time_start} for r in list(worker_state.active_requests)]
        return health(queues, tasks)


def pool_load(reserved, held) -> list:
    """The tasks (smoke jobs aside) this worker has handed to its pool: reserved, minus those the gate still holds."""
    held = {id(r) for r in held}
    return [r for r in reserved if r.name != SMOKE_TASK and id(r) not in held]


def expired(headers: dict, now: datetime.datetime) -> bool:
    stamp = headers.get("expires")
    if not stamp:
        return False
    try:
        return datetime.datetime.fromisoformat(str(stamp)) < now
    except (TypeError, ValueError):
        return False


def reply_backend(app):
    """The backend the smoke task answers through: the app's result backend, or, for an app with none, one on the
    broker (reply_url()) that only the smoke task uses: the app's own tasks still store nothing. One per process (the
    pool's children make their own connections)."""
    if app.conf.result_backend:
        return app.backend
    backends = STATE.setdefault("reply_backends", {})
    if os.getpid() not in backends:
        from celery.app.backends import by_url  # pylint: disable=import-outside-toplevel

        cls, url = by_url(reply_url(app.connection_for_write().as_uri(include_password=True)), app.loader)
        backends[os.getpid()] = cls(app=app, url=url)
    return backends[os.getpid()]


def answer_smoke(consumer, message, to_pool, reserved) -> None:
    """Hand a smoke job to the pool when a slot is free; when every slot is busy, answer it from here (the worker's
    main process, which loaded the same release) with the tasks occupying the slots: proof the instance runs the build
    and takes work, without waiting for the backlog. `reserved`: the requests the worker holds (Celery's state)."""
    gate = STATE.get("gate")
    load = pool_load(list(reserved), list(gate.waiting) if gate else [])
    if len(load) < (STATE.get("concurrency") or 1):
        return to_pool(message)
    headers = message.headers or {}
    if expired(headers, datetime.datetime.now(datetime.timezone.utc)):
        return message.ack()  # the deploy that sent it stopped waiting long ago
    try:
        token = message.decode()[0][0]
    except (TypeError, ValueError, IndexError, KeyError):
        token = None
    now = time.time()
    busy = [{"id": r.id, "name": r.name, "running_for": round(now - r.time_start, 1) if r.time_start else None}
            for r in load]
    app = consumer.app
    queues = list(app.amqp.queues.consume_from or app.amqp.queues)
    backend = reply_backend(app)
    # rpc:// sends the answer to the sender's reply queue, which the message names (the pool's path reads it from the
    # task's request); a key-value backend needs no request.
    request = (types.SimpleNamespace(reply_to=(message.properties or {}).get("reply_to"), children=[],
                                     correlation_id=(message.properties or {}).get("correlation_id") or headers.get("id"))
               if hasattr(backend, "destination_for") else None)
    backend.store_result(headers.get("id"), answer(token, app.conf, queues, "worker", busy), "SUCCESS", request=request)
    if getattr(gate, "log", None) is not None:
        gate.log.info("sturdy_agent: smoke job %s answered by the worker itself: every pool slot is busy (%s)",
                      headers.get("id"), ", ".join(f"{b['name']}[{b['id']}]" for b in busy))
    return message.ack()


def smoke_consumer_step():
    """A consumer bootstep for the instance's smoke queue, on a channel of its own: the task consumer's prefetch limit
    (full while long tasks run) does not hold the smoke job back, and it is restarted with the connection."""
    from celery import bootsteps  # pylint: disable=import-outside-toplevel
    from celery.worker import state as worker_state  # pylint: disable=import-outside-toplevel
    from kombu import Consumer  # pylint: disable=import-outside-toplevel

    class SmokeConsumer(bootsteps.ConsumerStep):
        requires = ("celery.worker.consumer.tasks:Tasks",)

        def start(self, c):
            self.c, self.to_pool = c, c.create_task_handler()  # pylint: disable=attribute-defined-outside-init
            super().start(c)

        def _close(self, c, cancel_consumers=True):
            if c.connection is None:  # lost with the broker: its channel went with it
                self.consumers = None  # pylint: disable=attribute-defined-outside-init
                return
            super()._close(c, cancel_consumers)

        def get_consumers(self, channel):
            return [Consumer(channel, queues=[own_queue(own_smoke_queue())], accept=self.c.app.conf.accept_content,
                             on_message=lambda message: answer_smoke(self.c, message, self.to_pool,
                                                                     worker_state.reserved_requests))]

    return SmokeConsumer


def consuming_status() -> str:
    held = STATE.get("paused")
    return paused_status(held[0], held[1]) if held else f"consuming ({STATE.get('node')})"


def loop_alive() -> None:
    """The event loop's watchdog feed; after a broker outage it also says the worker consumes again."""
    if STATE.pop("waiting_for_broker", None):
        notify(f"WATCHDOG=1\nSTATUS={consuming_status()}")
    else:
        notify("WATCHDOG=1")


def pause_at_start(app) -> None:
    """Before the consumer starts (celeryd_after_setup): a worker (re)started while the app is paused selects none of
    its task queues, so it takes nothing, not even a prefetch, until the pause ends."""
    held = paused_here()
    if held:
        names = [n for n in app.amqp.queues.consume_from if not n.startswith(SMOKE_PREFIX)]
        app.amqp.queues.deselect(names)
        STATE["paused"] = (held, names)


def follow_pause(consumer) -> None:
    """About every second from the event loop: stop taking messages from the task queues while the app's pause marker
    names this process type (sturdy.workers.pause), take them again once it is gone (sturdy.workers.resume). The
    running tasks finish; the smoke queue, on a consumer of its own, stays consumed."""
    if getattr(consumer, "task_consumer", None) is None:  # between a lost broker connection and the next
        return
    held, paused = paused_here(), STATE.get("paused")
    if held and not paused:
        names = [q.name for q in consumer.task_consumer.queues if not q.name.startswith(SMOKE_PREFIX)]
        for name in names:
            consumer.cancel_task_queue(name)
        STATE["paused"] = (held, names)
        notify(f"STATUS={consuming_status()}")
    elif paused and not held:
        names = STATE.pop("paused")[1]
        # Selected again first: add_task_queue consumes a known queue without selecting it, and the task consumer
        # rebuilt after a lost broker connection consumes only the selected ones.
        queues = consumer.app.amqp.queues
        queues.select(list(dict.fromkeys([*queues.consume_from, *names])))
        for name in names:
            consumer.add_task_queue(name)
        notify(f"STATUS={consuming_status()}")


def waiting_for_broker() -> None:
    """Called about every second while kombu retries a lost broker connection in the worker's main process (its loop
    is blocked in kombu's retry, not hung): feeds the watchdog, so a broker outage longer than WatchdogSec= does not get every worker
    killed and restarted, and says so in `systemctl status`."""
    if STATE.get("watchdog") is None:
        return
    since = STATE.setdefault("waiting_for_broker", time.strftime("%H:%M:%S"))
    notify(f"WATCHDOG=1\nSTATUS=waiting for the broker since {since} (reconnecting)")


def feed_while_stopping(environ=None) -> threading.Thread | None:
    """Feed the watchdog from a thread of its own until the process exits, from the warm (or cold) shutdown on.

    systemd keeps watching a unit's watchdog while it stops, but a stopping worker's event loop no longer runs: its
    main thread waits in the pool's join for the running tasks to finish. Unfed, a drain longer than WatchdogSec= got
    the worker SIGABRT mid-task, which is what the warm shutdown exists to avoid. The stop stays bounded by
    TimeoutStopSec= (longer than the longest task), after which systemd kills it."""
    environ = os.environ if environ is None else environ
    usec = int(environ.get("WATCHDOG_USEC") or 0)
    if not usec or STATE.get("stop_feeder") is not None:
        return None

    def feed():
        while True:
            notify("WATCHDOG=1")
            time.sleep(usec / 2e6)

    thread = STATE["stop_feeder"] = threading.Thread(target=feed, name="sturdy-watchdog-while-stopping", daemon=True)
    thread.start()
    return thread


def feed_while_kombu_retries() -> None:
    """kombu retries a lost broker connection inside whatever called it, blocking the worker's event loop for tens of
    seconds: the consumer's reconnect, and a heartbeat or event the loop's timers publish (Connection.ensure ->
    _ensure_connection -> retry_over_time). Between its tries and each second it sleeps, waiting_for_broker feeds the
    watchdog: the loop is blocked in kombu's retry, not hung. (Fed only from the consumer's reconnect, a heartbeat
    published while the broker was stopped got a worker killed after WatchdogSec=.)"""
    from kombu import connection  # pylint: disable=import-outside-toplevel

    original = connection.retry_over_time
    if getattr(original, "sturdy_agent", False):
        return
    signature = inspect.signature(original)

    def retry_over_time(*args, **kwargs):
        call = signature.bind(*args, **kwargs)
        given = call.arguments.get("callback")

        def fed():
            waiting_for_broker()
            if given is not None:
                given()

        call.arguments["callback"] = fed
        return original(*call.args, **call.kwargs)

    retry_over_time.sturdy_agent = True
    connection.retry_over_time = retry_over_time


def install() -> None:
    """Connect to Celery's worker signals (called at interpreter start when STURDY_AGENT=celery)."""
    from celery import signals  # pylint: disable=import-outside-toplevel

    def after_setup(sender=None, instance=None, **_):
        app = instance.app
        STATE.update(main_pid=os.getpid(), node=sender, concurrency=getattr(instance, "concurrency", None),
                     pool=pool_name(getattr(instance, "pool_cls", None)),
                     max_tasks_per_child=getattr(instance, "max_tasks_per_child", None),
                     max_memory_per_child=getattr(instance, "max_memory_per_child", None))
        record = task_record_path()
        if record:
            prune_task_records(os.path.dirname(record), time.time())

        class SmokeTask(app.Task):  # pylint: disable=abstract-method
            """The smoke job answers through reply_backend(): the app's result backend, or the agent's own."""

            @property
            def backend(self):
                return reply_backend(self.app)

            @backend.setter
            def backend(self, value):
                pass

        @app.task(name=SMOKE_TASK, bind=True, base=SmokeTask, acks_late=False, ignore_result=False)
        def _smoke(task, token):  # registered by the decorator, under SMOKE_TASK
            return answer(token, task.app.conf, list(task.app.amqp.queues.consume_from or task.app.amqp.queues), "pool")

        register_health()
        if getattr(instance, "consumer", None) is not None:
            install_gate(instance.consumer)
        pause_at_start(app)

    def ready(sender=None, **_):
        if STATE.get("gate") is not None:
            STATE["gate"].declare_dead_letter_queues()
        notify(f"READY=1\nSTATUS={consuming_status()}")
        usec = int(os.environ.get("WATCHDOG_USEC") or 0)
        timer = getattr(sender, "timer", None)
        if usec and timer is not None:
            # Fed from the worker's event loop: a loop that hangs stops feeding and systemd restarts the unit.
            STATE["watchdog"] = timer.call_repeatedly(usec / 2e6, loop_alive, priority=10)
        if timer is not None:
            timer.call_repeatedly(1.0, follow_pause, (sender,), priority=10)
        if timer is not None and "popped" in STATE:
            timer.call_repeatedly(2.0, push_back_popped, (sender.app,), priority=10)
        feed_while_kombu_retries()

    def init(sender=None, instance=None, **_):
        # Before the worker builds its consumer: the smoke queue gets a consumer step of its own.
        if own_smoke_queue():
            instance.app.steps["consumer"].add(smoke_consumer_step())
        keep_started_jobs_at_shutdown()
        if getattr(instance.app.connection_for_write(), "transport_cls", None) in ("redis", "rediss", "sentinel"):
            keep_messages_popped_as_the_broker_left()

    def stopping(sig=None, how=None, **_):
        notify(f"STOPPING=1\nSTATUS={how} shutdown ({sig})")
        feed_while_stopping()

    def task_started(task_id=None, task=None, **_):
        record_task_start(task_id, getattr(task, "name", None))

    def child_started(**_):
        close_dead_children_records()

    def task_ended(**_):
        record_task_end()

    signals.task_prerun.connect(task_started, weak=False)
    signals.worker_process_init.connect(child_started, weak=False)
    signals.task_postrun.connect(task_ended, weak=False)

    def counter(outcome):
        def count(sender=None, request=None, **_):
            count_outcome(getattr(sender, "name", None) or getattr(request, "task", None), outcome)
        return count

    for signal_name, outcome in COUNTED.items():
        getattr(signals, signal_name).connect(counter(outcome), weak=False)

    def stamp(headers=None, **_):
        # Celery messages carry no publish time: without one, a queue's age cannot be told.
        if isinstance(headers, dict):
            headers.setdefault(SENT_HEADER, time.time())

    signals.before_task_publish.connect(stamp, weak=False)
    signals.celeryd_init.connect(init, weak=False)
    signals.celeryd_after_setup.connect(after_setup, weak=False)
    signals.worker_ready.connect(ready, weak=False)
    signals.worker_shutting_down.connect(stopping, weak=False)


def keep_started_jobs_at_shutdown() -> None:
    """At a warm shutdown, keep in the prefork pool the jobs already handed to a child process whose start the main
    process has not read yet.

    The consumer's close flushes the pool. Since Celery 5.6.3 (celery#10151) that flush drops every job whose start
    notice is not read yet, although a child may already run it: the child finishes it, the main process ignores the
    result, the message is never acknowledged, and the channel's close puts it back (kombu's "Restoring 1
    unacknowledged message(s)"), so the task runs twice. A busy machine widens that window. While the pool closes,
    such a job stays: its start and result are read as the pool drains, and it is acknowledged before the channel
    closes, as Celery up to 5.6.2 did. Jobs no child was given are still dropped and their messages put back."""
    try:
        from celery.concurrency import asynpool  # pylint: disable=import-outside-toplevel
    except ImportError:  # not the prefork pool's module: nothing to keep
        return
    pool_class, flush = asynpool.AsynPool, asynpool.AsynPool.flush
    if getattr(flush, "sturdy", False):
        return

    def writer_of(job):
        ref = getattr(job, "_writer", None)  # a weak reference to the generator that writes it, while it does
        return ref() if ref is not None else None

    def sturdy_flush(self):
        if self._state == asynpool.RUN or self.synack:  # pylint: disable=protected-access
            return flush(self)
        # Written to a child in full: a job still being written is dropped as before (its child never starts it).
        writing = set(getattr(self, "_active_writers", ()))
        given = [job for job in tuple(self._cache.values())  # pylint: disable=protected-access
                 if not job._accepted and getattr(job, "_write_to", None) is not None  # pylint: disable=protected-access
                 and writer_of(job) not in writing]
        for job in given:
            job._accepted = True  # pylint: disable=protected-access
        try:
            return flush(self)
        finally:
            for job in given:
                job._accepted = False  # pylint: disable=protected-access

    sturdy_flush.sturdy = True
    pool_class.flush = sturdy_flush


def keep_messages_popped_as_the_broker_left() -> None:
    """On Redis, keep a message the broker handed out in the instant it went away, instead of losing it.

    kombu's Redis transport takes a message off its list (BRPOP) and records it as unacknowledged in a second command
    (QoS.append). When the broker is gone by then, the message is in this process alone: kombu drops it with the
    connection error, and nothing in the broker can hand it out again. Such a message is kept here and put back at the
    head of its queue once the broker answers again (push_back_popped, on the worker's timer). Kept in memory: a
    worker stopped before the broker is back still loses it."""
    try:
        from kombu.transport import redis as kombu_redis  # pylint: disable=import-outside-toplevel
    except ImportError:  # no redis-py: not the Redis transport
        return
    STATE.setdefault("popped", [])
    original = kombu_redis.QoS.append
    if getattr(original, "sturdy", False):
        return

    def sturdy_append(qos, message, delivery_tag):
        try:
            return original(qos, message, delivery_tag)
        except qos.channel.connection_errors:
            info = message.delivery_info or {}
            STATE["popped"].append((message._raw,  # pylint: disable=protected-access
                                    info.get("exchange"), info.get("routing_key")))
            raise

    sturdy_append.sturdy = True
    kombu_redis.QoS.append = sturdy_append


def push_back_popped(app, log=None) -> int:
    """Put the messages keep_messages_popped_as_the_broker_left kept back at the head of their queues, flagged
    redelivered (the delivery ceiling counts it), once the broker answers; how many. Called on the worker's timer,
    which runs while the worker is connected."""
    popped = STATE.get("popped")
    if not popped:
        return 0
    if log is None:
        from celery.utils.log import get_logger  # pylint: disable=import-outside-toplevel

        log = get_logger("sturdy_agent")
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=2)
            channel = conn.default_channel
            with channel.client.pipeline() as pipe:
                for payload, exchange, routing_key in popped:
                    channel._do_restore_message(payload, exchange, routing_key, pipe,  # pylint: disable=protected-access
                                                leftmost=True)
                pipe.execute()
    except Exception as exc:  # pylint: disable=broad-exception-caught  # the broker is still away: at the next tick
        log.warning("sturdy_agent: %d message(s) the broker handed out as it went away wait to be put back: %s",
                    len(popped), exc)
        return 0
    count = len(popped)
    log.warning("sturdy_agent: put %d message(s) the broker handed out as it went away back at the head of their "
                "queue(s) (kombu had not recorded them as unacknowledged)", count)
    popped.clear()
    return count
