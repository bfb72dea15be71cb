# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inside a Celery worker: the gate before the pool. A message whose workers kept dying (the delivery ceiling), whose
arguments the task cannot take, or for a task the build does not register goes to its queue's dead-letter queue with
the reason; with STURDY_RATE_LIMIT, tasks start at most at that rate. Installed by celery_worker once the worker's
consumer exists."""

from __future__ import annotations

import collections
import os
import socket
import time

from . import DeadLettered
from .core import STATE, loaded_build, own_queue
from .letters import DELIVERIES_TTL, dead_headers, dead_letter_queue, deliveries_key
from .names import DEAD_PREFIX, DEFAULT_MAX_DELIVERIES, SMOKE_PREFIX, SMOKE_TASK
from .records import close_task_records, task_record_path


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
