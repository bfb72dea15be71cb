# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the deploy and operators run against a Celery app (python -m sturdy_agent ...): the smoke jobs, queue stats,
the workers' health, dead letters, the task names a build registers and those waiting, task states."""

from __future__ import annotations

import json
import time
import uuid

from .core import own_queue, reply_url
from .letters import dead_letter_queue, describe_dead, requeue_headers
from .names import DEAD_HEADER, DEAD_PREFIX, SENT_HEADER, SMOKE_PREFIX, SMOKE_TASK


def load_app(spec: str):
    """The Celery app named like `-A`: module, or module:attribute."""
    import importlib  # pylint: disable=import-outside-toplevel

    module_name, dummy, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    if attr:
        return getattr(module, attr)
    for name in ("app", "celery"):
        if hasattr(getattr(module, name, None), "send_task"):
            return getattr(module, name)
    raise SystemExit(f"sturdy_agent: no Celery app named app or celery in {module_name}; pass module:attribute")


def smoke(celery_app: str, targets: list[str], timeout: float) -> list[dict]:
    """Send one smoke job to each queue and wait for all answers until the deadline.

    A real queue that already holds messages gets no job (it would wait behind them, past any deadline): its proof is
    the workers consuming it now, each naming its build (the sturdy_health query their main processes answer)."""
    app = load_app(celery_app)
    if not app.conf.result_backend:
        # The app stores no results: the answers come back as the workers' smoke task sends them (reply_backend()).
        app.conf.result_backend = reply_url(app.connection_for_write().as_uri(include_password=True))
    # A result backend that goes away while the answers are awaited is retried about once a second for the timeout,
    # not Celery's 20 tries, so that a broker gone for good fails the smoke job within its deadline.
    app.conf.result_backend_transport_options = {
        **(getattr(app.conf, "result_backend_transport_options", None) or {}),
        "retry_policy": {"max_retries": max(1, int(timeout)), "interval_start": 0, "interval_step": 1,
                         "interval_max": 1}}
    backlog = waiting(app, [q for q in targets if not q.startswith(SMOKE_PREFIX)])
    sent, found = [], {}
    # One deadline for taking every job: a broker that refuses connections fails them all within the timeout, not
    # one timeout per queue.
    send_by = time.monotonic() + timeout
    for queue in targets:
        if backlog.get(queue):
            continue
        token = uuid.uuid4().hex
        started = time.monotonic()
        # expires: a job nobody took in time is dropped instead of answering a later deploy.
        # A real queue is named as the app routes it; an instance's smoke queue is declared as its worker declares it.
        destination = own_queue(queue) if queue.startswith(SMOKE_PREFIX) else queue
        try:
            result = through_an_outage(lambda: app.send_task(SMOKE_TASK, args=[token], queue=destination,
                                                             expires=timeout), send_by)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
            found[queue] = {"queue": queue, "token": token, **failed(exc)}
            continue
        sent.append((queue, token, started, result))
    deadline = time.monotonic() + timeout
    for queue, token, started, result in sent:
        entry = {"queue": queue, "token": token}
        try:
            got = through_an_outage(lambda: result.get(timeout=max(0.1, deadline - time.monotonic()),
                                                       propagate=True), deadline)
            entry.update(ok=got.get("token") == token, answer=got, latency=round(time.monotonic() - started, 3))
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
            entry.update(failed(exc))
        found[queue] = entry
    if any(backlog.values()):
        started = time.monotonic()
        nodes = through_an_outage(lambda: health_of(app, min(timeout, 5.0)), started + timeout)
        for queue, depth in backlog.items():
            if depth:
                consumers = [{"node": node, **{k: reply.get(k) for k in ("build_id", "host", "unit")}}
                             for node, reply in sorted(nodes.items()) if queue in reply.get("queues", [])]
                found[queue] = {"queue": queue, "backlog": depth, "consumers": consumers, "ok": bool(consumers),
                                "latency": round(time.monotonic() - started, 3)}
    return [found[queue] for queue in targets if queue in found]


