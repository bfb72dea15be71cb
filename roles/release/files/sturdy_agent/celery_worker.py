# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inside a Celery worker (STURDY_AGENT=celery): readiness, watchdog and stop notices to systemd, the smoke task and
its consumer, the sturdy_health query, the gate before the pool (delivery ceiling, argument check, unknown tasks,
rate limit), task records and counts, the publish stamp, and the fixes for messages Celery or kombu would lose.
Imported only in a Celery worker's process; Celery and kombu come from the app's venv."""

from __future__ import annotations

import collections
import datetime
import inspect
import os
import socket
import threading
import time
import types

from .core import STATE, identity, loaded_build, notify, own_queue, own_smoke_queue, reply_url, unit_name
from . import DeadLettered
from .letters import DELIVERIES_TTL, dead_headers, dead_letter_queue, deliveries_key
from .names import DEAD_PREFIX, DEFAULT_MAX_DELIVERIES, SENT_HEADER, SMOKE_PREFIX, SMOKE_TASK
from .records import (close_dead_children_records, close_task_records, count_outcome, prune_task_records,
                      record_task_end, record_task_start, task_record_path)

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


def argument_error(task, args, kwargs) -> str | None:
    """Why the task cannot take these arguments (Celery's own check at the producer, made again in the worker, where
    a message from another build lands), or None."""
    check = getattr(task, "__header__", None)
    if check is None or getattr(task, "typing", True) is False:
        return None
    try:
        check(*(args or ()), **(kwargs or {}))
    except TypeError as exc:
        return str(exc)
    return None


def per_instance_rate(environ=None) -> float | None:
    """STURDY_RATE_LIMIT: tasks per second this instance may start (the process type's rate_limit, split)."""
    environ = os.environ if environ is None else environ
    try:
        rate = float(environ.get("STURDY_RATE_LIMIT") or 0)
    except ValueError:
        return None
    return rate if rate > 0 else None


class Gate:
    """Stands between a worker's consumer and its pool: what Celery hands to the pool passes here first.

    - a message the pool already took and lost (the worker or its child was killed) more than max_deliveries times,
      a message whose arguments the task cannot take, and a message for a task this build does not register are
      moved to their queue's dead-letter queue with the reason, acknowledged, and marked failed in the result
      backend, instead of being run (or dropped, as Celery does with unknown tasks);
    - with STURDY_RATE_LIMIT, tasks start at most at that rate (the smoke job is never held).

    Deliveries: the Redis transport flags a message it restores (its worker died, or it was requeued) as redelivered;
    each hand-off of a redelivered message adds one to a counter in the broker (deliveries_key). The first delivery
    is not counted, so ordinary tasks cost nothing; a message restored before it ever ran counts one more than it ran.
    """

    def __init__(self, consumer, environ=None):
        environ = os.environ if environ is None else environ
        self.consumer = consumer
        self.app = consumer.app
        self.max_deliveries = int(environ.get("STURDY_MAX_DELIVERIES") or DEFAULT_MAX_DELIVERIES)
        self.rate = per_instance_rate(environ)
        self.bucket = None
        self.waiting: collections.deque = collections.deque()
        self.wake = None
        self._conn = None
        self.build = loaded_build()[1] or "unknown"
        self.host = socket.gethostname()
        from celery.utils.log import get_logger  # pylint: disable=import-outside-toplevel

        self.log = get_logger("sturdy_agent")
        if self.rate:
            from kombu.utils.limits import TokenBucket  # pylint: disable=import-outside-toplevel

            self.bucket = TokenBucket(self.rate, capacity=1)

    def connection(self):
        if self._conn is None:
            self._conn = self.app.connection_for_write()
        self._conn.ensure_connection(max_retries=3)
        return self._conn

    def deliveries(self, request) -> int:
        """How many times the pool has been handed this message, this time included."""
        headers = request.message.headers or {}
        info = request.delivery_info or {}
        if not (info.get("redelivered") or headers.get("redelivered")):
            return 1
        if isinstance(headers.get("x-delivery-count"), int):  # RabbitMQ quorum queues count themselves
            return headers["x-delivery-count"] + 1
        client = getattr(self.connection().default_channel, "client", None)
        if client is None or not hasattr(client, "incr"):
            return 2
        key = deliveries_key(headers)
        with client.pipeline() as pipe:
            count, dummy = pipe.incr(key).expire(key, DELIVERIES_TTL).execute()
        return int(count) + 1

    def queue_of(self, message) -> str:
        """The queue a message was taken from (the consumed queue its routing key names)."""
        info = message.delivery_info or {}
        key = info.get("routing_key") or ""
        for queue in self.app.amqp.queues.values():
            if key in (queue.routing_key, queue.name):
                return queue.name
        return key or self.app.conf.task_default_queue

    def dead_letter(self, message, reason: str, deliveries) -> None:
        """Publish a copy of `message` to its queue's dead-letter queue (before the original is acknowledged: a
        crash in between leaves a duplicate there, never a loss)."""
        from kombu import Producer  # pylint: disable=import-outside-toplevel

        queue = self.queue_of(message)
        target = dead_letter_queue(queue)
        headers = dead_headers(dict(message.headers or {}), reason, queue, deliveries, self.build, self.host,
                               time.time())
        props = message.properties or {}
        channel = self.connection().default_channel
        Producer(channel).publish(
            message.body, exchange="", routing_key=target, declare=[own_queue(target)],
            content_type=message.content_type, content_encoding=message.content_encoding, headers=headers,
            **{k: props[k] for k in ("correlation_id", "reply_to", "priority") if props.get(k) is not None})
        self.log.error("sturdy_agent: task %s[%s] moved to dead-letter queue %s: %s (python -m sturdy_agent dead, "
                       "or the sturdy.workers.dead_letters playbook, lists and requeues it)",
                       headers.get("task"), headers.get("id"), target, reason)
        record = task_record_path()
        if record and headers.get("id"):
            close_task_records(os.path.dirname(record), f"dead-lettered to {target}", time.time(),
                               task_id=headers.get("id"))

    def declare_dead_letter_queues(self) -> None:
        """Declare the dead-letter queue of every queue this worker consumes, before it takes a message: a broker that
        dead-letters by itself (a RabbitMQ policy's delivery-limit) drops a message whose dead-letter queue is missing."""
        names = [q for q in (self.app.amqp.queues.consume_from or self.app.amqp.queues)
                 if not q.startswith(SMOKE_PREFIX) and not q.startswith(DEAD_PREFIX)]
        try:
            channel = self.connection().default_channel
            for name in names:
                own_queue(dead_letter_queue(name)).declare(channel=channel)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # the gate declares it again on first use
            self.log.warning("sturdy_agent: could not declare the dead-letter queues of %s: %s", ", ".join(names), exc)

    def on_task_request(self, handoff):
        from celery.worker import state as worker_state  # pylint: disable=import-outside-toplevel

        def gate(request):
            if request.name == SMOKE_TASK:
                return handoff(request)
            if self.bucket is not None:
                self.waiting.append(request)
                return self.pace(pass_gate)
            return pass_gate(request)

        def pass_gate(request):
            reason, deliveries = None, 1
            try:
                wrong = argument_error(request.task, request.args, request.kwargs)
                if wrong:
                    reason = f"arguments do not fit {request.name} in build {self.build}: {wrong}"
                else:
                    deliveries = self.deliveries(request)
                    if deliveries > self.max_deliveries:
                        reason = (f"delivered {deliveries} times without an acknowledgement (max_deliveries="
                                  f"{self.max_deliveries}): the process running it died each time")
                if reason:
                    self.dead_letter(request.message, reason, deliveries)
            except Exception as exc:  # pylint: disable=broad-exception-caught  # the broker is unreachable: run it
                self.log.warning("sturdy_agent: cannot check task %s[%s] (%s); handing it to the pool",
                                 request.name, request.id, exc)
                reason = None
            if not reason:
                return handoff(request)
            request.acknowledge()
            worker_state.task_ready(request)
            request.task.backend.mark_as_failure(request.id, DeadLettered(reason), request=request._context,
                                                 store_result=request.store_errors)
            return None

        return gate

    def pace(self, pass_gate, due=False) -> None:
        """Hand waiting tasks on as the bucket allows; one timer at a time wakes it for the next.

        Not Celery's rate limiting (Consumer._limit_task): it adds a timer entry per held task and per early wake-up,
        and an event loop with more than ten entries due fires ten, then sleeps a second: under a backlog a declared
        10/s fell to 1/s."""
        if due:
            self.wake = None
        while self.waiting and self.bucket.can_consume(1):
            pass_gate(self.waiting.popleft())
        if self.waiting and self.wake is None:
            self.wake = self.consumer.timer.call_after(max(self.bucket.expected_time(1), 0.001), self.pace,
                                                       (pass_gate, True), priority=6)

    def before_reject(self, original, reason):
        """Wrap a Consumer handler that rejects a message (Celery deletes it on Redis): a copy goes to the
        dead-letter queue first, with reason(message, exc), and the original is then acknowledged rather than rejected
        (a RabbitMQ dead-letter policy would otherwise add a second copy, without the reason). When no copy could be
        made, the handler rejects it as Celery does (and such a policy still keeps it)."""
        def copy_then_reject(body, message, exc):
            try:
                self.dead_letter(message, reason(message, exc), 1)
            except Exception as err:  # pylint: disable=broad-exception-caught  # Celery still logs and rejects it
                self.log.error("sturdy_agent: could not move %s to its dead-letter queue: %s",
                               (message.headers or {}).get("id"), err)
                return original(body, message, exc)
            return original(body, _AckOnReject(message), exc)

        return copy_then_reject


class _AckOnReject:
    """A message whose reject acknowledges it: its dead-letter copy is already made."""

    def __init__(self, message):
        self._message = message

    def __getattr__(self, name):
        return getattr(self._message, name)

    def reject_log_error(self, logger, errors, requeue=False):  # pylint: disable=unused-argument
        return self._message.ack_log_error(logger, errors)

    def reject(self, requeue=False):  # pylint: disable=unused-argument
        return self._message.ack()


def install_gate(consumer) -> None:
    """Put a Gate in front of the worker's pool: called once the consumer exists and before it builds its handlers
    (celeryd_after_setup is sent when the worker starts, before its consumer does)."""
    gate = STATE["gate"] = Gate(consumer)
    consumer.on_task_request = gate.on_task_request(consumer.on_task_request)
    consumer.on_unknown_task = gate.before_reject(
        consumer.on_unknown_task,
        lambda message, exc: f"unknown task {(message.headers or {}).get('task') or '?'} in build {gate.build}")
    consumer.on_invalid_task = gate.before_reject(
        consumer.on_invalid_task, lambda message, exc: f"invalid message in build {gate.build}: {exc}")


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


def loop_alive() -> None:
    """The event loop's watchdog feed; after a broker outage it also says the worker consumes again."""
    if STATE.pop("waiting_for_broker", None):
        notify(f"WATCHDOG=1\nSTATUS=consuming ({STATE.get('node')})")
    else:
        notify("WATCHDOG=1")


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
        def smoke(task, token):
            return answer(token, task.app.conf, list(task.app.amqp.queues.consume_from or task.app.amqp.queues), "pool")

        STATE["smoke"] = smoke
        register_health()
        if getattr(instance, "consumer", None) is not None:
            install_gate(instance.consumer)

    def ready(sender=None, **_):
        if STATE.get("gate") is not None:
            STATE["gate"].declare_dead_letter_queues()
        notify(f"READY=1\nSTATUS=consuming ({STATE.get('node')})")
        usec = int(os.environ.get("WATCHDOG_USEC") or 0)
        timer = getattr(sender, "timer", None)
        if usec and timer is not None:
            # Fed from the worker's event loop: a loop that hangs stops feeding and systemd restarts the unit.
            STATE["watchdog"] = timer.call_repeatedly(usec / 2e6, loop_alive, priority=10)
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