# What a broker (or result backend) that does not answer raises: kombu's, redis-py's and the socket's own errors.
UNREACHABLE = ("OperationalError", "ConnectionError", "ConnectionRefusedError", "ConnectionResetError",
               "RecvError", "AMQPConnectionError", "gaierror")


def failed(exc: BaseException) -> dict:
    """A smoke entry for a job that failed: its error, and whether the broker could not be reached at all (or the
    result backend: Celery gives up reconnecting to it with a RuntimeError)."""
    socket_error = isinstance(exc, OSError) and not isinstance(exc, TimeoutError)
    backend_gone = isinstance(exc, RuntimeError) and "Retry limit exceeded while trying to reconnect" in str(exc)
    text = " ".join(str(exc).split())
    return {"ok": False, "error": f"{type(exc).__name__}: {text}" if text else type(exc).__name__,
            "unreachable": type(exc).__name__ in UNREACHABLE or socket_error or backend_gone}


def through_an_outage(call, deadline: float):
    """call() again each second while the broker does not answer, until `deadline` (time.monotonic()): a broker
    restarted during a deploy (seconds) delays its smoke jobs instead of failing them; one still away then does."""
    while True:
        try:
            return call()
        except Exception as exc:  # pylint: disable=broad-exception-caught  # only an unreachable broker is waited for
            if not failed(exc)["unreachable"] or time.monotonic() + 1 > deadline:
                raise
            time.sleep(1)


def waiting(app, queues: list[str]) -> dict:
    """How many messages each queue holds (0 where it cannot be told: the smoke job is sent then)."""
    counts = dict.fromkeys(queues, 0)
    if not queues:
        return counts
    try:
        with app.connection_for_read() as conn:
            channel = conn.channel()
            for queue in queues:
                counts[queue], channel = _depth(conn, channel, queue)
    except Exception:  # pylint: disable=broad-exception-caught  # the job itself tells
        pass
    return counts


def health_of(app, timeout: float) -> dict:
    """{node: sturdy_health answer} of every worker of the app that answers within `timeout`."""
    replies = app.control.broadcast("sturdy_health", reply=True, timeout=timeout)
    return {node: answer for reply in replies or [] for node, answer in reply.items()
            if isinstance(answer, dict) and "queues" in answer}


def oldest_waiting(raw, now: float) -> dict:
    """The oldest message of a Redis list queue (kombu's JSON envelope): its task, id and age when stamped."""
    try:
        message = json.loads(raw)
        headers = message.get("headers") or {}
    except (TypeError, ValueError, AttributeError):
        return {"oldest_task": None, "oldest_age": None, "oldest_stamped": False}
    sent = headers.get(SENT_HEADER)
    return {"oldest_task": headers.get("task"), "oldest_id": headers.get("id"),
            "oldest_age": round(max(0.0, now - float(sent)), 1) if isinstance(sent, (int, float)) else None,
            "oldest_stamped": isinstance(sent, (int, float))}


def queue_stats(celery_app: str, queues: list[str], timeout: float, expect: int = 0) -> list[dict]:
    """Depth, oldest waiting message and live consumers of each queue, through the app's own broker connection.

    Consumers are the workers that answer a remote-control ping for their queues within `timeout` (a worker whose
    event loop is alive answers even while its pool runs long tasks), or the first `expect` to answer: the caller
    knows how many run, and need not wait out the timeout once they all did.
    """
    app = load_app(celery_app)
    found = []
    with app.connection_for_read() as conn:
        channel = conn.channel()
        for queue in queues:
            entry = {"queue": queue, "depth": 0, "oldest_task": None, "oldest_age": None, "oldest_stamped": None,
                     "dead_letter_depth": None}
            try:
                entry["depth"], channel = _depth(conn, channel, queue)
                entry["dead_letter_depth"], channel = _depth(conn, channel, dead_letter_queue(queue))
            except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
                entry["error"] = f"{type(exc).__name__}: {exc}"
                channel = conn.channel()
            client = getattr(channel, "client", None)
            if entry["depth"] and client is not None and hasattr(client, "lindex"):
                # Redis: LPUSH to publish, BRPOP to consume, so the oldest message is the last.
                entry.update(oldest_waiting(client.lindex(queue, -1), time.time()))
            found.append(entry)
    try:
        replies = app.control.inspect(timeout=timeout, limit=expect or None).active_queues() or {}
    except Exception as exc:  # pylint: disable=broad-exception-caught  # reported, the depths still count
        replies, error = {}, f"{type(exc).__name__}: {exc}"
    else:
        error = None
    for entry in found:
        entry["consumers"] = sorted(node for node, consumed in replies.items()
                                    if any(q.get("name") == entry["queue"] for q in consumed or []))
        if error:
            entry["consumers_error"] = error
    return found


def _depth(conn, channel, queue: str):
    """(message count, channel): 0 for a queue not declared yet (AMQP closes the channel then: a new one)."""
    try:
        return channel.queue_declare(queue=queue, passive=True).message_count, channel
    except Exception as exc:  # pylint: disable=broad-exception-caught  # a queue not declared yet is empty
        if "NOT_FOUND" not in str(exc) and "404" not in str(exc):
            raise
        return 0, conn.channel()


def _headers_of(raw) -> dict:
    try:
        return json.loads(raw).get("headers") or {}
    except (TypeError, ValueError, AttributeError):
        return {}


def dead_letters(celery_app: str, action: str, queues: list[str], limit: int = 0, confirm: bool = False) -> list[dict]:
    """list, requeue or discard the dead letters of each queue (never the queue itself: only sturdy.dead.<queue>).

    requeue publishes each dead letter back to its queue before removing it (a failure in between leaves a copy in the
    dead-letter queue, never a loss), oldest first; discard needs confirm=True."""
    from kombu import Producer  # pylint: disable=import-outside-toplevel

    if action == "discard" and not confirm:
        raise SystemExit("sturdy_agent: discard deletes dead letters for good; pass --confirm-discard to mean it")
    app = load_app(celery_app)
    found = []
    now = time.time()
    with app.connection_for_write() as conn:
        channel = conn.channel()
        for queue in queues:
            source = queue[len(DEAD_PREFIX):] if queue.startswith(DEAD_PREFIX) else queue
            target = dead_letter_queue(source)
            depth, channel = _depth(conn, channel, target)
            entry = {"queue": source, "dead_letter_queue": target, "count": depth}
            if action == "list":
                client = getattr(channel, "client", None)
                if client is not None and hasattr(client, "lrange"):
                    # Redis: published with LPUSH, so the oldest is last; reading does not take them.
                    raws = client.lrange(target, -(limit or 1000), -1)[::-1]
                    entry.update(describe_dead([_headers_of(r) for r in raws], now))
                else:
                    got = []
                    while depth and len(got) < min(depth, limit or 1000):
                        message = channel.basic_get(target, no_ack=False)
                        if message is None:
                            break
                        got.append(dict(message.headers or {}))
                    entry.update(describe_dead(got, now))
                    # Not acknowledged: closing the channel gives them back in order.
                    channel.close()
                    channel = conn.channel()
                entry["count"] = depth
            else:
                declare = [own_queue(source)]
                if action == "requeue" and depth and conn.transport.driver_type == "amqp":
                    # Not declared on RabbitMQ: the app declares its queues there with arguments (a quorum type) that a
                    # plain declaration would contradict; and a message sent to a queue that does not exist is lost.
                    declare = []
                    try:
                        channel.queue_declare(queue=source, passive=True)
                    except Exception as exc:  # pylint: disable=broad-exception-caught  # NOT_FOUND, named below
                        raise SystemExit(f"sturdy_agent: queue {source} does not exist on the broker ({exc}); start "
                                         "its workers (they declare it), then requeue its dead letters") from exc
                done = 0
                producer = Producer(channel)
                # Only what is there now: a requeued message that dies again comes back behind them.
                limit = min(limit, depth) if limit else depth
                source_queue = own_queue(target)(channel)
                while done < limit:
                    # Through kombu (not the channel): a message that acknowledges itself on every transport.
                    message = source_queue.get(no_ack=False)
                    if message is None:
                        break
                    if action == "requeue":
                        headers = dict(message.headers or {})
                        back = headers.get(DEAD_HEADER + "queue") or source
                        props = message.properties or {}
                        producer.publish(
                            message.body, exchange="", routing_key=back, declare=declare if back == source else [],
                            content_type=message.content_type, content_encoding=message.content_encoding,
                            headers=requeue_headers(headers),
                            **{k: props[k] for k in ("correlation_id", "reply_to", "priority")
                               if props.get(k) is not None})
                    message.ack()
                    done += 1
                entry["moved"] = done
                entry["count"], channel = _depth(conn, channel, target)
            found.append(entry)
    return found


def registered(celery_app: str) -> list[str]:
    """The task names the app registers, as its worker would see them (the app's modules and its `imports`/`include`
    loaded, the app finalized), without starting a worker. The agent's smoke task counts: every worker has it."""
    app = load_app(celery_app)
    app.loader.import_default_modules()
    app.finalize(auto=True)
    return sorted(set(app.tasks.keys()) | {SMOKE_TASK})


def waiting_tasks(celery_app: str, queues: list[str], scan: int = 200000) -> list[dict]:
    """Per queue, how many waiting messages name each task (read without taking them: Redis only), up to `scan`
    messages per queue; `scanned` says how many were read."""
    app = load_app(celery_app)
    found = []
    with app.connection_for_read() as conn:
        channel = conn.channel()
        client = getattr(channel, "client", None)
        for queue in queues:
            entry = {"queue": queue, "tasks": {}, "scanned": 0}
            if client is None or not hasattr(client, "lrange"):
                # RabbitMQ hands a message out only as a delivery, which a quorum queue counts towards its
                # delivery-limit: the names are left unread, the depth is told.
                entry["error"] = (f"the {conn.transport.driver_type} broker shows no waiting message without "
                                  "delivering it, so the task names waiting in it are not read")
                entry["depth"], channel = _depth(conn, channel, queue)
                found.append(entry)
                continue
            depth = client.llen(queue)
            for start in range(0, min(depth, scan), 1000):
                for raw in client.lrange(queue, start, min(start + 999, scan - 1)):
                    name = str(_headers_of(raw).get("task") or "?")
                    entry["tasks"][name] = entry["tasks"].get(name, 0) + 1
                    entry["scanned"] += 1
            entry["depth"] = depth
            found.append(entry)
    return found


def task_states(celery_app: str, ids: list[str], scan: int = 10000) -> list[dict]:
    """Each task's state in the result backend and, on Redis, whether the broker holds it unacknowledged and which
    dead-letter queue holds it (the newest `scan` messages of each are read)."""
    app = load_app(celery_app)
    unacked, dead = "", {}
    with app.connection_for_read() as conn:
        client = getattr(conn.channel(), "client", None)
        if client is not None and hasattr(client, "hvals"):
            # kombu's Redis transport keeps delivered, unacknowledged messages in the hash "unacked".
            unacked = "\n".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                                for v in client.hvals("unacked"))
            for key in client.scan_iter(match=f"{DEAD_PREFIX}*"):
                name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
                if client.type(key) in (b"list", "list"):
                    raw = client.lrange(key, 0, scan - 1)  # kombu pushes on the left: the newest first
                    dead[name] = "\n".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                                           for v in raw)
    found = []
    for task_id in ids:
        entry = {"id": task_id, "unacked": task_id in unacked}
        held = [name for name, text in sorted(dead.items()) if task_id in text]
        if held:
            entry["dead_lettered"] = held[0]
        try:
            entry["state"] = app.AsyncResult(task_id).state
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per task
            entry["error"] = f"{type(exc).__name__}: {exc}"
        found.append(entry)
    return found
